//! [6/9]: what a tool declares (title, hints, output schema, result limit), what a plugin asks
//! for (capabilities, against the host's grants), and what a call is told (time left, trace
//! context), through the library, `rho tools`, `rho plugin check` and `rho serve`.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::process::Command;
use std::sync::Arc;

use rho_runtime::{
    Action, BusItem, CallOptions, DirOptions, EventKind, GateRule, Grants, Isolation, Loop,
    LoopConfig, Outcome, RuleGate, ToolCall, ToolHints, Verdict, WorkerOptions,
};
use rho_tests::{call, host_with, isolated, plugin_dir, plugin_lib, rho_bin};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tool<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools:#}"))
}

/// The declarations of `count` (structured, read-only), `big_output_cut` (a result limit) and
/// `sleep` (nothing declared) as every surface shows them.
fn assert_declared(tools: &Value) {
    let count = tool(tools, "count");
    assert_eq!(count["title"], "Count");
    assert_eq!(
        count["hints"],
        json!({"read_only": true, "destructive": false, "idempotent": true, "open_world": false})
    );
    assert_eq!(count["output_schema"]["type"], "object");
    assert_eq!(count["output_schema"]["properties"]["n"]["minimum"], 1);
    assert_eq!(tool(tools, "big_output_cut")["max_result_bytes"], 100);
    let sleep = tool(tools, "sleep");
    assert_eq!(
        sleep["hints"],
        json!({"read_only": false, "destructive": true, "idempotent": false, "open_world": true}),
        "a tool that declares nothing has MCP's cautious defaults"
    );
    assert_eq!(
        (&sleep["title"], &sleep["output_schema"]),
        (&Value::Null, &Value::Null)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_declared_field_reaches_the_library_the_cli_and_plugin_loaded() {
    let dir = plugin_dir(&["faults"]);
    // Library, isolated: the worker's word is checked and carried whole.
    let bus = rho_runtime::Bus::new(rho_runtime::DEFAULT_CAPACITY);
    let mut events = bus.subscribe();
    let (host, report) = host_with(dir.path(), isolated(), |b| b.bus(bus)).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_declared(&serde_json::to_value(host.tools()).unwrap());
    let loaded = loop {
        match events.next().await {
            Some(BusItem::Event(e)) if matches!(e.kind, EventKind::PluginLoaded { .. }) => {
                break e.kind.clone();
            }
            Some(_) => {}
            None => panic!("no plugin_loaded"),
        }
    };
    let EventKind::PluginLoaded {
        tools,
        capabilities,
        granted,
        ..
    } = &loaded
    else {
        unreachable!()
    };
    assert_declared(&serde_json::to_value(tools).unwrap());
    assert_eq!(*capabilities, rho_runtime::Capabilities::none());
    assert_eq!(granted.as_ref(), Some(&Grants::default()));
    host.shutdown().await;

    // `rho tools --json` (isolated by default) and `rho plugin check --json` (in process).
    let out = Command::new(rho_bin())
        .args(["tools", "--json", "--plugins"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_declared(&json_of(&out));
    let out = Command::new(rho_bin())
        .args(["plugin", "check", "--json"])
        .arg(plugin_lib("faults"))
        .output()
        .unwrap();
    let checked = json_of(&out);
    assert_declared(&checked["tools"]);
    assert_eq!(
        checked["interface_version"],
        rho_runtime::plugin_api::ffi::INTERFACE_VERSION
    );
    let out = Command::new(rho_bin())
        .args(["tools", "--plugins"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("hints: read-only, idempotent, closed world"),
        "{text}"
    );
    assert!(text.contains("result limit: 100 bytes"), "{text}");
    assert!(
        text.contains("plugin faults@0.1.0: asks for nothing; granted env PATH"),
        "{text}"
    );
}

async fn run(host: &rho_runtime::Host, tool: &str, args: Value) -> rho_runtime::ToolResult {
    host.call_with(&call("c", tool, args), &CallOptions::default())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_answers_are_checked_and_long_results_cut_in_process_and_isolated() {
    let dir = plugin_dir(&["faults"]);
    for options in [DirOptions::in_process(), isolated()] {
        let (host, _) = host_with(dir.path(), options, |b| b).await;
        let mut events = host.subscribe();
        let r = run(&host, "count", json!({"n": 3})).await;
        assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
        assert_eq!(r.structured, Some(json!({"n": 3, "words": "3 things"})));
        assert_eq!(
            serde_json::from_str::<Value>(&r.text()).unwrap(),
            json!({"n": 3, "words": "3 things"}),
            "the text is the structured data's JSON"
        );

        // An answer that breaks the declared schema ends `error`, naming the field.
        let r = run(&host, "count", json!({"n": 0})).await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.structured, None);
        assert!(
            r.text().starts_with(
                "tool `count` answered with structured content that does not match its output \
                 schema: field `n`: 0 is less than the minimum of 1"
            ),
            "{}",
            &*r.text()
        );

        // Over its limit: cut with a note the model reads; the whole kept for the host.
        let r = run(&host, "big_output_cut", json!({"bytes": 1000})).await;
        assert_eq!(r.outcome, Outcome::Ok);
        assert_eq!(
            &*r.text(),
            format!(
                "{}\n[rho: the result was cut at 100 of 1000 bytes (the result limit of tool \
                 `big_output_cut`); the host keeps the whole]",
                "x".repeat(100)
            )
        );
        assert_eq!(r.full_text, Some("x".repeat(1000)));
        let r = run(&host, "big_output_cut", json!({"bytes": 100})).await;
        assert_eq!((r.text().len(), r.full_text), (100, None));
        let mut ends = Vec::new();
        while ends.len() < 4 {
            if let Some(BusItem::Event(e)) = events.next().await
                && let EventKind::ToolExecutionEnd { full_text, .. } = &e.kind
            {
                ends.push(full_text.clone());
            }
        }
        assert_eq!(
            ends[2],
            Some("x".repeat(1000)),
            "the end event keeps the whole"
        );
        // Structured content from a tool that declares no schema is dropped: nothing checked it.
        let r = run(&host, "unschema", json!({})).await;
        assert_eq!(
            (r.outcome, &*r.text(), &r.structured),
            (Outcome::Ok, "plain text", &None)
        );
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smaller_of_the_tools_and_the_hosts_result_limit_wins() {
    let dir = plugin_dir(&["faults"]);
    let runner = rho_runtime::RunnerConfig {
        max_result_bytes: Some(50),
        ..rho_runtime::RunnerConfig::default()
    };
    let (host, _) = host_with(dir.path(), DirOptions::in_process(), |b| b.runner(runner)).await;
    // big_output declares no limit, big_output_cut 100: the host's 50 cuts both.
    for tool in ["big_output", "big_output_cut"] {
        let r = run(&host, tool, json!({"bytes": 1000})).await;
        let kept = format!("{}\n[rho: the result was cut at 50 of 1000", "x".repeat(50));
        assert!(r.text().starts_with(&kept), "{tool}: {}", &*r.text());
        assert_eq!(r.full_text.map(|t| t.len()), Some(1000));
    }
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_told_its_time_left_and_trace_context_in_process_and_isolated() {
    let dir = plugin_dir(&["faults"]);
    for options in [DirOptions::in_process(), isolated()] {
        let (host, _) = host_with(dir.path(), options, |b| {
            b.runner(rho_tests::timeout(30_000))
        })
        .await;
        let told = |traceparent: Option<&str>| {
            let host = host.clone();
            let options = CallOptions {
                traceparent: traceparent.map(str::to_owned),
                ..CallOptions::default()
            };
            async move {
                let r = host
                    .call_with(&call("c", "call_info", json!({})), &options)
                    .await;
                assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
                serde_json::from_str::<Value>(&r.text()).unwrap()
            }
        };
        let info = told(Some(TRACEPARENT)).await;
        assert_eq!(info["traceparent"], TRACEPARENT);
        let left = info["time_left_ms"].as_u64().unwrap();
        assert!(left > 20_000 && left <= 30_000, "{left}");
        // Not a valid traceparent: dropped, never handed on.
        for bad in [
            "hello",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            assert_eq!(told(Some(bad)).await["traceparent"], "");
        }
        assert_eq!(told(None).await["traceparent"], "");
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_rules_match_on_hints() {
    let dir = plugin_dir(&["faults", "echo"]);
    let asker =
        |call: ToolCall| async move { Verdict::Block(format!("asked about {}", call.name)) };
    let gate = Arc::new(RuleGate::new(
        vec![
            GateRule::new("*", Action::Allow).read_only(true),
            GateRule::new("exit_*", Action::Deny),
            GateRule::new("*", Action::Ask).destructive(true),
        ],
        Arc::new(asker),
    ));
    let (host, _) = host_with(dir.path(), DirOptions::in_process(), |b| b.gate(gate)).await;
    let r = run(&host, "echo", json!({"text": "read-only"})).await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "read-only"));
    let r = run(&host, "count", json!({"n": 1})).await;
    assert_eq!(r.outcome, Outcome::Ok);
    let r = run(&host, "sleep", json!({"ms": 1})).await;
    assert_eq!(
        (r.outcome, &*r.text()),
        (Outcome::Blocked, "asked about sleep")
    );
    let r = run(&host, "exit_process", json!({"code": 3})).await;
    assert_eq!(
        (r.outcome, &*r.text()),
        (
            Outcome::Blocked,
            "tool `exit_process` is denied by the host's gate (rule `exit_*`)"
        )
    );
    // As rho.toml's `[[gate]]` tables give them: hints, no pattern.
    let config: rho_runtime::HostConfig = serde_json::from_value(json!({"gate": [
        {"read_only": true, "action": "allow"},
        {"destructive": true, "action": "deny"},
    ]}))
    .unwrap();
    assert_eq!(
        config.gate,
        [
            GateRule::new("*", Action::Allow).read_only(true),
            GateRule::new("*", Action::Deny).destructive(true)
        ]
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_calls_of_a_turn_overlap_while_the_others_wait_their_turn() {
    let dir = plugin_dir(&["faults"]);
    let (host, _) = host_with(dir.path(), DirOptions::in_process(), |b| b).await;
    let mut events = host.subscribe();
    let mut session = Loop::new("s", host.clone(), LoopConfig::default());
    let calls = [
        call("read-1", "nap", json!({"ms": 400})),
        call("write-1", "sleep", json!({"ms": 150})),
        call("read-2", "nap", json!({"ms": 400})),
        call("write-2", "sleep", json!({"ms": 150})),
    ];
    let results = session.run_batch(&calls).await;
    let ids: Vec<&str> = results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["read-1", "write-1", "read-2", "write-2"]);
    assert!(results.iter().all(|r| r.outcome == Outcome::Ok));
    // Seq numbers order the events: when each call started and ended.
    let mut at = std::collections::HashMap::new();
    while at.len() < 8 {
        if let Some(BusItem::Event(e)) = events.next().await {
            match &e.kind {
                EventKind::ToolExecutionStart { call_id, .. } => {
                    at.insert(format!("start {call_id}"), e.seq);
                }
                EventKind::ToolExecutionEnd { call_id, .. } => {
                    at.insert(format!("end {call_id}"), e.seq);
                }
                _ => {}
            }
        }
    }
    // The reads overlap each other and the first write.
    assert!(at["start read-2"] < at["end read-1"], "{at:?}");
    assert!(at["start write-1"] < at["end read-1"], "{at:?}");
    // The second write waits for the first, though the reads still run.
    assert!(at["start write-2"] > at["end write-1"], "{at:?}");
    assert!(at["start write-2"] < at["end read-1"], "{at:?}");

    // Every call at once when the host says so.
    let mut session = Loop::new(
        "all",
        host.clone(),
        LoopConfig {
            call_order: rho_runtime::CallOrder::AllAtOnce,
            ..LoopConfig::default()
        },
    );
    let started = std::time::Instant::now();
    let writes = [
        call("w1", "sleep", json!({"ms": 300})),
        call("w2", "sleep", json!({"ms": 300})),
    ];
    session.run_batch(&writes).await;
    assert!(started.elapsed() < std::time::Duration::from_millis(550));
    host.shutdown().await;
}

fn needs_dir() -> tempfile::TempDir {
    std::fs::create_dir_all("/var/tmp/rho-needs").unwrap();
    plugin_dir(&["needs"])
}

fn granting(grants: Grants) -> DirOptions {
    DirOptions {
        isolation: Isolation::Process(WorkerOptions {
            grants,
            ..WorkerOptions::default()
        }),
        ..DirOptions::in_process()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_asks_for_more_than_its_grants_is_refused_naming_the_capability() {
    let dir = needs_dir();
    let (host, report) = host_with(dir.path(), isolated(), |b| b).await;
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert!(
        report.errors[0].ends_with(
            "refused: the plugin asks for reading /var/tmp/rho-needs (grants.read), which this \
             host does not grant it"
        ),
        "{}",
        report.errors[0]
    );
    assert!(host.tools().is_empty());
    host.shutdown().await;

    let mut grants = Grants {
        read: vec!["/var/tmp".into()],
        ..Grants::default()
    };
    let (host, report) = host_with(dir.path(), granting(grants.clone()), |b| b).await;
    assert!(
        report.errors[0].contains("asks for the network (grants.network)"),
        "{:?}",
        report.errors
    );
    host.shutdown().await;
    grants.network = true;
    let (host, report) = host_with(dir.path(), granting(grants.clone()), |b| b).await;
    assert!(
        report.errors[0].contains("asks for the environment variable RHO_NEEDS_TOKEN (grants.env)"),
        "{:?}",
        report.errors
    );
    host.shutdown().await;

    // Granted all it asks: it loads, and both sides are there to see.
    grants.env.push("RHO_NEEDS_TOKEN".into());
    let (host, report) = host_with(dir.path(), granting(grants.clone()), |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let plugins = host.plugins().await;
    let asked = rho_runtime::Capabilities::none()
        .read("/var/tmp/rho-needs")
        .network()
        .env("RHO_NEEDS_TOKEN");
    assert_eq!(plugins[0].capabilities, asked);
    assert_eq!(plugins[0].granted, Some(grants));
    assert_eq!(run(&host, "token", json!({})).await.outcome, Outcome::Ok);
    host.shutdown().await;

    // In process a plugin has every power of the host: nothing to refuse, `granted` is `None`.
    let (host, report) = host_with(dir.path(), DirOptions::in_process(), |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(host.plugins().await[0].granted, None);
    let hints = host.tools()[0].hints;
    assert!(hints.read_only && !hints.destructive);
    assert_ne!(hints, ToolHints::default());
    host.shutdown().await;
}

#[test]
fn rho_call_json_carries_structured_content_and_the_whole_of_a_cut_text() {
    let dir = plugin_dir(&["faults"]);
    let call = |tool: &str, args: &str| {
        json_of(
            &Command::new(rho_bin())
                .args(["call", tool, args, "--json", "--plugins"])
                .arg(dir.path())
                .output()
                .unwrap(),
        )
    };
    let r = call("count", r#"{"n": 2}"#);
    assert_eq!(r["structured"], json!({"n": 2, "words": "2 things"}));
    assert!(r.get("full_text").is_none());
    let r = call("big_output_cut", r#"{"bytes": 300}"#);
    assert!(
        r["text"]
            .as_str()
            .unwrap()
            .ends_with("the host keeps the whole]")
    );
    assert_eq!(r["full_text"], "x".repeat(300));
    assert!(r.get("structured").is_none());
}
