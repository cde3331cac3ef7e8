//! [4/8]: hot reload from a watched directory with real file-system events and real builds;
//! quarantine lifted by a reload; the permission checks.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rho_runtime::{CallOptions, DirOptions, EventKind, Host, Outcome, ScanReport, Trust};
use rho_tests::{call, faults_variants, host_with, install_bytes, plugin_lib, timeout, wait_for};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

/// A host serving `dir`, watched (the default 50 ms debounce), with a 5 s default timeout.
async fn watched(dir: &std::path::Path, options: DirOptions) -> Host {
    let (host, _report) = host_with(dir, options, |b| b.watch(true).runner(timeout(5_000))).await;
    host
}

async fn tag(host: &Host) -> (Outcome, String) {
    let r = host
        .call_with(&call("t", "build_tag", json!({})), &CallOptions::default())
        .await;
    (r.outcome, r.text().into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_replace_delete_and_garbage() {
    let (default, v2) = faults_variants();
    let dir = tempfile::tempdir().unwrap();
    let host = watched(dir.path(), DirOptions::in_process()).await;
    let mut sub = host.subscribe();
    assert!(host.tools().is_empty());
    let target = dir.path().join("libfaults.so");

    // A new file: loaded, its tools appear.
    install_bytes(&target, &std::fs::read(default).unwrap());
    let loaded = wait_for(&mut sub, WAIT, |e| {
        matches!(e.kind, EventKind::PluginLoaded { .. })
    })
    .await;
    let Some(EventKind::PluginLoaded {
        plugin,
        tools,
        isolated,
        ..
    }) = loaded.map(|e| e.kind.clone())
    else {
        panic!("no plugin_loaded")
    };
    assert_eq!((plugin.as_str(), isolated), ("faults", false));
    assert!(tools.iter().any(|t| t.name == "build_tag"));
    assert_eq!(tag(&host).await, (Outcome::Ok, "default".into()));

    // A second build: reloaded, the new answer.
    install_bytes(&target, &std::fs::read(v2).unwrap());
    let reloaded = wait_for(&mut sub, WAIT, |e| {
        matches!(e.kind, EventKind::PluginReloaded { .. })
    })
    .await
    .expect("plugin_reloaded");
    let EventKind::PluginReloaded {
        plugin,
        old_version,
        new_version,
        tools_added,
        tools_removed,
        ..
    } = &reloaded.kind
    else {
        unreachable!()
    };
    assert_eq!(
        (plugin.as_str(), old_version.as_str(), new_version.as_str()),
        ("faults", "0.1.0", "0.1.0")
    );
    assert!(tools_added.is_empty() && tools_removed.is_empty());
    assert_eq!(tag(&host).await, (Outcome::Ok, "v2".into()));

    // Garbage over it: one error, the old version keeps serving.
    install_bytes(&target, b"\x7fELF but not really");
    let failed = wait_for(&mut sub, WAIT, |e| {
        matches!(e.kind, EventKind::PluginLoadFailed { .. })
    })
    .await
    .expect("plugin_load_failed");
    let EventKind::PluginLoadFailed { error, .. } = &failed.kind else {
        unreachable!()
    };
    assert!(
        error.contains("libfaults.so: not a loadable library"),
        "{error}"
    );
    assert_eq!(tag(&host).await, (Outcome::Ok, "v2".into()));

    // A garbage file beside it: its own error, nothing else changes.
    std::fs::write(dir.path().join("libjunk.so"), b"junk").unwrap();
    let failed = wait_for(&mut sub, WAIT, |e| matches!(&e.kind, EventKind::PluginLoadFailed { path, .. } if path.ends_with("libjunk.so"))).await;
    assert!(failed.is_some());
    assert_eq!(tag(&host).await, (Outcome::Ok, "v2".into()));

    // Deleted: its tools are gone.
    std::fs::remove_file(&target).unwrap();
    let removed = wait_for(&mut sub, WAIT, |e| {
        matches!(e.kind, EventKind::PluginRemoved { .. })
    })
    .await
    .expect("plugin_removed");
    let EventKind::PluginRemoved { tools, .. } = &removed.kind else {
        unreachable!()
    };
    assert!(tools.contains(&"build_tag".to_string()));
    assert_eq!(tag(&host).await.0, Outcome::UnknownTool);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_calls_finish_on_the_old_version() {
    let (default, v2) = faults_variants();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("libfaults.so");
    std::fs::copy(default, &target).unwrap();
    let host = watched(dir.path(), DirOptions::in_process()).await;
    let mut sub = host.subscribe();
    let slow_host = host.clone();
    let slow = tokio::spawn(async move {
        slow_host
            .call_with(
                &call("slow", "sleep", json!({"ms": 600})),
                &CallOptions::default(),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    install_bytes(&target, &std::fs::read(v2).unwrap());
    wait_for(&mut sub, WAIT, |e| {
        matches!(e.kind, EventKind::PluginReloaded { .. })
    })
    .await
    .expect("reloaded");
    assert_eq!(
        tag(&host).await,
        (Outcome::Ok, "v2".into()),
        "new calls run the new version"
    );
    let slow = slow.await.unwrap();
    assert_eq!(
        (slow.outcome, &*slow.text()),
        (Outcome::Ok, "slept 600 ms"),
        "the running call finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_reloads_while_calls_run_and_every_call_is_ok() {
    let (default, v2) = faults_variants();
    let variants = [std::fs::read(default).unwrap(), std::fs::read(v2).unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("libfaults.so");
    std::fs::write(&target, &variants[0]).unwrap();
    let options = DirOptions {
        max_versions: 200,
        ..DirOptions::in_process()
    };
    let host = watched(dir.path(), options).await;
    let mut sub = host.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..4 {
        let (host, stop, calls) = (host.clone(), stop.clone(), calls.clone());
        workers.push(tokio::spawn(async move {
            let mut bad = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let c = call(&format!("w{w}-{n}"), "build_tag", json!({}));
                let r = host.call_with(&c, &CallOptions::default()).await;
                calls.fetch_add(1, Ordering::Relaxed);
                if r.outcome != Outcome::Ok {
                    bad.push(format!("{}: {} {}", c.id, r.outcome, &*r.text()));
                }
            }
            bad
        }));
    }
    for i in 1..=100 {
        install_bytes(&target, &variants[i % 2]);
        let reloaded = wait_for(&mut sub, WAIT, |e| {
            matches!(e.kind, EventKind::PluginReloaded { .. })
        })
        .await;
        assert!(reloaded.is_some(), "reload {i} not seen");
    }
    stop.store(true, Ordering::Relaxed);
    let mut bad = Vec::new();
    for w in workers {
        bad.extend(w.await.unwrap());
    }
    assert!(
        bad.is_empty(),
        "{} failed calls, first: {:?}",
        bad.len(),
        bad.first()
    );
    assert!(
        calls.load(Ordering::Relaxed) > 100,
        "calls ran during the reloads"
    );
    assert_eq!(tag(&host).await, (Outcome::Ok, "default".into()));
    assert_eq!(
        host.stats()
            .iter()
            .find(|s| s.tool == "build_tag")
            .unwrap()
            .errors,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_after_three_crashes_is_lifted_by_a_reload() {
    let (default, v2) = faults_variants();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("libfaults.so");
    std::fs::copy(default, &target).unwrap();
    let host = watched(dir.path(), DirOptions::in_process()).await;
    let mut sub = host.subscribe();
    let panic = |i: u32| call(&format!("p{i}"), "panic", json!({"message": "again"}));
    for i in 0..3 {
        let r = host.call_with(&panic(i), &CallOptions::default()).await;
        assert_eq!(r.outcome, Outcome::Crashed);
    }
    let q = wait_for(&mut sub, WAIT, |e| {
        matches!(e.kind, EventKind::ToolQuarantined { .. })
    })
    .await
    .expect("tool_quarantined");
    let EventKind::ToolQuarantined { tool, reason, .. } = &q.kind else {
        unreachable!()
    };
    assert_eq!(tool, "panic");
    assert!(
        reason.contains("3 crash(es) and 0 timeout(s) within 300 s"),
        "{reason}"
    );
    let r = host.call_with(&panic(4), &CallOptions::default()).await;
    assert_eq!(r.outcome, Outcome::Quarantined);
    // The event's reason, and when a call will probe the tool (the default cool-down: 2 min).
    let text = r.text();
    assert!(
        text.starts_with(&format!("{reason}; a call in 1")) && text.ends_with(" s will probe it"),
        "{text}"
    );
    assert_eq!(
        host.stats()
            .iter()
            .find(|s| s.tool == "panic")
            .unwrap()
            .quarantine
            .as_deref(),
        Some(reason.as_str())
    );
    // Other tools of the plugin still serve.
    assert_eq!(tag(&host).await.0, Outcome::Ok);
    install_bytes(&target, &std::fs::read(v2).unwrap());
    let restored = wait_for(&mut sub, WAIT, |e| {
        matches!(e.kind, EventKind::ToolRestored { .. })
    })
    .await
    .expect("tool_restored");
    let EventKind::ToolRestored { tool, reason, .. } = &restored.kind else {
        unreachable!()
    };
    assert_eq!(
        (tool.as_str(), reason.as_str()),
        ("panic", "a new version of its plugin was loaded")
    );
    let r = host.call_with(&panic(5), &CallOptions::default()).await;
    assert_eq!(
        r.outcome,
        Outcome::Crashed,
        "served again by the new version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_cap_refuses_further_reloads_with_a_warning() {
    let (default, v2) = faults_variants();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("libfaults.so");
    std::fs::copy(default, &target).unwrap();
    let options = DirOptions {
        max_versions: 2,
        ..DirOptions::in_process()
    };
    let host = watched(dir.path(), options).await;
    let mut sub = host.subscribe();
    install_bytes(&target, &std::fs::read(v2).unwrap());
    wait_for(&mut sub, WAIT, |e| {
        matches!(e.kind, EventKind::PluginReloaded { .. })
    })
    .await
    .expect("second version");
    let mut third = std::fs::read(default).unwrap();
    third.extend_from_slice(b"a different file");
    install_bytes(&target, &third);
    let warning = wait_for(&mut sub, WAIT, |e| {
        matches!(e.kind, EventKind::Warning { .. })
    })
    .await
    .expect("warning");
    let EventKind::Warning { subject, message } = &warning.kind else {
        unreachable!()
    };
    assert_eq!(subject, &target.display().to_string());
    assert!(
        message.contains("2 versions of ")
            && message.contains("libfaults.so are already mapped")
            && message.contains("isolated or restart"),
        "{message}"
    );
    assert_eq!(
        tag(&host).await,
        (Outcome::Ok, "v2".into()),
        "the last version keeps serving"
    );
}

fn refused(errors: &[String], needle: &str) -> bool {
    errors.iter().any(|e| e.contains(needle))
}

/// A host serving `dir` with `options`, and the directory's load report (the directory may be
/// refused as a whole: its line is in the report's errors).
async fn load(dir: &std::path::Path, options: DirOptions) -> (Host, ScanReport) {
    let (host, mut reports) = Host::builder()
        .plugin_dir(dir, options)
        .build()
        .await
        .unwrap();
    (host, reports.remove(0))
}

#[tokio::test]
async fn the_permission_checks() {
    // A group-writable directory is refused, unless the host opts in.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(plugin_lib("echo"), dir.path().join("libecho.so")).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o770)).unwrap();
    let (_host, report) = load(dir.path(), DirOptions::in_process()).await;
    assert!(
        refused(
            &report.errors,
            "is writable by its group (mode 770); other users could plant code in it"
        ),
        "{:?}",
        report.errors
    );
    assert!(report.loaded.is_empty());
    let trusting = DirOptions {
        trust: Trust::AnyWriter,
        ..DirOptions::in_process()
    };
    let (_host, report) = load(dir.path(), trusting.clone()).await;
    assert_eq!(report.loaded, ["echo@0.1.0"]);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();

    // A world-writable file is refused; the others load.
    let outside = tempfile::tempdir().unwrap();
    std::fs::copy(plugin_lib("files"), dir.path().join("libfiles.so")).unwrap();
    std::fs::set_permissions(
        dir.path().join("libfiles.so"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    // A symlink leading outside the directory is refused; one inside is followed.
    std::fs::copy(plugin_lib("picture"), outside.path().join("libpicture.so")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("libpicture.so"),
        dir.path().join("libpicture.so"),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("inner")).unwrap();
    std::fs::copy(plugin_lib("faults"), dir.path().join("inner/libfaults.so")).unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("inner/libfaults.so"),
        dir.path().join("libfaults.so"),
    )
    .unwrap();
    let (_host, report) = load(dir.path(), DirOptions::in_process()).await;
    assert!(
        refused(&report.errors, "libfiles.so: refused:")
            && refused(&report.errors, "is writable by everyone (mode 666)"),
        "{:?}",
        report.errors
    );
    assert!(
        refused(
            &report.errors,
            "libpicture.so: refused: a symlink that leads outside the plugin directory"
        ),
        "{:?}",
        report.errors
    );
    assert_eq!(report.errors.len(), 2, "{:?}", report.errors);
    let mut loaded = report.loaded.clone();
    loaded.sort();
    assert_eq!(loaded, ["echo@0.1.0", "faults@0.1.0"]);
    // Opting in loads the world-writable file (the outside symlink stays refused).
    let (_host, report) = load(dir.path(), trusting).await;
    assert_eq!(report.loaded.len(), 3, "{:?}", report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_view_folded_from_events_names_the_origin_the_host_names() {
    // [3/13]: an origin is a type. A view of the bus (what `rho watch` shows) and the host's own
    // figures name the same plugin, version and file, before and after a reload.
    let (default, v2) = faults_variants();
    let dir = tempfile::tempdir().unwrap();
    let host = watched(dir.path(), DirOptions::in_process()).await;
    let mut sub = host.subscribe();
    let mut view = rho_runtime::HealthView::default();
    let target = dir.path().join("libfaults.so");
    for (build, kind) in [(default, "plugin_loaded"), (v2, "plugin_reloaded")] {
        install_bytes(&target, &std::fs::read(build).unwrap());
        let changed = wait_for(&mut sub, WAIT, |e| e.kind.type_name() == kind)
            .await
            .unwrap_or_else(|| panic!("no {kind}"));
        view.observe(&changed);
        tag(&host).await;
        let end = wait_for(&mut sub, WAIT, |e| {
            matches!(e.kind, EventKind::ToolExecutionEnd { .. })
        })
        .await
        .expect("tool_execution_end");
        view.observe(&end);
        let named = |stats: Vec<rho_runtime::ToolStats>| {
            stats
                .into_iter()
                .find(|s| s.tool == "build_tag")
                .map(|s| s.origin)
        };
        let expected = rho_runtime::Origin::Plugin {
            plugin: "faults".into(),
            version: "0.1.0".into(),
            file: "libfaults.so".into(),
        };
        assert_eq!(named(host.stats()), Some(expected.clone()), "{kind}");
        assert_eq!(named(view.stats()), Some(expected), "{kind}");
    }
}
