//! The live view's per-tool health table, drawn from core's [`HealthView`] (the one fold of
//! events into per-tool figures), fed by what a view sees: a session's bus or a `rho serve`
//! journal.

use rho_runtime::{Event, HealthView};

/// Health of every tool seen so far, and whether it changed since the last table.
#[derive(Default)]
pub struct Health {
    view: HealthView,
    changed: bool,
}

impl Health {
    /// Takes one event into account.
    pub fn observe(&mut self, event: &Event) {
        self.changed |= self.view.observe(event);
    }

    /// The figures of every tool seen so far (see [`HealthView::stats`]).
    pub fn stats(&self) -> Vec<rho_runtime::ToolStats> {
        self.view.stats()
    }

    /// Whether anything changed since the last table.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// The table of tools that were called or are quarantined.
    pub fn table(&mut self) -> String {
        self.changed = false;
        let mut out = format!(
            "{:<20} {:<18} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9} {:>9}  state\n",
            "tool", "origin", "calls", "ok", "error", "crash", "t/out", "other", "p50 ms", "p99 ms"
        );
        let now_ms = crate::render::now_ms();
        for t in self.view.stats() {
            if t.calls == 0 && t.quarantine.is_none() {
                continue;
            }
            out.push_str(&format!(
                "{:<20} {:<18} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9.1} {:>9.1}  {}\n",
                crate::render::terminal_safe(&t.tool),
                crate::render::terminal_safe(&t.origin.release()),
                t.calls,
                t.ok,
                t.errors,
                t.crashed,
                t.timed_out,
                t.other(),
                t.p50_ms,
                t.p99_ms,
                crate::render::quarantine_state(&t, now_ms),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_runtime::OutputView;
    use rho_runtime::{EventKind, Outcome};

    #[test]
    fn a_quarantine_shows_its_cool_down_its_probe_or_none() {
        use crate::render::quarantine_state;
        let mut t = rho_runtime::ToolStats::default();
        assert_eq!(quarantine_state(&t, 1000), "");
        t.quarantine = Some("crashed".into());
        assert_eq!(quarantine_state(&t, 1000), "QUARANTINED");
        t.probe_after_ms = Some(95_500);
        assert_eq!(quarantine_state(&t, 1000), "QUARANTINED, probe in 95 s");
        assert_eq!(
            quarantine_state(&t, 96_000),
            "QUARANTINED, next call probes"
        );
        t.probing = true;
        assert_eq!(quarantine_state(&t, 96_000), "probing");
    }

    fn end(tool: &str, outcome: Outcome, ms: f64) -> Event {
        Event {
            seq: 1,
            ts_ms: 0,
            session_id: None,
            kind: EventKind::ToolExecutionEnd {
                call_id: "c".into(),
                tool: tool.into(),
                outcome,
                output: OutputView {
                    text: String::new(),
                    images: vec![],
                    content: vec![],
                },
                is_error: outcome.is_error(),
                structured: None,
                details: None,
                full_text: None,
                duration_ms: ms,
                served_by: None,
                principal: None,
                decision: None,
            },
        }
    }

    #[test]
    fn counts_and_percentiles() {
        let mut h = Health::default();
        for ms in 1..=100 {
            h.observe(&end("echo", Outcome::Ok, f64::from(ms)));
        }
        h.observe(&end("panic", Outcome::Crashed, 2.0));
        let table = h.table();
        let echo = table.lines().find(|l| l.starts_with("echo")).unwrap();
        assert!(echo.contains("   100    100      0"), "{echo}");
        assert!(echo.contains("50.0") && echo.contains("99.0"), "{echo}");
        assert!(!h.changed());
    }
}
