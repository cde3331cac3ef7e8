//! [7/8]: `rho serve` driven by a real MCP client (rmcp's client side) over stdio.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use rho_tests::{faults_variants, install_bytes, plugin_dir, rho_bin};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ClientRequest,
    ContentBlock, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    Implementation, ProgressNotificationParam, ProgressToken, ProtocolVersion, Request,
    RequestMetaObject,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct TestClient {
    elicitation: bool,
    approve: bool,
    list_changed: Arc<AtomicUsize>,
    progress: Arc<Mutex<Vec<String>>>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.elicitation {
            capabilities.elicitation = Some(ElicitationCapability::default());
        }
        ClientConfig::new(capabilities, Implementation::new("rho-tests", "0.1.0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress
            .lock()
            .unwrap()
            .push(params.message.unwrap_or_default());
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked.lock().unwrap().push(message.clone());
        }
        Ok(if self.approve {
            let mut result = ElicitResult::new(ElicitationAction::Accept);
            result.content = Some(json!({"approve": true}));
            result
        } else {
            ElicitResult::new(ElicitationAction::Decline)
        })
    }
}

async fn serve(client: TestClient, args: &[&str]) -> RunningService<RoleClient, TestClient> {
    let mut cmd = tokio::process::Command::new(rho_bin());
    cmd.arg("serve")
        .args(args)
        .env("XDG_STATE_HOME", rho_tests::host_dir("rho-state"));
    let transport = TokioChildProcess::new(cmd).unwrap();
    client.serve(transport).await.unwrap()
}

async fn call(
    service: &RunningService<RoleClient, TestClient>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    service
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap()
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

fn outcome(result: &CallToolResult) -> String {
    result.meta.as_ref().unwrap().0["rho/outcome"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn dir_arg(dir: &Path) -> String {
    dir.to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_call_every_kind_of_result() {
    let dir = plugin_dir(&["echo", "picture", "files", "faults"]);
    // Isolated (the default): the file the plugin reads is granted, outside /tmp (the sandbox's
    // own /tmp hides the host's).
    let granted = tempfile::tempdir_in(rho_tests::host_dir("rho-mcp-tests")).unwrap();
    let service = serve(
        TestClient::default(),
        &[
            "--plugins",
            &dir_arg(dir.path()),
            "--timeout-ms",
            "300",
            "--grant-read",
            &dir_arg(granted.path()),
        ],
    )
    .await;
    let info = service.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "rho");
    let tools = service.list_all_tools().await.unwrap();
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");
    assert!(
        tools.iter().any(|t| t.name == "checkerboard")
            && tools.iter().any(|t| t.name == "read_passage")
    );

    let r = call(&service, "echo", json!({"text": "hi"})).await;
    assert_eq!(
        (text(&r), r.is_error, outcome(&r).as_str()),
        ("hi".to_string(), Some(false), "ok")
    );

    let r = call(&service, "checkerboard", json!({"size": 16})).await;
    let image = r.content.iter().find_map(|c| match c {
        ContentBlock::Image(i) => Some(i.clone()),
        _ => None,
    });
    let image = image.expect("an image content");
    assert_eq!(image.mime_type, "image/png");
    let png = base64::engine::general_purpose::STANDARD
        .decode(&image.data)
        .unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    assert!(text(&r).contains("16x16"));

    let notes = granted.path().join("notes.txt");
    std::fs::write(&notes, "a\nb\nc\n").unwrap();
    let r = call(
        &service,
        "read_passage",
        json!({"path": notes, "start_line": 2, "end_line": 3}),
    )
    .await;
    assert_eq!(text(&r), "2 | b\n3 | c\n");
    // Details are for screens: in `_meta`, never taken for structured content.
    assert_eq!(r.structured_content, None);
    assert_eq!(
        r.meta.as_ref().unwrap().0["rho/details"],
        json!({"path": notes, "start_line": 2, "end_line": 3, "total_lines": 3})
    );

    let r = call(
        &service,
        "read_passage",
        json!({"path": "/no/such", "start_line": 1, "end_line": 1}),
    )
    .await;
    assert_eq!((r.is_error, outcome(&r).as_str()), (Some(true), "error"));
    assert!(text(&r).starts_with("cannot read `/no/such`"));

    let r = call(&service, "spin", json!({})).await;
    assert_eq!(
        (r.is_error, outcome(&r).as_str()),
        (Some(true), "timed_out")
    );
    assert_eq!(text(&r), "tool `spin` timed out after 300 ms");

    // Declared: every hint on every tool, titles, output schemas, structured content beside its
    // text, an answer that breaks its schema, a result cut at its limit.
    for tool in &tools {
        let a = tool
            .annotations
            .as_ref()
            .expect("annotations on every tool");
        assert!(
            a.read_only_hint.is_some()
                && a.destructive_hint.is_some()
                && a.idempotent_hint.is_some()
                && a.open_world_hint.is_some(),
            "{} states every hint: {a:?}",
            tool.name
        );
    }
    let hints = |name: &str| {
        let a = tools
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .annotations
            .clone()
            .unwrap();
        (
            a.read_only_hint.unwrap(),
            a.destructive_hint.unwrap(),
            a.idempotent_hint.unwrap(),
            a.open_world_hint.unwrap(),
        )
    };
    assert_eq!(hints("echo"), (true, false, true, false));
    assert_eq!(hints("spin"), (false, true, false, true));
    let count = tools.iter().find(|t| t.name == "count").unwrap();
    assert_eq!(count.title.as_deref(), Some("Count"));
    let schema = count.output_schema.as_ref().expect("an output schema");
    assert_eq!(schema["properties"]["n"]["minimum"], 1);
    assert!(
        tools
            .iter()
            .find(|t| t.name == "spin")
            .unwrap()
            .output_schema
            .is_none()
    );
    let r = call(&service, "count", json!({"n": 2})).await;
    assert_eq!(outcome(&r), "ok");
    assert_eq!(
        r.structured_content,
        Some(json!({"n": 2, "words": "2 things"}))
    );
    assert_eq!(
        serde_json::from_str::<Value>(&text(&r)).unwrap(),
        json!({"n": 2, "words": "2 things"})
    );
    let r = call(&service, "count", json!({"n": 0})).await;
    assert_eq!((r.is_error, outcome(&r).as_str()), (Some(true), "error"));
    assert_eq!(r.structured_content, None);
    assert!(
        text(&r).contains("field `n`: 0 is less than the minimum of 1"),
        "{}",
        text(&r)
    );
    let r = call(&service, "big_output_cut", json!({"bytes": 5000})).await;
    assert_eq!(outcome(&r), "ok");
    assert!(
        text(&r).ends_with("[rho: the result was cut at 100 of 5000 bytes (the result limit of tool `big_output_cut`); the host keeps the whole]"),
        "{}",
        text(&r)
    );

    // The request's `_meta.traceparent` reaches the plugin (isolated, here).
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut params = CallToolRequestParams::new("call_info");
    params.meta = Some(RequestMetaObject::from(
        json!({"traceparent": traceparent})
            .as_object()
            .unwrap()
            .clone(),
    ));
    let r = service.call_tool(params).await.unwrap();
    let info: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(info["traceparent"], traceparent);

    let r = call(&service, "panic", json!({"message": "inside"})).await;
    assert_eq!((r.is_error, outcome(&r).as_str()), (Some(true), "crashed"));

    let r = call(&service, "echo", json!({"text": 3})).await;
    assert_eq!(outcome(&r), "invalid_arguments");

    let r = call(&service, "no_such_tool", json!({})).await;
    assert_eq!(outcome(&r), "unknown_tool");

    // A plugin that prints on stdout (in process) cannot corrupt the protocol stream.
    let r = call(
        &service,
        "print",
        json!({"text": "{\"jsonrpc\":\"2.0\",\"id\":1}"}),
    )
    .await;
    assert_eq!(outcome(&r), "ok");
    let r = call(&service, "echo", json!({"text": "still talking"})).await;
    assert_eq!(text(&r), "still talking");
    service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_crash_is_an_error_result_and_the_server_serves_on() {
    let dir = plugin_dir(&["echo", "faults"]);
    let service = serve(
        TestClient::default(),
        &["--plugins", &dir_arg(dir.path()), "--isolate"],
    )
    .await;
    let r = call(&service, "segfault", json!({})).await;
    assert_eq!((r.is_error, outcome(&r).as_str()), (Some(true), "crashed"));
    assert!(
        text(&r).contains("killed by signal 11 (SIGSEGV)"),
        "{}",
        text(&r)
    );
    let r = call(&service, "exit_process", json!({"code": 0})).await;
    assert!(
        text(&r).contains("exited with status 0 during the call"),
        "{}",
        text(&r)
    );
    let r = call(&service, "echo", json!({"text": "alive"})).await;
    assert_eq!(text(&r), "alive");
    service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_plugin_cannot_end_stop_or_rewrite_the_server() {
    // Outside /tmp: inside the sandbox /tmp is the plugin's scratch directory.
    let base = rho_tests::host_dir("rho-mcp-tests");
    let dir = tempfile::tempdir_in(&base).unwrap();
    for name in ["echo", "attacks"] {
        rho_tests::install(dir.path(), name);
    }
    let service = serve(
        TestClient::default(),
        &["--plugins", &dir_arg(dir.path()), "--isolate"],
    )
    .await;
    for signal in ["TERM", "STOP", "KILL"] {
        let r = call(&service, "signal_parent", json!({ "signal": signal })).await;
        assert_eq!(outcome(&r), "error", "{signal}: {}", text(&r));
        assert!(text(&r).starts_with("denied: "), "{}", text(&r));
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            call(&service, "echo", json!({"text": "alive"})),
        )
        .await
        .expect("the server answers after the plugin's signal");
        assert_eq!(text(&r), "alive");
    }
    let echo = dir.path().join("libecho.so");
    let before = std::fs::read(&echo).unwrap();
    let r = call(
        &service,
        "write_file",
        json!({"path": echo.to_str().unwrap(), "text": "planted"}),
    )
    .await;
    assert_eq!(outcome(&r), "error", "{}", text(&r));
    assert_eq!(std::fs::read(&echo).unwrap(), before);
    service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_progress_and_list_changed() {
    let (default, v2) = faults_variants();
    let dir = plugin_dir(&["echo"]);
    let faults = dir.path().join("libfaults.so");
    std::fs::copy(default, &faults).unwrap();
    let journal = dir.path().join("journal.jsonl");
    let client = TestClient::default();
    let service = serve(
        client.clone(),
        &[
            "--plugins",
            &dir_arg(dir.path()),
            "--journal",
            journal.to_str().unwrap(),
        ],
    )
    .await;

    // Cancellation: the client gives up on a call; the server ends it at once.
    let params = CallToolRequestParams::new("spin_cancellable");
    let handle = service
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle
        .cancel(Some("the user pressed stop".into()))
        .await
        .unwrap();

    // Progress: partial updates arrive as progress notifications.
    let Value::Object(args) = json!({"count": 3, "interval_ms": 10}) else {
        unreachable!()
    };
    let token = ProgressToken(rmcp::model::NumberOrString::String("p1".into()));
    let mut params = CallToolRequestParams::new("updates").with_arguments(args);
    params.meta = Some(RequestMetaObject::with_progress_token(token));
    let r = service.call_tool(params).await.unwrap();
    assert_eq!(text(&r), "sent 3 updates");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        *client.progress.lock().unwrap(),
        ["update 1/3", "update 2/3", "update 3/3"]
    );

    // list_changed after replacing a plugin file.
    let before = client.list_changed.load(Ordering::SeqCst);
    install_bytes(&faults, &std::fs::read(v2).unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while client.list_changed.load(Ordering::SeqCst) == before
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        client.list_changed.load(Ordering::SeqCst) > before,
        "no list_changed notification"
    );
    let r = call(&service, "build_tag", json!({})).await;
    assert_eq!(text(&r), "v2");

    // The cancelled call ended once, as an error saying so (read back from the journal).
    let events: Vec<Value> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_execution_end" && e["tool"] == "spin_cancellable")
        .collect();
    assert_eq!(ends.len(), 1);
    assert_eq!(
        ends[0]["output"]["text"],
        "call of tool `spin_cancellable` cancelled by the client"
    );
    assert!(ends[0]["duration_ms"].as_f64().unwrap() < 2000.0);
    service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ask_rule_asks_the_clients_user_or_falls_back() {
    let dir = plugin_dir(&["echo"]);
    let config = dir.path().join("rho.toml");
    std::fs::write(&config, "[[gate]]\ntool = \"ech*\"\naction = \"ask\"\n").unwrap();
    let args = [
        "--plugins",
        &dir_arg(dir.path()),
        "--config",
        config.to_str().unwrap(),
    ];

    let yes = TestClient {
        elicitation: true,
        approve: true,
        ..TestClient::default()
    };
    let service = serve(yes.clone(), &args).await;
    let r = call(&service, "echo", json!({"text": "ok?"})).await;
    assert_eq!((outcome(&r).as_str(), text(&r).as_str()), ("ok", "ok?"));
    assert_eq!(yes.asked.lock().unwrap().len(), 1);
    assert!(yes.asked.lock().unwrap()[0].contains("`echo`"));
    service.cancel().await.unwrap();

    let no = TestClient {
        elicitation: true,
        approve: false,
        ..TestClient::default()
    };
    let service = serve(no, &args).await;
    let r = call(&service, "echo", json!({"text": "ok?"})).await;
    assert_eq!(
        (outcome(&r).as_str(), text(&r).as_str()),
        ("blocked", "the user declined the call of `echo`")
    );
    service.cancel().await.unwrap();

    let cannot = TestClient::default();
    let service = serve(cannot, &args).await;
    let r = call(&service, "echo", json!({"text": "ok?"})).await;
    assert_eq!(outcome(&r), "blocked");
    assert_eq!(
        text(&r),
        "tool `echo` needs approval and the client cannot ask its user; the host's fallback denies it"
    );
    service.cancel().await.unwrap();
}
