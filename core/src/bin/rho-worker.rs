//! `rho-worker`: runs one isolated plugin for a rho host (see `rho_core::worker`).

fn main() -> std::process::ExitCode {
    rho_core::worker::main()
}
