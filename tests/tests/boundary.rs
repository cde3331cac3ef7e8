//! [2/9]: what crosses from a plugin is checked in process exactly as the isolated protocol checks
//! it: strings that are not UTF-8, details nested too deep, names that break the rules; and every
//! error line stays one bounded line.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::Path;
use std::process::Command;

use rho_runtime::{CallOptions, DirOptions, Host, Isolation, Outcome, ScanReport, WorkerOptions};
use rho_tests::{attacks_bad_names, call, host_with, install, plugin_dir, rho_bin, timeout};
use serde_json::{Value, json};

async fn run(host: &Host, tool: &str, args: Value) -> rho_runtime::ToolResult {
    host.call_with(&call("c", tool, args), &CallOptions::default())
        .await
}

/// A host serving `dir` (isolated or in process) with a 10 s timeout and no quarantine, and the
/// directory's load report.
async fn serve(dir: &Path, isolated: bool) -> (Host, ScanReport) {
    let options = DirOptions {
        isolation: if isolated {
            Isolation::Process(WorkerOptions {
                spares: 0,
                ..WorkerOptions::default()
            })
        } else {
            Isolation::InProcess
        },
        ..DirOptions::in_process()
    };
    host_with(dir, options, |b| {
        // These tests crash tools on purpose, more than a quarantine allows.
        b.runner(timeout(10_000))
            .quarantine(rho_runtime::QuarantinePolicy {
                max_failures: 0,
                window: std::time::Duration::from_secs(1),
                ..Default::default()
            })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strings_that_are_not_utf8_end_the_call_crashed_naming_the_field() {
    attacks_bad_names();
    let dir = plugin_dir(&["attacks"]);
    for isolated in [false, true] {
        let (host, report) = serve(dir.path(), isolated).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        for (field, says) in [
            ("text", "answered with a text that is not UTF-8"),
            ("error", "answered with an error message that is not UTF-8"),
            ("mime", "answered with a mime type that is not UTF-8"),
            ("update", "sent a partial update that is not UTF-8"),
            ("details", "answered with details that are not UTF-8"),
        ] {
            let r = run(&host, "bad_text", json!({ "field": field })).await;
            assert_eq!(r.outcome, Outcome::Crashed, "{field}: {}", &*r.text());
            assert!(r.text().contains(says), "{field}: {}", &*r.text());
            let r = run(&host, "ids", json!({})).await;
            assert_eq!(r.outcome, Outcome::Ok, "after {field}: {}", &*r.text());
        }
        host.shutdown().await;
    }
}

#[test]
fn rho_call_never_prints_what_is_not_utf8() {
    attacks_bad_names();
    let dir = plugin_dir(&["attacks"]);
    for field in ["text", "error", "mime", "update", "details"] {
        let out = Command::new(rho_bin())
            .args(["call", "bad_text", "--json", "--plugins"])
            .arg(dir.path())
            .arg(json!({ "field": field }).to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
        String::from_utf8(out.stderr).expect("stderr is UTF-8");
        let result: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(result["outcome"], "crashed", "{field}: {stdout}");
        assert_eq!(out.status.code(), Some(1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn details_nest_up_to_the_bound_and_deeper_ones_are_refused_without_harm() {
    attacks_bad_names();
    let dir = plugin_dir(&["attacks"]);
    for isolated in [false, true] {
        let (host, _) = serve(dir.path(), isolated).await;
        let deep = |depth: usize| run(&host, "deep_details", json!({ "depth": depth }));
        // 200 deep: past serde_json's own 128, within rho's bound.
        let r = deep(200).await;
        assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
        let mut depth = 0;
        let mut at = r.details.as_ref().unwrap();
        while let Value::Array(items) = at {
            depth += 1;
            at = &items[0];
        }
        assert_eq!(depth, 200);
        let r = deep(rho_runtime::plugin_api::MAX_DETAILS_DEPTH).await;
        assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
        for too_deep in [rho_runtime::plugin_api::MAX_DETAILS_DEPTH + 1, 100_000] {
            let r = deep(too_deep).await;
            assert_eq!(r.outcome, Outcome::Crashed, "{too_deep}: {}", &*r.text());
            assert!(
                r.text()
                    .ends_with("answered with details nested deeper than 512 levels"),
                "{}",
                &*r.text()
            );
        }
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_whose_message_panics_is_an_isolated_crash() {
    // In process Rust aborts on a panic while formatting a panic message (documented); isolated,
    // the worker dies and the host serves on.
    attacks_bad_names();
    let dir = plugin_dir(&["attacks"]);
    let (host, _) = serve(dir.path(), true).await;
    let r = run(&host, "panic_display", json!({})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", &*r.text());
    assert!(r.text().contains("SIGABRT"), "{}", &*r.text());
    let r = run(&host, "ids", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_names_that_break_the_rules_are_refused_in_one_bounded_line_each() {
    let variant = attacks_bad_names();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&variant, dir.path().join("libattacks.so")).unwrap();
    install(dir.path(), "echo");
    for isolated in [false, true] {
        let (host, report) = serve(dir.path(), isolated).await;
        let errors = report.errors;
        assert_eq!(errors.len(), 3, "{errors:?}");
        for line in &errors {
            assert!(!line.contains('\n'), "{line:?}");
            assert!(line.chars().count() < 400, "{} characters", line.len());
        }
        assert!(errors.iter().any(|l| l.contains("its name is not UTF-8")));
        assert!(
            errors
                .iter()
                .any(|l| l.contains(r"forged\nrho: plugin_loaded evil"))
        );
        let names: Vec<String> = host.tools().into_iter().map(|t| t.name).collect();
        assert!(names.contains(&"ids".to_owned()) && names.contains(&"echo".to_owned()));
        host.shutdown().await;
    }
    // `rho tools` lists the rest and exits 0; stderr has the three refusals, one line each.
    let out = Command::new(rho_bin())
        .args(["tools", "--json", "--plugins"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 3, "{stderr}");
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "echo")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_name_cannot_split_or_forge_an_error_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("evil\nrho: plugin_loaded forged.so"),
        b"not a library",
    )
    .unwrap();
    std::fs::write(
        dir.path().join(format!("{}.so", "y".repeat(250))),
        b"not a library",
    )
    .unwrap();
    let (host, report) = serve(dir.path(), false).await;
    let errors = report.errors;
    assert_eq!(errors.len(), 2, "{errors:?}");
    for line in &errors {
        assert!(!line.contains('\n'), "{line:?}");
        assert!(
            line.chars().count() < 400,
            "{} characters",
            line.chars().count()
        );
    }
    assert!(
        errors
            .iter()
            .any(|l| l.contains(r"evil\nrho: plugin_loaded forged.so"))
    );
    host.shutdown().await;
}
