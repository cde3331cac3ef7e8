//! `rho-worker`: runs one isolated plugin for a rho host (see `rho_worker`). A host finds it
//! beside its own executable, on `PATH`, or where `$RHO_WORKER` says.

fn main() -> std::process::ExitCode {
    rho_worker::main()
}
