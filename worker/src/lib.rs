//! rho's worker side: what runs plugin code. It holds the plugin loader (open a plugin file once,
//! check it, copy and hash it, load it with abi_stable, call it), the worker process's body (the
//! `rho-worker` program, or any host binary that runs [`run_if_worker`] first thing), and the
//! sandbox that confines a worker before the plugin's first instruction, behind a platform seam
//! ([`sandbox`]: Linux's namespaces, Landlock and seccomp; macOS's Seatbelt).
//!
//! **Internal to rho**: a host does not use this crate directly: the runtime (`rho-runtime`) loads in process and
//! starts workers through it. Tools that load one file outside a host (`rho plugin check`, the
//! benchmarks) use [`loader`].
//!
//! A host binary that is its own worker calls [`run_if_worker`] as the first line of `main`,
//! before any thread exists; started as a worker, it never returns:
//!
//! ```no_run
//! rho_worker::run_if_worker();
//! // ... then build the tokio runtime and the host as usual
//! ```

#![warn(missing_docs)]

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
compile_error!("rho's worker runs on Linux and macOS");

mod error;
mod exec;
pub mod grants;
pub mod loader;
mod process;
pub mod sandbox;
pub mod walk;

pub use error::{LoadError, one_line, shown};
pub use process::{WORKER_ARG, main, run_if_worker, self_worker};
