//! Wasm component plugins: a plugin crate built for `wasm32-wasip2` with the same
//! `export_plugin!` is a component of the `rho:plugin@3.0.0` world (`wit/plugin.wit`, the same
//! text as `rho_plugin_api::source::WIT`), run here by wasmtime.
//!
//! A component is sandboxed by construction: it reaches nothing but what the host links into it,
//! WASI with the source's grants (granted paths preopened at their own paths, read-only or
//! read-write; the granted environment keys; sockets only with the network) and a scratch
//! directory of its own at `/tmp` (an in-memory file system of bounded size,
//! [`WasmLimits::scratch_bytes`]). Each call runs in an instance of its own, made from the
//! pre-instantiated component ahead of the call (no state carries from one call to the next;
//! see [`WasmPlugin::call`]), with its memory bounded, and is stopped at its deadline or
//! cancellation by epoch interruption (the instance is discarded); a trap ends the call
//! `crashed`, naming the trap and the component's last words on stderr. A call starts on its
//! caller's thread and yields at each epoch tick (a millisecond): a short call never changes
//! threads, a long one goes on on a blocking thread after its first tick.
//!
//! A [`WasmEngine`] given to a host loads the `.wasm` files of its plugin directories beside
//! their native libraries, with the same trust checks, hashing, hot reload, events, gate,
//! timeouts, typed outcomes and quarantine; a component gets its directory's grants:
//!
//! ```no_run
//! use rho_runtime::{DirOptions, Host};
//! use rho_runtime_wasm::{WasmEngine, WasmLimits};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = WasmEngine::builder()
//!     .limits(WasmLimits::default())
//!     .cache_dir("/var/cache/rho/wasm") // compiled once, across restarts
//!     .build()?;
//! let (host, _) = Host::builder()
//!     .components(engine)
//!     .plugin_dir("plugins", DirOptions::default()) // echo.wasm, libfiles.so, ...
//!     .build()
//!     .await?;
//! let result = host.call("echo", serde_json::json!({"text": "hi"})).await;
//! println!("{}: {}", result.outcome, result.text());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod cache;
mod component;
mod engine;
mod error;
mod plugin;
mod shared;
mod stderr;
mod ticker;

pub use component::WORLD_VERSION;
pub use engine::{WasmEngine, WasmEngineBuilder};
pub use error::WasmError;
pub use plugin::WasmPlugin;
pub use shared::WasmLimits;

#[cfg(test)]
mod tests {
    #[test]
    fn the_world_bound_here_is_the_one_plugins_implement() {
        assert_eq!(
            include_str!("../wit/plugin.wit"),
            rho_runtime::plugin_api::source::WIT
        );
    }
}
