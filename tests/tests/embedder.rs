//! [3/13]: one binary for embedders. A host binary that calls `run_if_worker()` first thing is its
//! own worker: with no `rho-worker` on disk or on `PATH`, its isolated plugins answer, crash and
//! time out as under `rho-worker`, in a complete sandbox. And a worker of another protocol
//! version is refused with one line, in both directions.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use rho_runtime::protocol::PROTOCOL_VERSION;
use rho_runtime::{DirOptions, Host, Isolation, WorkerOptions};
use rho_tests::{embedder_bin, install, rho_worker_bin};
use serde_json::Value;

#[test]
fn a_host_binary_is_its_own_worker() {
    // The binary alone in a directory of its own: nothing named rho-worker beside it.
    let alone = tempfile::tempdir().unwrap();
    let binary = alone.path().join("my-agent");
    std::fs::copy(embedder_bin(), &binary).unwrap();
    let plugins = tempfile::tempdir_in(rho_tests::host_dir("rho-embedder-tests")).unwrap();
    install(plugins.path(), "echo");
    install(plugins.path(), "faults");
    let out = run_alone(&binary, alone.path(), &[plugins.path()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let outcome = |tool: &str| {
        lines
            .iter()
            .find(|l| l["tool"] == tool)
            .map(|l| l["outcome"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(outcome("echo"), "ok", "{stdout}");
    assert_eq!(outcome("segfault"), "crashed", "{stdout}");
    assert_eq!(outcome("spin"), "timed_out", "{stdout}");
    let sandboxes: Vec<&Value> = lines
        .iter()
        .filter(|l| l.get("sandbox").is_some())
        .collect();
    assert_eq!(sandboxes.len(), 2, "{stdout}");
    for report in sandboxes {
        assert_eq!(report["complete"], true, "{report}");
    }
}

/// A "worker" of another release, as a host sees it: it says it is confined, in protocol 2.
const OLD_WORKER: &str = r#"#!/usr/bin/env python3
import json, os, struct, time
message = json.dumps({"confined": {"protocol": 2, "sandbox": {}}}).encode()
body = struct.pack("<I", len(message)) + message
os.write(0, struct.pack("<I", len(body)) + body)
time.sleep(10)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_another_protocol_version_is_refused_in_one_line() {
    let dir = tempfile::tempdir_in(rho_tests::host_dir("rho-embedder-tests")).unwrap();
    let fake = dir.path().join("old-rho-worker");
    std::fs::write(&fake, OLD_WORKER).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plugins = tempfile::tempdir_in(rho_tests::host_dir("rho-embedder-tests")).unwrap();
    install(plugins.path(), "echo");
    let options = DirOptions {
        isolation: Isolation::Process(WorkerOptions {
            executable: Some(fake.clone()),
            spares: 0,
            ..WorkerOptions::default()
        }),
        ..DirOptions::default()
    };
    let (host, reports) = Host::builder()
        .plugin_dir(plugins.path(), options)
        .build()
        .await
        .unwrap();
    let errors = &reports[0].errors;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(&format!(
            "speaks protocol 2, this host speaks {PROTOCOL_VERSION}"
        )),
        "{}",
        errors[0]
    );
    assert!(!errors[0].contains('\n'));
    host.shutdown().await;

    // And the other way: this release's worker started by a host of another protocol.
    let out = Command::new(rho_worker_bin())
        .args(["--rho-worker", "2", "libecho.so"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the host speaks protocol 2, this worker speaks {PROTOCOL_VERSION}"
        )),
        "{stderr}"
    );
}

/// The body of the first block of `section` opened by `fence` (```` ```toml ````, ...).
fn block<'a>(section: &'a str, fence: &str) -> &'a str {
    let start = section.find(fence).expect("the block") + fence.len();
    let end = section[start..].find("```").expect("the block's end") + start;
    &section[start..end]
}

/// README's Cargo.toml and program under `heading`, as an embedder copies them into a crate of
/// their own (`name`), built with the embedder fixture's lock and target directory: the binary.
fn readme_program(heading: &str, name: &str) -> std::path::PathBuf {
    let readme = std::fs::read_to_string(rho_tests::workspace_dir().join("README.md")).unwrap();
    let section = &readme[readme.find(heading).unwrap()..];
    let toml = block(section, "```toml\n");
    let program = block(section, "```rust\n");
    assert!(toml.contains(r#"path = "../rho/core""#), "{toml}");
    assert!(
        program.contains("rho_runtime::run_if_worker();"),
        "{program}"
    );
    let rho = rho_tests::workspace_dir();
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[workspace]\n\n{}",
        toml.replace("../rho/", &format!("{}/", rho.to_str().unwrap()))
    );
    let project = tempfile::tempdir_in(rho_tests::host_dir("rho-embedder-tests")).unwrap();
    std::fs::create_dir(project.path().join("src")).unwrap();
    std::fs::write(project.path().join("Cargo.toml"), manifest).unwrap();
    std::fs::write(project.path().join("src/main.rs"), program).unwrap();
    // The fixture's lock: the same versions, so the fixture's build of them is used.
    std::fs::copy(
        rho.join("tests/fixtures/embedder/Cargo.lock"),
        project.path().join("Cargo.lock"),
    )
    .unwrap();
    embedder_bin();
    let (target, release) = rho_tests::fixture_target("embedder");
    let mut build = rho_tests::cargo();
    build
        .args(["build", "--quiet", "--offline", "--manifest-path"])
        .arg(project.path().join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target);
    if release {
        build.arg("--release");
    }
    let built = build.output().unwrap();
    assert!(
        built.status.success(),
        "README's `{heading}` does not build:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    target
        .join(if release { "release" } else { "debug" })
        .join(name)
}

/// A directory where an embedder runs its binary: `plugins` beside it holding `echo`, and the
/// binary copied in (no rho-worker anywhere); the directory and the copy.
fn run_dir(binary: &Path) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir_in(rho_tests::host_dir("rho-embedder-tests")).unwrap();
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    install(&dir.path().join("plugins"), "echo");
    let alone = dir.path().join(binary.file_name().unwrap());
    std::fs::copy(binary, &alone).unwrap();
    (dir, alone)
}

#[test]
fn the_readme_host_is_its_own_worker() {
    let binary = readme_program("## Embed rho in your host", "my-agent");
    let (dir, alone) = run_dir(&binary);
    let out = run_alone(&alone, dir.path(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        (out.status.code(), stdout.as_ref()),
        (Some(0), "ok: hi (Some(true))\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the official MCP Python SDK reads of `binary ARGS` run in `dir` as an MCP server on
/// stdio (`tests/python/embedded_mcp.py`).
fn mcp_client_report(binary: &Path, dir: &Path, args: &[&str]) -> Value {
    let mut client = Command::new("python3");
    client
        .arg(rho_tests::workspace_dir().join("tests/python/embedded_mcp.py"))
        .arg(binary)
        .arg(dir)
        .args(args)
        .env("PYTHONPATH", rho_tests::python_sdk("mcp>=1.9,<2", "mcp1"));
    rho_tests::client_report(client, "an embedder's MCP server")
}

#[test]
fn the_readme_mcp_host_serves_the_python_sdk() {
    let binary = readme_program("### Serve your host over MCP", "my-mcp-agent");
    let (dir, alone) = run_dir(&binary);
    let report = mcp_client_report(&alone, dir.path(), &[]);
    assert_eq!(report["tools"], serde_json::json!(["echo"]), "{report}");
    assert_eq!(report["echo"], "hi over MCP", "{report}");
    assert_eq!(report["outcome"], "ok", "{report}");
}

#[test]
fn the_embedder_fixture_serves_its_plugins_over_mcp() {
    let (dir, alone) = run_dir(&embedder_bin());
    let plugins = dir.path().join("plugins");
    let report = mcp_client_report(&alone, dir.path(), &["--serve", plugins.to_str().unwrap()]);
    assert_eq!(report["echo"], "hi over MCP", "{report}");
    assert_eq!(report["is_error"], false, "{report}");
}

/// Runs `binary` in `dir` (also its home) as a user's shell would with nothing of rho's around:
/// the environment cleared but for a system `PATH`, so no `RHO_WORKER` and no rho-worker on it.
fn run_alone(binary: &Path, dir: &Path, args: &[&Path]) -> std::process::Output {
    Command::new(binary)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .output()
        .unwrap()
}
