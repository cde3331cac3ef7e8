//! [11/13]: OpenTelemetry over OTLP, received by a real OTLP receiver (`tests/python/
//! otlp_receiver.py`: OTLP/HTTP protobuf and OTLP/gRPC decoded with the official
//! `opentelemetry-proto` definitions): `rho serve --http` with the standard environment
//! variables exports one `execute_tool` span per call, the child of the request's SERVER span,
//! itself the child of the client's `traceparent`; `crashed` and `timed_out` calls carry
//! `error.type`; the duration histograms count the calls; over gRPC too; `rho call` flushes
//! before it exits; and with the receiver down every call still ends, the drops counted in an
//! `export_status` event.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rho_tests::{HttpServer, OtlpReceiver, attribute, hex_id, install, modern_rpc};
use serde_json::{Value, json};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// A plugin directory with `echo` and `faults`, and a `rho.toml` with `config`.
fn setup(config: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    let plugins = tempfile::tempdir_in(rho_tests::host_dir("rho-otel-tests")).unwrap();
    install(plugins.path(), "echo");
    install(plugins.path(), "faults");
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join("rho.toml"), config).unwrap();
    (plugins, state)
}

/// `rho serve --http` over `plugins` with `state`'s configuration and journal and `env` set.
fn serve(plugins: &Path, state: &Path, env: &[(&str, String)]) -> HttpServer {
    for (key, value) in env {
        // SAFETY: tests of this file set the variables of the servers they start, one at a
        // time (the lock below), and nothing else reads them.
        unsafe { std::env::set_var(key, value) };
    }
    let config = state.join("rho.toml");
    let args = [
        "--http",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
    ];
    let server = HttpServer::start(plugins, &args, &state.join("journal.jsonl"));
    for (key, _) in env {
        // SAFETY: as above.
        unsafe { std::env::remove_var(key) };
    }
    server
}

/// The servers' environment is the process's: one test at a time starts one.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `tools/call` of `tool` in the client's trace.
fn call(addr: &str, tool: &str, arguments: Value) -> Value {
    let params = json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {"traceparent": format!("00-{TRACE}-{PARENT}-01")},
    });
    traced_rpc(addr, "tools/call", params)
}

/// A 2026-07-28 request whose `_meta` carries the client's trace context too.
fn traced_rpc(addr: &str, method: &str, params: Value) -> Value {
    let traceparent = params["_meta"]["traceparent"].clone();
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "traceparent": traceparent,
    });
    let name = params["name"].as_str().map(str::to_owned);
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let (_, response) = rho_tests::post(addr, &headers, body.to_string().as_bytes());
    rho_tests::rpc_of(&response)
}

#[test]
fn calls_are_spans_in_the_clients_trace_with_their_outcomes_and_durations() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let receiver = OtlpReceiver::start();
    let (plugins, state) = setup("[otel]\nmetric_interval_ms = 300\n");
    let endpoint = format!("http://127.0.0.1:{}", receiver.http);
    let server = serve(
        plugins.path(),
        state.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_SERVICE_NAME", "rho-under-test".into()),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=test".into(),
            ),
        ],
    );
    let addr = &server.addr;
    let echoed = call(addr, "echo", json!({"text": "traced"}));
    assert_eq!(echoed["result"]["content"][0]["text"], "traced", "{echoed}");
    let crashed = call(addr, "panic", json!({"message": "on purpose"}));
    assert_eq!(
        crashed["result"]["_meta"]["rho/outcome"], "crashed",
        "{crashed}"
    );
    let slow = call(addr, "slow", json!({"ms": 5000}));
    assert_eq!(
        slow["result"]["_meta"]["rho/outcome"], "timed_out",
        "{slow}"
    );
    let listed = modern_rpc(addr, "tools/list", json!({}), json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");

    receiver.wait_for("the three calls' spans", |r| {
        let spans = r.spans();
        [
            "execute_tool echo",
            "execute_tool panic",
            "execute_tool slow",
        ]
        .iter()
        .all(|name| !named(&spans, name).is_empty())
    });
    let spans = receiver.spans();
    let echo = named(&spans, "execute_tool echo")[0];
    let server_span = named(&spans, "tools/call echo")[0];
    // One trace: the client's, through the server span, to the call.
    assert_eq!(hex_id(&echo["traceId"]), TRACE);
    assert_eq!(hex_id(&server_span["traceId"]), TRACE);
    assert_eq!(hex_id(&server_span["parentSpanId"]), PARENT);
    assert_eq!(
        hex_id(&echo["parentSpanId"]),
        hex_id(&server_span["spanId"])
    );
    assert_eq!(echo["kind"], "SPAN_KIND_INTERNAL");
    assert_eq!(server_span["kind"], "SPAN_KIND_SERVER");
    assert_eq!(attribute(echo, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(attribute(echo, "gen_ai.tool.name"), "echo");
    assert_eq!(attribute(echo, "gen_ai.tool.type"), "function");
    assert!(attribute(echo, "gen_ai.tool.call.id").is_string());
    assert_eq!(attribute(echo, "rho.outcome"), "ok");
    assert_eq!(attribute(echo, "rho.plugin.name"), "echo");
    assert!(attribute(echo, "rho.plugin.version").is_string());
    assert_eq!(attribute(echo, "rho.source"), "plugin");
    assert_eq!(attribute(echo, "rho.isolation"), "process");
    assert!(attribute(echo, "rho.gate.wait_ms").is_string(), "{echo}");
    assert_eq!(attribute(echo, "error.type"), Value::Null);
    // Arguments and results stay home unless asked for.
    assert_eq!(attribute(echo, "gen_ai.tool.call.arguments"), Value::Null);
    assert_eq!(attribute(server_span, "mcp.method.name"), "tools/call");
    assert_eq!(attribute(server_span, "mcp.protocol.version"), "2026-07-28");
    assert_eq!(attribute(server_span, "network.transport"), "tcp");
    assert_eq!(attribute(server_span, "jsonrpc.request.id"), "7");
    let panic = named(&spans, "execute_tool panic")[0];
    assert_eq!(attribute(panic, "error.type"), "crashed");
    assert_eq!(panic["status"]["code"], "STATUS_CODE_ERROR");
    let slow = named(&spans, "execute_tool slow")[0];
    assert_eq!(attribute(slow, "error.type"), "timed_out");
    assert!(!named(&spans, "tools/list").is_empty());
    let resource = &echo["resource"]["attributes"];
    assert!(
        resource.to_string().contains("rho-under-test")
            && resource.to_string().contains("deployment.environment"),
        "{resource}"
    );

    // The histograms count the calls made.
    receiver.wait_for("durations of the three calls", |r| {
        let count = |name: &str| -> u64 {
            r.latest_points(name)
                .iter()
                .map(|p| {
                    p["count"]
                        .as_str()
                        .unwrap_or("0")
                        .parse::<u64>()
                        .unwrap_or(0)
                })
                .sum()
        };
        count("gen_ai.execute_tool.duration") == 3 && count("mcp.server.operation.duration") == 4
    });
    drop(server);
}

#[test]
fn over_grpc_and_from_a_one_shot_rho_call() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let receiver = OtlpReceiver::start();
    let (plugins, state) = setup("[otel]\nmetric_interval_ms = 300\n");
    let server = serve(
        plugins.path(),
        state.path(),
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", receiver.grpc),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
        ],
    );
    let echoed = call(&server.addr, "echo", json!({"text": "over grpc"}));
    assert_eq!(echoed["result"]["content"][0]["text"], "over grpc");
    receiver.wait_for("a span over gRPC", |r| {
        r.spans()
            .iter()
            .any(|s| s["name"] == "execute_tool echo" && s["protocol"] == "grpc")
    });
    drop(server);

    // `rho call` exits right after its call: what it exported went out before.
    let config = state.path().join("rho.toml");
    let out = Command::new(rho_tests::rho_bin())
        .args(["--config", config.to_str().unwrap(), "call", "--plugins"])
        .arg(plugins.path())
        .args(["echo", r#"{"text": "one shot"}"#])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", receiver.http),
        )
        .env("XDG_STATE_HOME", rho_tests::host_dir("rho-state"))
        .env("XDG_RUNTIME_DIR", rho_tests::host_dir("rho-runtime"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = receiver.spans();
    let one_shot = spans
        .iter()
        .find(|s| s["name"] == "execute_tool echo" && s["protocol"] == "http")
        .unwrap_or_else(|| panic!("rho call exited without its span: {spans:#?}"));
    // Built at exit, after the host shut down: it still says what served the call then (an
    // isolated plugin), not what the emptied registry says.
    assert_eq!(attribute(one_shot, "rho.source"), "plugin", "{one_shot:#}");
    assert_eq!(
        attribute(one_shot, "rho.isolation"),
        "process",
        "{one_shot:#}"
    );
    assert_eq!(
        attribute(one_shot, "rho.plugin.name"),
        "echo",
        "{one_shot:#}"
    );
    assert_eq!(
        attribute(one_shot, "rho.plugin.version"),
        "0.1.0",
        "{one_shot:#}"
    );

    // OTEL_SDK_DISABLED wins over the endpoint: nothing more arrives.
    let before = receiver.spans().len();
    let out = Command::new(rho_tests::rho_bin())
        .args(["call", "--plugins"])
        .arg(plugins.path())
        .args(["echo", r#"{"text": "not exported"}"#])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", receiver.http),
        )
        .env("OTEL_SDK_DISABLED", "true")
        .env("XDG_STATE_HOME", rho_tests::host_dir("rho-state"))
        .env("XDG_RUNTIME_DIR", rho_tests::host_dir("rho-runtime"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(receiver.spans().len(), before);
}

/// A receiver that takes connections and never answers holds a one-shot command no longer than
/// `[otel] exit_timeout_ms`, and what it did not export is said in one line.
#[test]
fn an_unanswering_receiver_costs_a_one_shot_command_a_bounded_stated_delay() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Connections complete (the kernel's backlog) and nothing is ever read or answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let (plugins, state) = setup("[otel]\nexit_timeout_ms = 300\n");
    let config = state.path().join("rho.toml");
    let started = Instant::now();
    let out = Command::new(rho_tests::rho_bin())
        .args(["--config", config.to_str().unwrap(), "call", "--plugins"])
        .arg(plugins.path())
        .args(["echo", r#"{"text": "unheard"}"#])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .env("XDG_STATE_HOME", rho_tests::host_dir("rho-state"))
        .env("XDG_RUNTIME_DIR", rho_tests::host_dir("rho-runtime"))
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "unheard\n");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("OpenTelemetry"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].starts_with(&format!(
            "rho: OpenTelemetry: otlp http/protobuf http://127.0.0.1:{port}"
        )),
        "{stderr}"
    );
    assert!(said[0].contains("not exported"), "{stderr}");
    // The export's own timeout (10 s a try, with retries) would hold it far longer; the margin
    // is for a loaded machine's start-up, not the export.
    assert!(
        took < Duration::from_secs(8),
        "rho call took {took:?}: {stderr}"
    );
    drop(silent);
}

/// The receiver down: every call ends with its outcome, and the spans that could not go are
/// counted in an `export_status` event (its `dropped`) in the journal.
#[test]
fn with_the_receiver_down_calls_end_and_the_drops_are_counted() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (plugins, state) = setup("[otel]\ntimeout_ms = 500\n");
    // A port nothing listens on.
    let port = rho_tests::free_port();
    let server = serve(
        plugins.path(),
        state.path(),
        &[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )],
    );
    for n in 0..20 {
        let echoed = call(&server.addr, "echo", json!({"text": format!("call {n}")}));
        assert_eq!(echoed["result"]["content"][0]["text"], format!("call {n}"));
    }
    let journal = state.path().join("journal.jsonl");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let found = std::fs::read_to_string(&journal)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .rfind(|e| e["type"] == "export_status" && e["dropped"].as_u64().unwrap_or(0) > 0);
        if let Some(status) = found {
            break status;
        }
        assert!(Instant::now() < deadline, "no export_status with drops");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status["connected"], false, "{status}");
    assert!(
        status["exporter"]
            .as_str()
            .unwrap()
            .starts_with("otlp http/protobuf"),
        "{status}"
    );
    assert!(status["reason"].is_string(), "{status}");
}

/// The call's trace context goes on into an MCP server run as a source: the server receives a
/// `traceparent` of the client's trace whose parent is rho's SERVER span, and the call's span
/// says where the tool came from (`rho.source = mcp_server`).
#[test]
fn the_trace_goes_on_into_an_mcp_server_source() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let receiver = OtlpReceiver::start();
    rho_tests::built();
    let sdk = rho_tests::python_sdk("mcp>=1.9,<2", "mcp1");
    let scripts = rho_tests::workspace_dir().join("tests/python");
    let config = format!(
        "[[mcp]]\nname = \"misbehaving\"\ncommand = \"env\"\n\
         args = [\"PYTHONPATH={sdk}\", \"python3\", \"{script}\"]\n\
         grants = {{ read = [\"{sdk}\", \"{scripts}\"] }}\n",
        sdk = sdk.display(),
        script = scripts.join("mcp_server.py").display(),
        scripts = scripts.display(),
    );
    let (plugins, state) = setup(&config);
    let server = serve(
        plugins.path(),
        state.path(),
        &[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", receiver.http),
        )],
    );
    let answered = call(&server.addr, "traceparent", json!({}));
    let received = answered["result"]["structuredContent"]["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{answered}"))
        .to_owned();
    assert!(received.starts_with(&format!("00-{TRACE}-")), "{received}");
    receiver.wait_for("the call's span", |r| {
        !named(&r.spans(), "execute_tool traceparent").is_empty()
    });
    let spans = receiver.spans();
    let span = named(&spans, "execute_tool traceparent")[0];
    let server_span = named(&spans, "tools/call traceparent")[0];
    assert_eq!(attribute(span, "rho.source"), "mcp_server");
    assert_eq!(attribute(span, "rho.plugin.name"), "mcp:misbehaving");
    // What the MCP server received is the server span's context: one trace, client to tool.
    assert_eq!(
        received,
        format!("00-{TRACE}-{}-01", hex_id(&server_span["spanId"]))
    );
}
