//! Systems without a sandbox yet: the plugin runs unconfined but for the resource limits, and its
//! report says so (rho's sandbox is Linux's; macOS's comes with Seatbelt).

use rho_protocol::SandboxReport;
use rho_protocol::frames::SandboxSpec;

/// Runs the plugin unconfined: the report names what is missing.
pub(crate) fn enter(_spec: &SandboxSpec) -> Result<SandboxReport, String> {
    let mut report = SandboxReport::default();
    report.missing.push(format!(
        "a sandbox on {} (rho's sandbox is Linux's)",
        std::env::consts::OS
    ));
    Ok(report)
}

/// Nothing to confine with.
pub(crate) fn confine(_spec: &SandboxSpec, _report: &mut SandboxReport) {}

/// Counts nothing: no `/proc` to read.
pub(crate) struct ThreadCounter;

impl ThreadCounter {
    /// None here.
    pub(crate) fn open() -> Option<ThreadCounter> {
        None
    }

    /// None here.
    pub(crate) fn count(&self) -> Option<usize> {
        None
    }
}

/// Nothing left to kill or check without a sandbox.
pub(crate) fn after_call(
    _report: &SandboxReport,
    _threads: Option<(usize, &ThreadCounter)>,
) -> bool {
    false
}
