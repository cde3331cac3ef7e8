//! `rho plugin check FILE` (and `cargo xtask check-plugin`): load one library the way a host
//! does and show what it offers ([`check`]); [`show`] prints what any loader found (the CLI's
//! for components).

use std::path::Path;

use rho_runtime::ToolSpec;
use rho_worker::loader::{CopyDir, PluginFile, PluginInfo, load_in_process};
use serde_json::json;

/// `println!` that ignores a closed stdout (`rho plugin check FILE | head`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Loads `path`; prints its identity and tools (or JSON) on stdout, or the one-line load error on
/// stderr. `Ok(true)` when it loaded with every tool accepted.
pub fn check(path: &Path, as_json: bool) -> Result<bool, crate::DevkitError> {
    match inspect(path)? {
        Ok(checked) => Ok(show(&checked, as_json)),
        Err(error) => {
            eprintln!("rho: {error}");
            Ok(false)
        }
    }
}

/// Loads the library at `path` in this process, as `rho plugin check` does, and returns what it
/// offers; the inner `Err` is the one-line load error. The outer `Err`: no private copy could be
/// made.
pub fn inspect(path: &Path) -> Result<Result<Checked, rho_runtime::LoadError>, crate::DevkitError> {
    let copies = CopyDir::new().map_err(|e| crate::DevkitError::Io {
        path: std::env::temp_dir(),
        reason: e.to_string(),
    })?;
    Ok(PluginFile::open(path, &copies)
        .and_then(|file| load_in_process(&file))
        .map(|loaded| Checked {
            info: loaded.info,
            tools: loaded.tools,
            rejected: loaded.rejected,
        }))
}

/// What a check found in a plugin file, whatever loaded it.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Its identity (for a component, `interface_version` is its world's version).
    pub info: PluginInfo,
    /// Its tools as the host accepted them.
    pub tools: Vec<ToolSpec>,
    /// One line per tool the host refused.
    pub rejected: Vec<String>,
}

/// Prints `checked` (identity and tools, or JSON) on stdout and its refused tools on stderr.
/// `true` when every tool was accepted.
pub fn show(checked: &Checked, as_json: bool) -> bool {
    let info = &checked.info;
    if as_json {
        let value = json!({
            "plugin": info.name,
            "version": info.version,
            "interface_version": info.interface_version,
            "path": info.path,
            "sha256": info.sha256,
            "capabilities": info.capabilities,
            "tools": checked.tools,
            "refused": checked.rejected,
        });
        out!("{value:#}");
    } else {
        out!("plugin:            {} {}", info.name, info.version);
        out!("interface version: {}", info.interface_version);
        out!(
            "file:              {} (sha256 {})",
            info.path.display(),
            info.sha256
        );
        out!("asks for:          {}", info.capabilities);
        out!("tools:             {}", checked.tools.len());
        for tool in &checked.tools {
            let timeout = tool
                .timeout_ms
                .map(|t| format!("{t} ms"))
                .unwrap_or_else(|| "the host's default".into());
            out!("\n  {}: {}", tool.name, tool.description);
            if let Some(title) = &tool.title {
                out!("    title: {title}");
            }
            out!("    hints: {}", tool.hints);
            out!("    timeout: {timeout}");
            if let Some(bytes) = tool.max_result_bytes {
                out!("    result limit: {bytes} bytes");
            }
            let schema = serde_json::to_string_pretty(&tool.parameters).unwrap_or_default();
            for line in schema.lines() {
                out!("    {line}");
            }
            if let Some(output) = &tool.output_schema {
                out!("    answers:");
                let schema = serde_json::to_string_pretty(output).unwrap_or_default();
                for line in schema.lines() {
                    out!("    {line}");
                }
            }
        }
    }
    for line in &checked.rejected {
        eprintln!("rho: {line}");
    }
    checked.rejected.is_empty()
}
