//! [1/13]: what a worker sends costs the host what it sent, not what it announced, and an answer
//! over the codec's limits is a clear `error` in bounded memory. These tests measure this test
//! process's own peak RSS (the host is this process), one at a time.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::time::Duration;

use rho_runtime::{CallOptions, DirOptions, Host, Isolation, Outcome, WorkerOptions};
use rho_tests::{call, host_with, plugin_dir, timeout};
use serde_json::json;

/// These tests read the process's peak memory: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A field of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Resets the peak RSS to the current RSS (`clear_refs` 5).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// The growth of the peak RSS over `base` KiB, in MiB.
fn peak_growth_mib(base: u64) -> u64 {
    status_kib("VmHWM:").saturating_sub(base) >> 10
}

async fn attacks_host(
    workers: usize,
    journal: Option<&std::path::Path>,
) -> (Host, tempfile::TempDir) {
    let dir = plugin_dir(&["attacks"]);
    let options = DirOptions {
        isolation: Isolation::Process(WorkerOptions {
            spares: 0,
            max_workers: workers,
            ..WorkerOptions::default()
        }),
        ..DirOptions::default()
    };
    let (host, report) = host_with(dir.path(), options, |b| {
        let b = b.runner(timeout(10_000));
        match journal {
            Some(path) => b.journal(path),
            None => b,
        }
    })
    .await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    (host, dir)
}

/// Four workers each announce a frame of nearly 64 MiB, send 16 KiB of it and stall: the host
/// holds what arrived (before: each frame's JSON part was zero-filled to its announced length
/// as soon as its first bytes came, 256 MiB for the four).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_announces_a_large_frame_and_stalls_costs_what_it_sent() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (host, _dir) = attacks_host(4, None).await;
    // Warm up: the worker start path and the runtime's threads are in before the measure.
    let r = host.call("ids", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    let base = status_kib("VmRSS:");
    reset_peak();
    let cancel = rho_runtime::CancellationToken::new();
    let calls: Vec<_> = (0..4)
        .map(|i| {
            let host = host.clone();
            let options = CallOptions {
                cancel: Some(cancel.clone()),
                ..CallOptions::default()
            };
            tokio::spawn(async move {
                let c = call(
                    &format!("stall-{i}"),
                    "forge_frame",
                    json!({"what": "stall"}),
                );
                host.call_with(&c, &options).await
            })
        })
        .collect();
    // The frames' heads and first 16 KiB are written at once; the host reads them as they come.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let grown = peak_growth_mib(base);
    cancel.cancel();
    for c in calls {
        let r = c.await.unwrap();
        assert_eq!(r.outcome, Outcome::Error, "{}", &*r.text());
    }
    assert!(
        grown < 16,
        "four stalled frames raised the host's peak RSS by {grown} MiB"
    );
    host.shutdown().await;
}

/// An answer announcing 300,000 images (a 7 MiB frame, under the frame limit) ends its call
/// `error` naming the limit, in bounded memory, and the journal keeps a line, not the images
/// (before: 367 MiB of host RSS and 32 MiB of journal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_300000_images_is_a_clear_error_in_bounded_memory() {
    let _one = ONE_AT_A_TIME.lock().await;
    let state = tempfile::tempdir().unwrap();
    let journal = state.path().join("journal.jsonl");
    let (host, _dir) = attacks_host(2, Some(&journal)).await;
    let r = host.call("ids", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    let base = status_kib("VmRSS:");
    reset_peak();
    // The warm-up's worker, idle again, serves this call: its second (the host numbers a
    // worker's calls from 1).
    let r = host
        .call(
            "forge_frame",
            json!({"what": "images", "count": 300_000, "id": 2}),
        )
        .await;
    let grown = peak_growth_mib(base);
    assert_eq!(r.outcome, Outcome::Error, "{}", &*r.text());
    assert!(
        r.text()
            .contains("answered with 300000 images; an answer may carry at most 256"),
        "{}",
        &*r.text()
    );
    assert!(
        grown < 64,
        "300,000 images raised the host's peak RSS by {grown} MiB"
    );
    // The worker was spent; the next call has a fresh one.
    let r = host.call("ids", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    host.shutdown().await;
    let kept = std::fs::metadata(&journal).unwrap().len();
    assert!(kept < 64 << 10, "the journal holds {kept} bytes");
}

/// A text of 3 MiB reaches the caller whole; the end event (on the bus and in the journal) keeps
/// its first MiB and says how much it left out (before: the journal kept all of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_events_keep_a_bounded_part_of_a_long_text() {
    let _one = ONE_AT_A_TIME.lock().await;
    let state = tempfile::tempdir().unwrap();
    let journal = state.path().join("journal.jsonl");
    let dir = plugin_dir(&["faults"]);
    let (host, report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.journal(&journal)
    })
    .await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let r = host.call("big_output", json!({"bytes": 3 << 20})).await;
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(r.text().len(), 3 << 20);
    host.shutdown().await;
    let text = std::fs::read_to_string(&journal).unwrap();
    let end: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["type"] == "tool_execution_end")
        .unwrap();
    let kept = end["output"]["text"].as_str().unwrap();
    assert!(
        kept.len() < rho_runtime::MAX_EVENT_TEXT + 200,
        "{}",
        kept.len()
    );
    assert!(
        kept.ends_with(&format!(
            "[rho: events keep {} of {} bytes of this text; the call's result has the whole]",
            rho_runtime::MAX_EVENT_TEXT,
            3 << 20
        )),
        "{}",
        &kept[kept.len() - 200..]
    );
    assert!(
        text.len() < 2 << 20,
        "the journal holds {} bytes",
        text.len()
    );
}
