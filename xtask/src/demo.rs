//! `cargo xtask demo`: the example plugins in a short scripted session, every outcome shown.

use serde_json::json;

use crate::plugins::{self, cargo, target_dir};

/// The demo session: one call of each outcome, with an image and details.
fn script(readme: &str) -> serde_json::Value {
    json!([
        {
            "text": "Let me echo, draw and read in parallel.",
            "tool_calls": [
                {"id": "echo-1", "name": "echo", "arguments": {"text": "hello from a plugin"}},
                {"id": "draw-1", "name": "checkerboard", "arguments": {"size": 64}},
                {"id": "read-1", "name": "read_passage", "arguments": {"path": readme, "start_line": 1, "end_line": 3}}
            ]
        },
        {
            "text": "Now the things that go wrong.",
            "tool_calls": [
                {"id": "missing", "name": "read_passage", "arguments": {"path": "/no/such/file.txt", "start_line": 1, "end_line": 2}},
                {"id": "denied", "name": "exit_process", "arguments": {"code": 3}},
                {"id": "hang", "name": "spin_cancellable", "arguments": {}},
                {"id": "boom", "name": "panic", "arguments": {"message": "the plugin fell over"}},
                {"id": "typo", "name": "checkerboard", "arguments": {"size": "large"}},
                {"id": "ghost", "name": "teleport", "arguments": {}}
            ]
        },
        {"text": "Every call ended exactly once, and the host is still here."}
    ])
}

pub fn run() -> Result<(), String> {
    let out = plugins::default_out();
    plugins::build_and_install(false, &out)?;
    let status = cargo()
        .args(["build", "--quiet", "-p", "rho-cli"])
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        return Err("rho-cli failed to build".into());
    }
    let readme = plugins::workspace_root().join("README.md");
    let script_path = target_dir().join("demo-script.json");
    let script = script(&readme.display().to_string());
    std::fs::write(&script_path, format!("{script:#}"))
        .map_err(|e| format!("cannot write {}: {e}", script_path.display()))?;
    let rho = target_dir().join("debug").join("rho");
    eprintln!(
        "\n$ rho run {} --plugins {} --gate deny:exit_process --timeout-ms 500\n",
        script_path.display(),
        out.display()
    );
    let status = std::process::Command::new(&rho)
        .arg("run")
        .arg(&script_path)
        .arg("--plugins")
        .arg(&out)
        .args(["--gate", "deny:exit_process", "--timeout-ms", "500"])
        .status()
        .map_err(|e| format!("cannot run {}: {e}", rho.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("rho run ended with {status}"))
    }
}
