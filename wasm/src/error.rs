//! [`WasmError`]: why a component or the engine could not be used.

/// Why a component could not be used. One line each.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WasmError {
    /// The engine could not be set up.
    #[error("the wasm engine could not be set up: {0}")]
    Engine(String),
    /// The compile cache's directory cannot be used (it is made if missing).
    #[error("{dir}: the compiled-component cache cannot be used: {reason}")]
    Cache {
        /// The directory, as shown.
        dir: String,
        /// Why (others can write it, it cannot be made...).
        reason: String,
    },
    /// A file is not a component of the `rho:plugin` world, or failed to describe itself.
    #[error("{file}: not a usable rho component: {reason}")]
    Load {
        /// The file, as shown.
        file: String,
        /// Why.
        reason: String,
    },
}
