//! [7/9], [10/13]: the official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! pinned at 0.1.16 and 0.2.0-alpha.12 with the Node.js it needs in
//! `tests/conformance/package-lock.json`) against `rho serve --http` serving the `conformance`
//! fixture plugin: the 0.1 line's suite, and the 0.2 line's requirements of the 2025-11-25 and
//! 2026-07-28 revisions. Every scenario passes but those listed, each with its reason, in the
//! run's expected-failures file in `tests/conformance/`.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::PathBuf;
use std::process::Command;

use rho_tests::{HttpServer, install, npm_project, workspace_dir};

/// The suites, installed from the npm registry into the target directory when missing or stale.
fn suites() -> PathBuf {
    let dir = npm_project("conformance");
    for package in [STABLE, NEXT] {
        assert!(dir.join(package).exists(), "{package} in {}", dir.display());
    }
    dir
}

/// The 0.1 line's entry point, and the 0.2 line's (installed under an npm alias).
const STABLE: &str = "node_modules/@modelcontextprotocol/conformance/dist/index.js";
const NEXT: &str = "node_modules/conformance-0.2/dist/index.js";

/// Runs the suite at `entry` against a fresh `rho serve --http` serving the `conformance`
/// fixture, with `args` (`--requirements REVISION` for the 0.2 line) and the expected failures
/// in `tests/conformance/EXPECTED`; asserts that every failure was expected and prints the
/// score (`cargo test --test conformance -- --nocapture`).
fn passes_but_for_what_is_listed(entry: &str, args: &[&str], expected: &str) -> String {
    let suites = suites();
    let plugins = tempfile::tempdir_in(rho_tests::host_dir("rho-conformance")).unwrap();
    install(plugins.path(), "conformance");
    // Its own (the suites run at once), outside the plugin directory.
    let state = tempfile::tempdir().unwrap();
    let journal = state.path().join("conformance.jsonl");
    let server = HttpServer::start(plugins.path(), &["--http", "127.0.0.1:0"], &journal);
    let output = tempfile::tempdir().unwrap();
    let out = Command::new(suites.join("node_modules/.bin/node"))
        .arg(suites.join(entry))
        .args(["server", "--url", &server.url()])
        .args(args)
        .arg("--expected-failures")
        .arg(workspace_dir().join("tests/conformance").join(expected))
        .arg("--output-dir")
        .arg(output.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let total = text
        .lines()
        .find(|l| l.starts_with("Total: "))
        .unwrap_or("no total");
    println!("conformance {entry} {args:?}: {total}");
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all failures are expected"), "{text}");
    text
}

#[test]
fn the_official_conformance_suite_passes_but_for_what_is_listed() {
    passes_but_for_what_is_listed(STABLE, &[], "expected-failures.yaml");
}

/// The 0.2 line's frozen list of what the 2025-11-25 revision requires.
#[test]
fn the_2025_11_25_requirements_pass_but_for_what_is_listed() {
    passes_but_for_what_is_listed(
        NEXT,
        &["--requirements", "2025-11-25"],
        "expected-failures-0.2-2025-11-25.yaml",
    );
}

/// The 0.2 line's frozen list of what the 2026-07-28 revision requires (stateless requests,
/// input-required rounds, caching, DNS rebinding, headers), and the Tasks extension's scenarios,
/// which the revision runs unscored: here every one of them must pass.
#[test]
fn the_2026_07_28_requirements_pass_but_for_what_is_listed() {
    let text = passes_but_for_what_is_listed(
        NEXT,
        &["--requirements", "2026-07-28"],
        "expected-failures-0.2-2026-07-28.yaml",
    );
    let summary = text.split("=== SUMMARY ===").nth(1).unwrap_or_default();
    let tasks: Vec<(bool, &str)> = summary
        .lines()
        .filter_map(|line| {
            let (mark, rest) = line.split_once(' ')?;
            let name = rest.split(':').next()?.trim();
            name.starts_with("tasks-")
                .then_some((mark == "\u{2713}", name))
        })
        .collect();
    assert!(tasks.len() >= 10, "the Tasks scenarios ran: {summary}");
    let failed: Vec<&str> = tasks
        .iter()
        .filter(|(passed, _)| !passed)
        .map(|(_, name)| *name)
        .collect();
    assert!(
        failed.is_empty(),
        "Tasks scenarios failed: {failed:?} ({summary})"
    );
}
