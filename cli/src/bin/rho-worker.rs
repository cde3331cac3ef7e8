//! `rho-worker`: runs one isolated plugin for a rho host (see `rho_core::worker`). A host finds it
//! beside its own executable, on `PATH`, or where `$RHO_WORKER` says.

fn main() -> std::process::ExitCode {
    rho_core::worker::main()
}
