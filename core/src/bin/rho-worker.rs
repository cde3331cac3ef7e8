//! `rho-worker`: runs one isolated plugin for a rho host (see `rho_core::isolate`).

fn main() -> std::process::ExitCode {
    rho_core::isolate::worker::main()
}
