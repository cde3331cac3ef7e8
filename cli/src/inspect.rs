//! What a plugin file offers, loaded as a host loads it: for `rho plugin check` and the
//! declaration `rho plugin publish` sends with the files.

/// What the component at `file` offers, loaded as a host does (no grants, the default limits,
/// nothing cached); `Err` is one line naming the file.
#[cfg(feature = "wasm")]
pub fn component(file: &std::path::Path) -> Result<rho_devkit::check::Checked, String> {
    use rho_runtime_wasm::{WORLD_VERSION, WasmEngine, WasmLimits};
    let failed = |reason: String| format!("{}: {reason}", file.display());
    let bytes = std::fs::read(file).map_err(|e| failed(e.to_string()))?;
    let engine = WasmEngine::new(WasmLimits::default()).map_err(|e| failed(e.to_string()))?;
    let plugin = engine
        .load(file, &bytes, &rho_runtime::Grants::default())
        .map_err(|e| e.to_string())?;
    Ok(rho_devkit::check::Checked {
        info: rho_worker::loader::PluginInfo {
            name: plugin.name().to_owned(),
            version: plugin.version().to_owned(),
            interface_version: WORLD_VERSION,
            path: file.to_owned(),
            sha256: rho_runtime::sha256_hex(&bytes),
            capabilities: plugin.capabilities().clone(),
            granted: None,
        },
        tools: plugin.tools().to_vec(),
        rejected: plugin.rejected().to_vec(),
    })
}

/// Without the `wasm` feature a component cannot be loaded: one line says so.
#[cfg(not(feature = "wasm"))]
pub fn component(file: &std::path::Path) -> Result<rho_devkit::check::Checked, String> {
    Err(format!(
        "{}: this rho was built without components (the `wasm` feature)",
        file.display()
    ))
}
