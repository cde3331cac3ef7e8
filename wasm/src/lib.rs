//! Wasm component plugins: a plugin crate built for `wasm32-wasip2` with the same
//! `export_plugin!` is a component of the `rho:plugin@3.0.0` world (`wit/plugin.wit`, the same
//! text as `rho_plugin_api::source::WIT`), run here by wasmtime.
//!
//! A component is sandboxed by construction: it reaches nothing but what the host links into it,
//! WASI with the source's grants (granted paths preopened at their own paths, read-only or
//! read-write; the granted environment keys; sockets only with the network). Each call runs in a
//! fresh instance of the pre-instantiated component (no state carries from
//! one call to the next), on a blocking thread, with its memory bounded, and is stopped at its
//! deadline or cancellation by epoch interruption (the instance is discarded); a trap ends the
//! call `crashed`, naming the trap and the component's last words on stderr.
//!
//! [`WasmSource`] serves a component's tools in a host, through the same gate, timeouts, typed
//! outcomes, events and quarantine as every tool:
//!
//! ```no_run
//! use rho_runtime::Host;
//! use rho_runtime_wasm::WasmSource;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let (host, _) = Host::builder()
//!     .source("wasm:echo", WasmSource::file("echo.wasm"))
//!     .build()
//!     .await?;
//! let result = host.call("echo", serde_json::json!({"text": "hi"})).await;
//! println!("{}: {}", result.outcome, result.text());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod engine;
mod source;

pub use engine::{WasmEngine, WasmError, WasmLimits, WasmPlugin};
pub use source::WasmSource;

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
