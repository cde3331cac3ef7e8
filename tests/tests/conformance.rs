//! [7/9]: the official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned with
//! the Node.js it needs in `tests/conformance/package-lock.json`) against `rho serve --http`
//! serving the `conformance` fixture plugin. Every scenario passes but those listed, each with its
//! reason, in `tests/conformance/expected-failures.yaml`.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::{Path, PathBuf};
use std::process::Command;

use rho_tests::{HttpServer, install, npm_project, workspace_dir};

/// The suite, installed from the npm registry into the target directory when missing or stale.
fn suite() -> PathBuf {
    let dir = npm_project("conformance");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js")
            .exists()
    );
    dir
}

fn run_suite(suite: &Path, url: &str, output: &Path) -> (bool, String) {
    let out = Command::new(suite.join("node_modules/.bin/node"))
        .arg(suite.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", url, "--expected-failures"])
        .arg(workspace_dir().join("tests/conformance/expected-failures.yaml"))
        .arg("--output-dir")
        .arg(output)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_official_conformance_suite_passes_but_for_what_is_listed() {
    let suite = suite();
    let plugins = tempfile::tempdir_in(rho_tests::host_dir("rho-conformance")).unwrap();
    install(plugins.path(), "conformance");
    let journal = plugins.path().join("../conformance.jsonl");
    let server = HttpServer::start(plugins.path(), &["--http", "127.0.0.1:0"], &journal);
    let output = tempfile::tempdir().unwrap();
    let (passed, text) = run_suite(&suite, &server.url(), output.path());
    let total = text
        .lines()
        .find(|l| l.starts_with("Total: "))
        .unwrap_or("no total")
        .to_owned();
    // The score, for the record (`cargo test --test conformance -- --nocapture`).
    println!("conformance: {total}");
    assert!(passed, "{text}");
    assert!(text.contains("all failures are expected"), "{text}");
}
