//! [4/9]: isolated workers do not depend on the host's private copy directory. Alone in its test
//! binary (its own process): it removes every private copy directory of its process, which would
//! break the in-process hosts of tests running beside it.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::time::{Duration, Instant};

use rho_runtime::Outcome;
use rho_tests::plugin_dir;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_workers_start_without_the_private_copy_directory() {
    // Before [2/9] a worker loaded its plugin from a file in the host's private copy directory:
    // once that directory was gone (its last `PluginDir` dropped, a /tmp cleaner), no worker
    // could start again. Workers now get a sealed memfd the pool holds.
    let dir = plugin_dir(&["faults"]);
    let (host, report) = rho_tests::host_with(dir.path(), rho_tests::one_worker(), |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let r = host.call("build_tag", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    let prefix = format!("rho-plugins-{}.", std::process::id());
    let temp = std::env::temp_dir().canonicalize().unwrap();
    let mut removed = 0;
    for entry in std::fs::read_dir(&temp).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_dir_all(entry.path()).unwrap();
            removed += 1;
        }
    }
    assert!(
        removed >= 1,
        "no private copy directory of ours in {}",
        temp.display()
    );
    // The worker dies; the next call needs a new one.
    let r = host.call("segfault", json!({})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", &*r.text());
    let r = host.call("build_tag", json!({})).await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "default"));
    host.shutdown().await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while rho_tests::live_workers() > 0 {
        assert!(Instant::now() < deadline, "workers left after shutdown");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
