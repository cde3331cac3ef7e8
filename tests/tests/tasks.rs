//! [10/13]: MCP Tasks on `rho serve --http` (`io.modelcontextprotocol/tasks`, 2026-07-28), in
//! raw JSON-RPC: a long call answered with a task and polled to its end, a task's question
//! answered with `tasks/update`, a cancelled task, a task id of another session refused, a tool
//! that runs only as a task refused to a client that declares none, and how outcomes map to
//! statuses. The tools are the `conformance` fixture's (`slow_compute`, `confirm_delete`, ...).

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::time::{Duration, Instant};

use rho_tests::{HttpServer, install, modern_rpc, modern_rpc_from, post, rpc_of};
use serde_json::{Value, json};

/// `rho serve --http` over the `conformance` fixture, with its journal.
fn serve() -> (HttpServer, tempfile::TempDir, tempfile::TempDir) {
    serve_with("")
}

/// The same with `config` as its `rho.toml`.
fn serve_with(config: &str) -> (HttpServer, tempfile::TempDir, tempfile::TempDir) {
    let plugins = tempfile::tempdir_in(rho_tests::host_dir("rho-tasks-tests")).unwrap();
    install(plugins.path(), "conformance");
    let state = tempfile::tempdir().unwrap();
    let config_file = state.path().join("rho.toml");
    std::fs::write(&config_file, config).unwrap();
    let server = serve_again(plugins.path(), state.path());
    (server, plugins, state)
}

/// `rho serve --http` over `plugins` with the configuration and journal in `state` (a server
/// started again on the same files).
fn serve_again(plugins: &std::path::Path, state: &std::path::Path) -> HttpServer {
    let config_file = state.join("rho.toml");
    let args = [
        "--http",
        "127.0.0.1:0",
        "--config",
        config_file.to_str().unwrap(),
    ];
    HttpServer::start(plugins, &args, &state.join("tasks.jsonl"))
}

/// The capabilities of a client that declares tasks.
fn with_tasks() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}})
}

fn call(addr: &str, tool: &str, arguments: Value, capabilities: Value) -> Value {
    modern_rpc(
        addr,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
        capabilities,
    )
}

fn get(addr: &str, id: &str) -> Value {
    modern_rpc(addr, "tasks/get", json!({"taskId": id}), with_tasks())
}

/// Polls task `id` until its status is `want` (within 20 s): the `tasks/get` result then.
fn poll_until(addr: &str, id: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let result = get(addr, id)["result"].clone();
        if result["status"] == want {
            return result;
        }
        assert!(
            Instant::now() < deadline,
            "task {id} never {want}: {result}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A created task's id, checked: a `task` result with a 128-bit hex id, `working`, its TTL and
/// poll interval in integer milliseconds.
fn created(response: &Value) -> String {
    let result = &response["result"];
    assert_eq!(result["resultType"], "task", "{response}");
    assert_eq!(result["status"], "working", "{response}");
    assert!(
        result["ttlMs"].is_u64() && result["pollIntervalMs"].is_u64(),
        "{response}"
    );
    let id = result["taskId"].as_str().unwrap().to_owned();
    assert!(
        id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()),
        "{id}"
    );
    id
}

#[test]
fn a_long_call_is_a_task_that_the_client_polls_to_its_end() {
    let (server, _plugins, _state) = serve();
    let addr = &server.addr;
    let id = created(&call(
        addr,
        "slow_compute",
        json!({"seconds": 0.5}),
        with_tasks(),
    ));
    // Readable as soon as the client has its id.
    let first = get(addr, &id)["result"].clone();
    assert_eq!(first["taskId"], id.as_str());
    assert!(
        first["status"] == "working" || first["status"] == "completed",
        "{first}"
    );
    let done = poll_until(addr, &id, "completed");
    assert_eq!(done["resultType"], "complete");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Computed after 0.5 seconds"
    );
    assert_eq!(done["result"]["_meta"]["rho/outcome"], "ok", "{done}");
    // A quick tool answers within the request, tasks declared or not; a long one answers so for
    // a client that declares no tasks.
    let greeted = call(addr, "greet", json!({"name": "Ada"}), with_tasks());
    assert_eq!(greeted["result"]["content"][0]["text"], "Hello, Ada!");
    assert!(greeted["result"]["taskId"].is_null(), "{greeted}");
    let direct = call(addr, "slow_compute", json!({"seconds": 0}), json!({}));
    assert_eq!(direct["result"]["resultType"], "complete", "{direct}");
}

#[test]
fn a_tasks_question_is_answered_with_tasks_update() {
    let (server, _plugins, _state) = serve();
    let addr = &server.addr;
    let id = created(&call(
        addr,
        "confirm_delete",
        json!({"path": "/srv/x"}),
        with_tasks(),
    ));
    let asking = poll_until(addr, &id, "input_required");
    let (key, request) = asking["inputRequests"]
        .as_object()
        .and_then(|requests| requests.iter().next())
        .unwrap();
    assert_eq!(request["method"], "elicitation/create", "{asking}");
    assert_eq!(request["params"]["message"], "Delete /srv/x?");
    let answer = json!({key.as_str(): {"action": "accept", "content": {"confirm": true}}});
    let ack = modern_rpc(
        addr,
        "tasks/update",
        json!({"taskId": id, "inputResponses": answer}),
        with_tasks(),
    );
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let done = poll_until(addr, &id, "completed");
    assert_eq!(done["result"]["content"][0]["text"], "Deleted /srv/x");
}

/// A question no `tasks/update` answers is given up after the host's bound on a question: the
/// tool reads it as cancelled and the task goes on to its end (before: it showed the question
/// for ever, and held its turn among the calls at once).
#[test]
fn a_question_left_unanswered_is_given_up_and_the_task_ends() {
    let (server, _plugins, _state) = serve_with("[runner]\nask_timeout_ms = 500\n");
    let addr = &server.addr;
    let id = created(&call(
        addr,
        "confirm_delete",
        json!({"path": "/srv/y"}),
        with_tasks(),
    ));
    poll_until(addr, &id, "input_required");
    let done = poll_until(addr, &id, "completed");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Kept /srv/y (action=cancel"), "{done}");
}

#[test]
fn a_cancelled_task_stays_cancelled_and_its_call_ends_once() {
    let (server, _plugins, state) = serve();
    let addr = &server.addr;
    let id = created(&call(
        addr,
        "slow_compute",
        json!({"seconds": 30}),
        with_tasks(),
    ));
    poll_until(addr, &id, "working");
    let ack = modern_rpc(addr, "tasks/cancel", json!({"taskId": id}), with_tasks());
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_eq!(get(addr, &id)["result"]["status"], "cancelled");
    // Again: the same acknowledgement, the same status.
    let again = modern_rpc(addr, "tasks/cancel", json!({"taskId": id}), with_tasks());
    assert_eq!(again["result"]["resultType"], "complete", "{again}");
    // The call itself ended, once, long before its 30 seconds.
    let journal = state.path().join("tasks.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    let ends = loop {
        let ends: Vec<Value> = std::fs::read_to_string(&journal)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["type"] == "tool_execution_end" && e["tool"] == "slow_compute")
            .collect();
        if !ends.is_empty() || Instant::now() > deadline {
            break ends;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ends.len(), 1, "{ends:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(addr, &id)["result"]["status"], "cancelled");
}

#[test]
fn a_task_is_read_by_the_session_that_made_it_alone() {
    let (server, _plugins, _state) = serve();
    let addr = &server.addr;
    // Two 2025-era sessions that declared tasks at their start.
    let open = || {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "clientInfo": {"name": "tasks-test", "version": "1"},
        }});
        let (status, head) = post(addr, &[], body.to_string().as_bytes());
        assert_eq!(status, 200, "{head}");
        let session = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .starts_with("mcp-session-id:")
                    .then(|| l[15..].trim().to_owned())
            })
            .unwrap();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        post(
            addr,
            &[
                ("mcp-session-id", &session),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
            initialized.to_string().as_bytes(),
        );
        session
    };
    let rpc = |session: &str, method: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params});
        let headers = [
            ("mcp-session-id", session),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        rpc_of(&post(addr, &headers, body.to_string().as_bytes()).1)
    };
    let (mine, theirs) = (open(), open());
    let made = rpc(
        &mine,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 5}}),
    );
    let id = created(&made);
    assert_eq!(
        rpc(&mine, "tasks/get", json!({"taskId": id}))["result"]["taskId"],
        id.as_str()
    );
    for method in ["tasks/get", "tasks/cancel"] {
        let refused = rpc(&theirs, method, json!({"taskId": id}));
        assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
    }
    assert_eq!(
        rpc(&mine, "tasks/get", json!({"taskId": id}))["result"]["status"],
        "working"
    );
}

#[test]
fn outcomes_map_to_task_statuses_one_way() {
    let (server, _plugins, _state) = serve();
    let addr = &server.addr;
    // A tool that runs only as a task, for a client that declares no tasks: -32021.
    let refused = call(addr, "failing_job", json!({}), json!({}));
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert!(
        refused["error"]["data"]["requiredCapabilities"]["extensions"]
            ["io.modelcontextprotocol/tasks"]
            .is_object(),
        "{refused}"
    );
    // A tool that ran and failed: completed, its result an error with rho's outcome.
    let id = created(&call(addr, "failing_job", json!({}), with_tasks()));
    let done = poll_until(addr, &id, "completed");
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(done["result"]["_meta"]["rho/outcome"], "error", "{done}");
    assert!(done["error"].is_null(), "{done}");
    // A call refused before it ran (its arguments do not fit): failed, a JSON-RPC error.
    let id = created(&call(addr, "protocol_error_job", json!({}), with_tasks()));
    let failed = poll_until(addr, &id, "failed");
    assert_eq!(failed["error"]["code"], -32602, "{failed}");
    assert!(failed["result"].is_null(), "{failed}");
    // An id no one made.
    let unknown = get(addr, "00000000000000000000000000000000");
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

/// On a fixed journal, tasks outlive the server: killed and started again on the same file, it
/// answers `tasks/get` of a task that had ended with its result, and of one whose call it
/// interrupted with `failed`, saying so (before: both ids were unknown).
#[test]
fn tasks_outlive_a_restart_on_the_same_journal() {
    let (server, plugins, state) = serve();
    let addr = server.addr.clone();
    let ended = created(&call(
        &addr,
        "slow_compute",
        json!({"seconds": 0.1}),
        with_tasks(),
    ));
    let before = poll_until(&addr, &ended, "completed");
    let interrupted = created(&call(
        &addr,
        "slow_compute",
        json!({"seconds": 30}),
        with_tasks(),
    ));
    poll_until(&addr, &interrupted, "working");
    let cancelled = created(&call(
        &addr,
        "slow_compute",
        json!({"seconds": 30}),
        with_tasks(),
    ));
    modern_rpc(
        &addr,
        "tasks/cancel",
        json!({"taskId": cancelled}),
        with_tasks(),
    );
    // Give the journal's writer its moment, then the server dies without a word (SIGKILL).
    std::thread::sleep(Duration::from_millis(300));
    drop(server);

    let server = serve_again(plugins.path(), state.path());
    let addr = &server.addr;
    let after = get(addr, &ended)["result"].clone();
    assert_eq!(after["status"], "completed", "{after}");
    assert_eq!(after["result"], before["result"], "{after}");
    assert_eq!(after["createdAt"], before["createdAt"], "{after}");
    assert_eq!(after["ttlMs"], before["ttlMs"], "{after}");
    let failed = get(addr, &interrupted)["result"].clone();
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("server restarted"), "{failed}");
    assert_eq!(get(addr, &cancelled)["result"]["status"], "cancelled");
    // An ended task stays as it ended: a cancel is acknowledged and changes nothing.
    let ack = modern_rpc(
        addr,
        "tasks/cancel",
        json!({"taskId": interrupted}),
        with_tasks(),
    );
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_eq!(get(addr, &interrupted)["result"]["status"], "failed");
    // And again after a second restart: the interruption was recorded, not guessed again.
    drop(server);
    let server = serve_again(plugins.path(), state.path());
    let again = get(&server.addr, &interrupted)["result"].clone();
    assert_eq!(again["status"], "failed", "{again}");
    assert_eq!(again["error"], failed["error"], "{again}");
    assert_eq!(
        get(&server.addr, &ended)["result"]["result"],
        before["result"]
    );
    // New tasks work as before on the restarted server.
    let fresh = created(&call(
        &server.addr,
        "slow_compute",
        json!({"seconds": 0}),
        with_tasks(),
    ));
    poll_until(&server.addr, &fresh, "completed");
}

/// `tools/call` with `extra` params (`inputResponses`, `requestState`) beside name and arguments.
fn call_again(addr: &str, tool: &str, extra: Value, capabilities: Value) -> Value {
    let mut params = json!({"name": tool, "arguments": {}});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    modern_rpc(addr, "tools/call", params, capabilities)
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// Input-required rounds (2026-07-28) with the keys the tool gave its questions: a retry that
/// answers nothing it asked is asked again (a fresh state), an answer the client gives before
/// any question is used at once, a state that names no parked call is refused (before: every
/// question was `rho/ask`, a missing answer read as cancelled, an unknown state ran the tool
/// anew).
#[test]
fn input_required_rounds_ask_by_the_tools_keys() {
    let (server, _plugins, _state) = serve();
    let addr = &server.addr;
    let elicit = json!({"elicitation": {}});
    let tool = "test_input_required_result_elicitation";
    let first = call_again(addr, tool, json!({}), elicit.clone())["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert_eq!(
        first["inputRequests"]["user_name"]["params"]["message"], "What is your name?",
        "{first}"
    );
    let state = first["requestState"].as_str().unwrap().to_owned();
    // A retry that answers something else: the question again, under a new state.
    let again = call_again(
        addr,
        tool,
        json!({"inputResponses": {"wrong_key": accept(json!({"x": 1}))}, "requestState": state}),
        elicit.clone(),
    )["result"]
        .clone();
    assert_eq!(again["resultType"], "input_required", "{again}");
    assert!(again["inputRequests"]["user_name"].is_object(), "{again}");
    let state2 = again["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state, state2);
    // The old state is used up; an altered one names nothing.
    for used in [state.clone(), format!("{state2}-TAMPERED")] {
        let refused = call_again(
            addr,
            tool,
            json!({"inputResponses": {"user_name": accept(json!({"name": "Eve"}))}, "requestState": used}),
            elicit.clone(),
        );
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
    }
    let done = call_again(
        addr,
        tool,
        json!({"inputResponses": {"user_name": accept(json!({"name": "Ada"}))}, "requestState": state2}),
        elicit.clone(),
    )["result"]
        .clone();
    assert_eq!(done["content"][0]["text"], "Hello, Ada!", "{done}");
    // The answer given with the first request: no round at all.
    let at_once = call_again(
        addr,
        tool,
        json!({"inputResponses": {"user_name": accept(json!({"name": "Grace"}))}}),
        elicit.clone(),
    )["result"]
        .clone();
    assert_eq!(at_once["content"][0]["text"], "Hello, Grace!", "{at_once}");
    // Two rounds, each under its own key.
    let tool = "test_input_required_result_multi_round";
    let step1 = call_again(addr, tool, json!({}), elicit.clone())["result"].clone();
    assert!(step1["inputRequests"]["step1"].is_object(), "{step1}");
    let step2 = call_again(
        addr,
        tool,
        json!({"inputResponses": {"step1": accept(json!({"name": "Ada"}))}, "requestState": step1["requestState"]}),
        elicit.clone(),
    )["result"]
        .clone();
    assert!(step2["inputRequests"]["step2"].is_object(), "{step2}");
    let done = call_again(
        addr,
        tool,
        json!({"inputResponses": {"step2": accept(json!({"color": "green"}))}, "requestState": step2["requestState"]}),
        elicit,
    )["result"]
        .clone();
    assert_eq!(done["content"][0]["text"], "Ada likes green", "{done}");
}

/// A task whose tool asks two questions at once shows both; a `tasks/update` that answers one
/// is acknowledged and the task goes on asking the other alone, until it has both (before:
/// one question at a time).
#[test]
fn a_task_asking_two_questions_takes_their_answers_one_at_a_time() {
    let (server, _plugins, _state) = serve();
    let addr = &server.addr;
    let id = created(&call(addr, "multi_input", json!({}), with_tasks()));
    let asking = poll_until(addr, &id, "input_required");
    let keys: Vec<&String> = asking["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["first", "last"], "{asking}");
    let update = |responses: Value| {
        let ack = modern_rpc(
            addr,
            "tasks/update",
            json!({"taskId": id, "inputResponses": responses}),
            with_tasks(),
        );
        assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    };
    update(json!({"first": accept(json!({"first": "Ada"}))}));
    let still = get(addr, &id)["result"].clone();
    assert_eq!(still["status"], "input_required", "{still}");
    let keys: Vec<&String> = still["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["last"], "{still}");
    update(json!({"last": accept(json!({"last": "Lovelace"}))}));
    let done = poll_until(addr, &id, "completed");
    assert_eq!(
        done["result"]["content"][0]["text"], "first: Ada; last: Lovelace",
        "{done}"
    );
}

/// A tool that asks first (`Tool::asks_first`) and runs only as a task: its question comes in
/// the request (no task yet), and the retry that answers it gets the task, whose result has the
/// answer (before: the task was made at once and the question came through `tasks/get`).
#[test]
fn a_tool_that_asks_first_becomes_a_task_once_answered() {
    let (server, _plugins, _state) = serve();
    let addr = &server.addr;
    let tool = "test_tool_with_task";
    let round = call_again(addr, tool, json!({}), with_tasks())["result"].clone();
    assert_eq!(round["resultType"], "input_required", "{round}");
    assert!(round["taskId"].is_null(), "{round}");
    assert!(round["inputRequests"]["user_name"].is_object(), "{round}");
    let made = call_again(
        addr,
        tool,
        json!({"inputResponses": {"user_name": accept(json!({"name": "Alice"}))}, "requestState": round["requestState"]}),
        with_tasks(),
    );
    assert!(made["result"]["requestState"].is_null(), "{made}");
    let id = created(&made);
    let done = poll_until(addr, &id, "completed");
    assert_eq!(
        done["result"]["content"][0]["text"], "Hello, Alice!",
        "{done}"
    );
}

/// The official Tasks extension client (`@modelcontextprotocol/ext-tasks` over the TypeScript
/// SDK, 2026-07-28): a long call is a task it settles, a task's question reaches its input
/// handler and the answer goes back by `tasks/update`, a cancelled task settles cancelled, a
/// quick tool answers at once; and after the server is killed and started again on the same
/// journal, the task references it kept resume: the ended task with its result, the
/// interrupted one failed, saying so.
#[test]
fn the_typescript_tasks_client_runs_tasks_and_resumes_them_after_a_restart() {
    let project = rho_tests::npm_project("typescript");
    // Resolved from the installed project's node_modules.
    let script = project.join("tasks.mjs");
    std::fs::copy(
        rho_tests::workspace_dir().join("tests/typescript/tasks.mjs"),
        &script,
    )
    .unwrap();
    let node = |url: &str, args: &[&str], context: &str| {
        let mut client = std::process::Command::new("node");
        client.arg(&script).arg(url).args(args);
        rho_tests::client_report(client, context)
    };
    let (server, plugins, state) = serve();
    let report = node(&server.url(), &["run"], "run");
    assert_eq!(
        report["slow"],
        json!({"kind": "task", "status": "completed", "text": "Computed after 0.5 seconds"}),
        "{report}"
    );
    assert_eq!(
        report["confirm"],
        json!({"kind": "task", "status": "completed", "text": "Deleted /srv/ts"}),
        "{report}"
    );
    assert_eq!(report["asked"], json!(["Delete /srv/ts?"]), "{report}");
    assert_eq!(
        report["cancelled"],
        json!({"kind": "task", "status": "cancelled"}),
        "{report}"
    );
    assert_eq!(
        report["greet"],
        json!({"kind": "immediate", "status": "completed", "text": "Hello, Ada!"}),
        "{report}"
    );

    let references = node(&server.url(), &["start"], "start");
    // The quick task ends and is journaled; then the server dies without a word.
    std::thread::sleep(Duration::from_millis(1000));
    drop(server);
    let server = serve_again(plugins.path(), state.path());
    let references = references.to_string();
    let resumed = node(&server.url(), &["resume", &references], "resume");
    assert_eq!(
        resumed["ended"],
        json!({"status": "completed", "text": "Computed after 0.2 seconds"}),
        "{resumed}"
    );
    assert_eq!(resumed["running"]["status"], "failed", "{resumed}");
    assert!(
        resumed["running"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("server restarted"),
        "{resumed}"
    );
}

/// `rho serve` over stdio, its requests 2026-07-28's (each with its own `_meta`).
struct Stdio {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    next: u64,
}

impl Stdio {
    fn start(plugins: &std::path::Path, journal: &std::path::Path) -> Stdio {
        let mut child = std::process::Command::new(rho_tests::rho_bin())
            .args(["serve", "--plugins"])
            .arg(plugins)
            .arg("--journal")
            .arg(journal)
            .env("XDG_STATE_HOME", rho_tests::host_dir("rho-state"))
            .env("XDG_RUNTIME_DIR", rho_tests::host_dir("rho-runtime"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        Stdio {
            child,
            lines: std::io::BufRead::lines(std::io::BufReader::new(stdout)),
            next: 0,
        }
    }

    fn rpc(&mut self, method: &str, mut params: Value) -> Value {
        use std::io::Write;
        self.next += 1;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": with_tasks(),
        });
        let request =
            json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        loop {
            let line = self.lines.next().unwrap().unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == self.next {
                return message;
            }
        }
    }

    fn poll_until(&mut self, id: &str, want: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let result = self.rpc("tasks/get", json!({"taskId": id}))["result"].clone();
            if result["status"] == want {
                return result;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} never {want}: {result}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Tasks over stdio: a long call is a task polled to its end, a question is answered with
/// `tasks/update`; killed and started again on the same journal, the server answers for the
/// ended task (the one stdio client is its owner again).
#[test]
fn tasks_over_stdio_end_are_answered_and_outlive_a_restart() {
    let plugins = tempfile::tempdir_in(rho_tests::host_dir("rho-tasks-tests")).unwrap();
    install(plugins.path(), "conformance");
    let state = tempfile::tempdir().unwrap();
    let journal = state.path().join("stdio.jsonl");
    let mut server = Stdio::start(plugins.path(), &journal);
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 0.2}});
    let id = created(&server.rpc("tools/call", call));
    let done = server.poll_until(&id, "completed");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Computed after 0.2 seconds"
    );
    let call = json!({"name": "confirm_delete", "arguments": {"path": "/srv/io"}});
    let asking_id = created(&server.rpc("tools/call", call));
    let asking = server.poll_until(&asking_id, "input_required");
    let key = asking["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let answer = json!({key: {"action": "accept", "content": {"confirm": true}}});
    let ack = server.rpc(
        "tasks/update",
        json!({"taskId": asking_id, "inputResponses": answer}),
    );
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let deleted = server.poll_until(&asking_id, "completed");
    assert_eq!(deleted["result"]["content"][0]["text"], "Deleted /srv/io");
    std::thread::sleep(Duration::from_millis(300));
    drop(server);

    let mut server = Stdio::start(plugins.path(), &journal);
    let after = server.rpc("tasks/get", json!({"taskId": id}))["result"].clone();
    assert_eq!(after["status"], "completed", "{after}");
    assert_eq!(after["result"], done["result"], "{after}");
}

/// `tasks/update`s that answer nothing do not hold a question open past the host's bound: the
/// task still ends (before: each one restarted the bound, so a client that kept sending them
/// held the task, and its turn among the calls at once, for ever).
#[test]
fn updates_that_answer_nothing_do_not_hold_a_question_open() {
    let (server, _plugins, _state) = serve_with("[runner]\nask_timeout_ms = 800\n");
    let addr = &server.addr;
    let id = created(&call(addr, "multi_input", json!({}), with_tasks()));
    poll_until(addr, &id, "input_required");
    let started = Instant::now();
    loop {
        let ack = modern_rpc(
            addr,
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"not_asked": {"action": "accept"}}}),
            with_tasks(),
        );
        assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
        let now = get(addr, &id)["result"].clone();
        if now["status"] == "completed" {
            let text = now["result"]["content"][0]["text"].as_str().unwrap();
            assert!(text.contains("action=cancel"), "{now}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the question outlived its bound: {now}"
        );
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// A tool that asks first, called with the answer already in the request: no round, the task
/// at once (before: the call then ran inside the request).
#[test]
fn a_tool_that_asks_first_answered_in_advance_is_a_task_at_once() {
    let (server, _plugins, _state) = serve();
    let addr = &server.addr;
    let made = call_again(
        addr,
        "test_tool_with_task",
        json!({"inputResponses": {"user_name": accept(json!({"name": "Bo"}))}}),
        with_tasks(),
    );
    let id = created(&made);
    let done = poll_until(addr, &id, "completed");
    assert_eq!(done["result"]["content"][0]["text"], "Hello, Bo!", "{done}");
}

/// One client floods the server with tasks that end at once (arguments that do not fit): past
/// its bound its own ended tasks go first, so it keeps making tasks and the server never fills
/// up; a client of another address then still gets a task (before: the flooder was refused past
/// 1,024, and five of its sessions filled the server's 4,096 for an hour, refusing everyone).
#[test]
fn a_task_flood_takes_only_its_own_room_and_its_ended_tasks_go_first() {
    let (server, _plugins, _state) = serve();
    let addr = &server.addr;
    for n in 0..1100 {
        let response = call(addr, "slow_compute", json!({"seconds": "no"}), with_tasks());
        assert_eq!(
            response["result"]["resultType"], "task",
            "task {n} of the flood was refused: {response}"
        );
    }
    let other = modern_rpc_from(
        Some("127.0.0.2"),
        addr,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 0}}),
        with_tasks(),
    );
    let id = created(&other);
    // Its own, readable and run to its end.
    let polled = modern_rpc_from(
        Some("127.0.0.2"),
        addr,
        "tasks/get",
        json!({"taskId": id}),
        with_tasks(),
    );
    assert_eq!(polled["result"]["taskId"], id.as_str(), "{polled}");
}
