//! `cargo xtask check-plugin PATH`: load one library and show what a host would see.

use std::path::Path;

use rho_core::loader::{CopyDir, PluginFile, load_in_process};
use serde_json::json;

/// Loads `path`; prints its identity and tools (or JSON), or the one-line load error. `Ok(true)`
/// when it loaded with every tool accepted.
pub fn check(path: &Path, as_json: bool) -> Result<bool, String> {
    let copies = CopyDir::new().map_err(|e| e.to_string())?;
    let loaded = match PluginFile::open(path, &copies).and_then(|file| load_in_process(&file)) {
        Ok(loaded) => loaded,
        Err(error) => {
            eprintln!("{error}");
            return Ok(false);
        }
    };
    let info = &loaded.info;
    if as_json {
        let value = json!({
            "plugin": info.name,
            "version": info.version,
            "interface_version": info.interface_version,
            "path": info.path,
            "sha256": info.sha256,
            "tools": loaded.tools,
            "refused": loaded.rejected,
        });
        println!("{value:#}");
    } else {
        println!("plugin:            {} {}", info.name, info.version);
        println!("interface version: {}", info.interface_version);
        println!(
            "file:              {} (sha256 {})",
            info.path.display(),
            info.sha256
        );
        println!("tools:             {}", loaded.tools.len());
        for tool in &loaded.tools {
            let timeout = tool
                .timeout_ms
                .map(|t| format!("{t} ms"))
                .unwrap_or_else(|| "the host's default".into());
            println!("\n  {}: {}", tool.name, tool.description);
            println!("    timeout: {timeout}");
            let schema = serde_json::to_string_pretty(&tool.parameters).unwrap_or_default();
            for line in schema.lines() {
                println!("    {line}");
            }
        }
    }
    for line in &loaded.rejected {
        eprintln!("{line}");
    }
    Ok(loaded.rejected.is_empty())
}
