//! `cargo xtask demo`: the example plugins and the fault injectors in a short scripted session
//! that shows every one of the eight outcomes, then a count line.

use serde_json::json;

use crate::plugins::{self, target_dir};

/// The demo session: every outcome, an image and details, and a tool quarantined after three
/// crashes. Call ids as a model gives them (`call_N`), which say nothing of the tool: a line
/// reads `ok echo #call_1 ok`.
fn script(readme: &str) -> serde_json::Value {
    json!([
        {
            "text": "Let me echo, draw and read in parallel.",
            "tool_calls": [
                {"id": "call_1", "name": "echo", "arguments": {"text": "hello from a plugin"}},
                {"id": "call_2", "name": "checkerboard", "arguments": {"size": 64}},
                {"id": "call_3", "name": "read_passage", "arguments": {"path": readme, "start_line": 1, "end_line": 3}}
            ]
        },
        {
            "text": "Now the things that go wrong.",
            "tool_calls": [
                {"id": "call_4", "name": "read_passage", "arguments": {"path": "/no/such/file.txt", "start_line": 1, "end_line": 2}},
                {"id": "call_5", "name": "exit_process", "arguments": {"code": 3}},
                {"id": "call_6", "name": "spin_cancellable", "arguments": {}},
                {"id": "call_7", "name": "panic", "arguments": {"message": "the plugin fell over"}},
                {"id": "call_8", "name": "checkerboard", "arguments": {"size": "large"}},
                {"id": "call_9", "name": "teleport", "arguments": {}}
            ]
        },
        {
            "text": "It keeps falling over.",
            "tool_calls": [
                {"id": "call_10", "name": "panic", "arguments": {"message": "again"}},
                {"id": "call_11", "name": "panic", "arguments": {"message": "and again"}}
            ]
        },
        {
            "text": "Three crashes: rho has quarantined it.",
            "tool_calls": [
                {"id": "call_12", "name": "panic", "arguments": {"message": "once more"}}
            ]
        },
        {"text": "Every call ended exactly once, and the host is still here."}
    ])
}

/// The file the demo reads: the README of the checkout (granted to the plugins, wherever the
/// checkout is, `/tmp` included).
fn readable_file() -> std::path::PathBuf {
    plugins::workspace_root().join("README.md")
}

/// Writes the demo's script to `path`.
pub fn write_script(path: &std::path::Path) -> Result<(), String> {
    let script = script(&readable_file().display().to_string());
    std::fs::write(path, format!("{script:#}"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

pub fn run() -> Result<(), String> {
    // The examples and the fault injectors, apart from `target/plugins` (what `build-plugins`
    // installs for real use has no fault injectors).
    let out = target_dir().join("demo").join("plugins");
    let demo_plugins = plugins::examples_and(&["faults"])?;
    eprintln!("building the example plugins, the fault injectors and rho (one cargo build)");
    plugins::build_and_install(&demo_plugins, &["rho-runtime-cli"], false, &out)?;
    let workspace = plugins::workspace_root();
    let script_path = target_dir().join("demo").join("script.json");
    write_script(&script_path)?;
    let rho = target_dir().join("debug").join("rho");
    eprintln!(
        "\n$ rho run {} --plugins {} --grant-read {} --gate deny:exit_process --timeout-ms 500\n",
        script_path.display(),
        out.display(),
        workspace.display(),
    );
    let status = std::process::Command::new(&rho)
        .arg("run")
        .arg(&script_path)
        .arg("--plugins")
        .arg(&out)
        .arg("--grant-read")
        .arg(&workspace)
        .args(["--gate", "deny:exit_process", "--timeout-ms", "500"])
        .status()
        .map_err(|e| format!("cannot run {}: {e}", rho.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("rho run ended with {status}"))
    }
}
