//! The plugin ABI across versions: plugins built against the frozen interfaces 1, 2 and 3
//! (`tests/fixtures/abi-v1`, `abi-v2`, `abi-v3`) load and answer in today's host, in process
//! and isolated, with everything their interface can say; a plugin
//! built against today's interface is refused by an interface-1 host with one line naming both
//! versions.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::sync::Arc;
use std::time::Duration;

use rho_runtime::{BusItem, CallOptions, DirOptions, Event, EventKind, Outcome};
use rho_tests::{abi_v1_fixture, abi_v2_fixture, abi_v3_fixture, call, host_with, plugin_lib};
use serde_json::json;
use tokio_stream::StreamExt;

/// Serves `echo-v1` from a fresh directory with `options` and checks everything interface 1 can
/// say: its tools and their timeouts, its interface version, an answer, updates, an error.
async fn interface_1_loads_and_answers(options: DirOptions) {
    let fixture = abi_v1_fixture();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&fixture.echo_v1, dir.path().join("libecho_v1.so")).unwrap();
    let (host, report) = host_with(dir.path(), options, |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);

    let tools = host.tools();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["echo", "fail", "progress"]);
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(echo.timeout_ms, Some(5000));
    assert_eq!(echo.plugin.as_deref(), Some("echo-v1"));
    assert_eq!(echo.parameters["properties"]["text"]["type"], "string");
    let infos = host.plugins().await;
    assert_eq!(infos.len(), 1);
    assert_eq!(
        (infos[0].name.as_str(), infos[0].interface_version),
        ("echo-v1", 1)
    );

    let mut events = host.subscribe();
    let opts = CallOptions::default();
    let r = host
        .call_with(&call("e", "echo", json!({"text": "héllo v1"})), &opts)
        .await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "héllo v1"));

    let r = host
        .call_with(&call("p", "progress", json!({})), &opts)
        .await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "done"));
    let progress = events_of(&mut events, "p").await;
    let updates: Vec<&str> = progress
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolExecutionUpdate { partial, .. } => Some(partial.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(updates, ["step 1", "step 2"]);
    let types: Vec<&str> = progress.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(
        types
            .iter()
            .filter(|t| **t == "tool_execution_update")
            .count(),
        2,
        "{types:?}"
    );
    assert_eq!(types.last(), Some(&"tool_execution_end"), "{types:?}");

    let r = host.call_with(&call("f", "fail", json!({})), &opts).await;
    assert_eq!(
        (r.outcome, &*r.text()),
        (Outcome::Error, "failed on purpose")
    );
    host.shutdown().await;
}

/// The events of call `id`, up to and with its end event (within 5 s).
async fn events_of(events: &mut rho_runtime::Subscription, id: &str) -> Vec<Arc<Event>> {
    let mut mine = Vec::new();
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_secs(5), events.next()).await {
        let BusItem::Event(e) = item else { continue };
        if e.kind.call_id() != Some(id) {
            continue;
        }
        let end = matches!(e.kind, EventKind::ToolExecutionEnd { .. });
        mine.push(e);
        if end {
            return mine;
        }
    }
    panic!("no end event for call {id}: {:?}", mine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_interface_1_loads_and_answers_in_process() {
    interface_1_loads_and_answers(DirOptions::in_process()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_interface_1_loads_and_answers_isolated() {
    interface_1_loads_and_answers(DirOptions::default()).await;
}

/// Serves `echo-v2` (built against the frozen interface 2) from a fresh directory with `options`
/// and checks what interface 2 says: declared titles, hints and output schemas, its interface
/// version, an answer with its update, a structured answer, the call's time left and trace
/// context, an error.
async fn interface_2_loads_and_answers(options: DirOptions) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(abi_v2_fixture(), dir.path().join("libecho_v2.so")).unwrap();
    let (host, report) = host_with(dir.path(), options, |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);

    let tools = host.tools();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["context", "echo", "fail", "measure"]);
    let tool = |name: &str| tools.iter().find(|t| t.name == name).unwrap();
    let echo = tool("echo");
    assert_eq!(echo.timeout_ms, Some(5000));
    assert_eq!(echo.title.as_deref(), Some("Echo"));
    assert!(echo.hints.read_only && echo.hints.idempotent && !echo.hints.open_world);
    assert!(!tool("fail").hints.destructive);
    let schema = tool("measure").output_schema.as_ref().unwrap();
    assert_eq!(schema["properties"]["words"]["type"], "integer");
    let infos = host.plugins().await;
    assert_eq!(
        (infos[0].name.as_str(), infos[0].interface_version),
        ("echo-v2", 2)
    );

    let mut events = host.subscribe();
    let opts = CallOptions::default();
    let r = host
        .call_with(&call("e", "echo", json!({"text": "héllo v2"})), &opts)
        .await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "héllo v2"));
    let updates: Vec<String> = events_of(&mut events, "e")
        .await
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolExecutionUpdate { partial, .. } => Some(partial.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(updates, ["echoing"]);

    let r = host
        .call_with(&call("m", "measure", json!({"text": "a bb ccc"})), &opts)
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    assert_eq!(r.structured, Some(json!({"chars": 8, "words": 3})));

    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = CallOptions {
        traceparent: Some(traceparent.into()),
        ..CallOptions::default()
    };
    let r = host
        .call_with(&call("c", "context", json!({})), &traced)
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    let details = r.details.unwrap();
    assert_eq!(details["traceparent"], traceparent);
    assert!(
        details["time_left_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{details}"
    );

    let r = host.call_with(&call("f", "fail", json!({})), &opts).await;
    assert_eq!(
        (r.outcome, &*r.text()),
        (Outcome::Error, "failed on purpose")
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_interface_2_loads_and_answers_in_process() {
    interface_2_loads_and_answers(DirOptions::in_process()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_interface_2_loads_and_answers_isolated() {
    interface_2_loads_and_answers(DirOptions::default()).await;
}

/// Serves `echo-v3` (built against the frozen interface 3, whose table of host functions has
/// `log` and `ask` only) from a fresh directory with `options`: it loads as interface 3, and a
/// call logs, asks (the answerer's reply reaches it) and answers blocks (before interface 4's
/// freeze, today's host refused it: its `HostFns` has fewer fields than the host's).
async fn interface_3_loads_and_answers(options: DirOptions) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(abi_v3_fixture(), dir.path().join("libecho_v3.so")).unwrap();
    let (host, report) = host_with(dir.path(), options, |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let infos = host.plugins().await;
    assert_eq!(
        (infos[0].name.as_str(), infos[0].interface_version),
        ("echo-v3", 3)
    );
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    let answerer = move |question: rho_runtime::Question, _call: rho_runtime::ToolCall| {
        seen.lock().unwrap().push(question.message.clone());
        async move { rho_runtime::Reply::Accepted(json!({"confirm": true})) }
    };
    let options = CallOptions {
        answerer: Some(Arc::new(answerer)),
        ..CallOptions::default()
    };
    let mut events = host.subscribe();
    let r = host
        .call_with(&call("q", "confirm", json!({"what": "Proceed"})), &options)
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    assert_eq!(
        &*r.text(),
        "accepted {\"confirm\":true}\ntime left: true",
        "{r:?}"
    );
    assert_eq!(*asked.lock().unwrap(), ["Proceed?"]);
    let logs: Vec<String> = events_of(&mut events, "q")
        .await
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolExecutionLog { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(logs, ["asking about Proceed"]);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_interface_3_loads_and_answers_in_process() {
    interface_3_loads_and_answers(DirOptions::in_process()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_interface_3_loads_and_answers_isolated() {
    interface_3_loads_and_answers(DirOptions::default()).await;
}

#[test]
fn a_plugin_built_against_the_new_interface_is_refused_by_an_old_host() {
    let fixture = abi_v1_fixture();
    let run = |plugin: &std::path::Path| {
        let out = std::process::Command::new(&fixture.old_host)
            .arg(plugin)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };

    // The old host works: it loads a plugin of its own interface.
    let (code, stdout, stderr) = run(&fixture.echo_v1);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("echo\t")), "{stdout}");

    // Today's echo plugin is refused, with one line naming both versions.
    let newest = rho_plugin_api::ffi::INTERFACE_VERSION;
    assert!(newest > 1, "the workspace still speaks interface {newest}");
    let echo = plugin_lib("echo");
    let (code, stdout, stderr) = run(&echo);
    assert_eq!(code, Some(1), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(
        stderr,
        format!(
            "{}: interface version {newest}, this host speaks 1\n",
            echo.display()
        ),
        "exactly one line"
    );
    assert_eq!(stdout, "");
}
