//! [7/9]: `rho serve --http`: MCP Streamable HTTP through the official Python SDK (1.x and 2.x),
//! and who may call: tokens, `Origin`, bounded bodies; a client that disconnects mid-call stops
//! its call.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rho_tests::{
    HttpServer, client_report, install, post, python_sdk, rho_bin, rpc_of, workspace_dir,
};
use serde_json::{Value, json};

fn plugins(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(rho_tests::host_dir("rho-http-tests")).unwrap();
    for name in names {
        install(dir.path(), name);
    }
    dir
}

/// An `initialize` over `addr` (with `extra` headers) answered 200: the new session's id.
fn open_session(addr: &str, extra: &[(&str, &str)]) -> String {
    let (status, head) = post(addr, extra, &initialize());
    assert_eq!(status, 200, "{head}");
    head.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("mcp-session-id:")
                .then(|| l[15..].trim().to_owned())
        })
        .expect("a session id")
}

/// `rho serve --http` on a free loopback port over `dir` with `config` as its rho.toml, both
/// files named after `name`.
fn serve_with_config(dir: &Path, name: &str, config: &str) -> HttpServer {
    let path = dir.join(format!("../http-{name}.toml"));
    std::fs::write(&path, config).unwrap();
    let journal = dir.join(format!("../http-{name}.jsonl"));
    let _ = std::fs::remove_file(&journal);
    HttpServer::start(
        dir,
        &["--http", "127.0.0.1:0", "--config", path.to_str().unwrap()],
        &journal,
    )
}

fn initialize() -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string()
    .into_bytes()
}

fn python(sdk: &Path, url: &str, token: Option<&str>) -> Value {
    let mut client = Command::new("python3");
    client
        .arg(workspace_dir().join("tests/python/http_client.py"))
        .arg(url)
        .args(token)
        .env("PYTHONPATH", sdk);
    client_report(client, url)
}

/// `logging/setLevel` is a session's own: of two sessions of one server (2025-era, the
/// official Python SDK), the one that asked for debug hears a plugin's four lines, the other
/// none.
#[test]
fn each_http_session_hears_log_lines_at_its_own_level() {
    let dir = rho_tests::plugin_dir(&["faults"]);
    let journal = dir.path().join("../http-log-sessions.jsonl");
    let server = HttpServer::start(dir.path(), &["--http", "127.0.0.1:0"], &journal);
    let sdk = rho_tests::python_sdk("mcp>=1.9,<2", "mcp1");
    let mut client = Command::new("python3");
    client
        .arg(workspace_dir().join("tests/python/log_sessions.py"))
        .arg(server.url())
        .env("PYTHONPATH", &sdk);
    let report = client_report(client, "log sessions");
    assert_eq!(report["debug"]["text"], "logged 4 lines", "{report}");
    assert_eq!(
        report["debug"]["heard"],
        json!([
            "debug:debug line",
            "info:info line",
            "warning:warning line",
            "error:error line"
        ]),
        "{report}"
    );
    assert_eq!(report["unset"]["heard"], json!([]), "{report}");
}

/// The Python SDK in each spec era: the scripts' mode, the requirement, its directory, the
/// protocol version it negotiates with rho.
const PYTHON_ERAS: [(&str, &str, &str, &str); 2] = [
    ("modern", "mcp>=2,<3", "mcp2", "2026-07-28"),
    ("legacy", "mcp>=1.9,<2", "mcp1", "2025-11-25"),
];

/// A `rho serve` of a directory holding `echo`, for a client over `transport`: `stdio`, the
/// client starts it (`target` is the `rho` binary); `http`, it runs here (`target` is its URL).
/// With `ask`, a config whose rule asks the user about `echo` (given to the server over HTTP,
/// to be given by the client over stdio).
struct ClientTarget {
    dir: tempfile::TempDir,
    config: Option<std::path::PathBuf>,
    target: String,
    _server: Option<HttpServer>,
}

fn client_target(transport: &str, ask: bool, name: &str, served: &[&str]) -> ClientTarget {
    let dir = plugins(served);
    let journal = dir.path().join(format!("../http-{name}.jsonl"));
    let config = ask.then(|| {
        let config = dir.path().join(format!("../http-{name}.toml"));
        std::fs::write(&config, "[[gate]]\ntool = \"echo\"\naction = \"ask\"\n").unwrap();
        config
    });
    let server = (transport == "http").then(|| {
        let mut args = vec!["--http", "127.0.0.1:0"];
        if let Some(config) = &config {
            args.extend(["--config", config.to_str().unwrap()]);
        }
        HttpServer::start(dir.path(), &args, &journal)
    });
    let target = match &server {
        Some(server) => server.url(),
        None => rho_bin().to_str().unwrap().to_owned(),
    };
    ClientTarget {
        dir,
        config,
        target,
        _server: server,
    }
}

#[test]
fn the_python_sdk_calls_echo_an_image_and_progress_over_http() {
    let dir = plugins(&["echo", "picture", "faults"]);
    let journal = dir.path().join("../http-python.jsonl");
    let server = HttpServer::start(dir.path(), &["--http", "127.0.0.1:0"], &journal);
    for (requirement, name) in [("mcp>=2,<3", "mcp2"), ("mcp>=1.9,<2", "mcp1")] {
        let sdk = python_sdk(requirement, name);
        let report = python(&sdk, &server.url(), None);
        assert_eq!(report["echo"], "over http", "{requirement}: {report}");
        assert_eq!(report["image"], json!(["text", "image"]), "{requirement}");
        assert_eq!(report["image_mime"], "image/png");
        assert_eq!(report["updates"], "sent 5 updates");
        assert_eq!(
            report["progress"],
            json!([
                "update 1/5",
                "update 2/5",
                "update 3/5",
                "update 4/5",
                "update 5/5"
            ]),
            "{requirement}"
        );
        assert!(
            report["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == "checkerboard")
        );
    }
}

#[test]
fn requests_without_the_token_or_from_a_foreign_origin_are_refused() {
    let dir = plugins(&["echo", "picture", "faults"]);
    let token = "correct-horse-battery-staple-0123456789";
    let token_file = dir.path().join("../http-token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    // Readable by others: refused with one line.
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let out = Command::new(rho_bin())
        .args(["serve", "--http", "127.0.0.1:0", "--plugins"])
        .arg(dir.path())
        .arg("--token-file")
        .arg(&token_file)
        .env("XDG_STATE_HOME", rho_tests::host_dir("rho-state"))
        .env("XDG_RUNTIME_DIR", rho_tests::host_dir("rho-runtime"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("others can read it (chmod 600)"),
        "{stderr}"
    );
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();

    let journal = dir.path().join("../http-token.jsonl");
    let server = HttpServer::start(
        dir.path(),
        &[
            "--http",
            "127.0.0.1:0",
            "--token-file",
            token_file.to_str().unwrap(),
        ],
        &journal,
    );
    let bearer = format!("Bearer {token}");
    let (status, _) = post(&server.addr, &[], &initialize());
    assert_eq!(status, 401, "no token");
    let (status, _) = post(
        &server.addr,
        &[(
            "Authorization",
            "Bearer correct-horse-battery-staple-0123456780",
        )],
        &initialize(),
    );
    assert_eq!(status, 401, "a wrong token");
    let (status, text) = post(&server.addr, &[("Authorization", &bearer)], &initialize());
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"serverInfo\""), "{text}");
    // DNS rebinding: a page of another origin, even with the token.
    let (status, _) = post(
        &server.addr,
        &[
            ("Authorization", &bearer),
            ("Origin", "http://evil.example"),
        ],
        &initialize(),
    );
    assert_eq!(status, 403, "a foreign origin");
    let (status, _) = post(
        &server.addr,
        &[
            ("Authorization", &bearer),
            ("Origin", "http://localhost:3000"),
        ],
        &initialize(),
    );
    assert_eq!(status, 200, "a loopback origin");
    // Bounded bodies.
    let big = vec![b' '; 17 << 20];
    let (status, _) = post(&server.addr, &[("Authorization", &bearer)], &big);
    assert_eq!(status, 413, "a body over serve.max_body_bytes");
    // The real client with the token.
    let report = python(&python_sdk("mcp>=2,<3", "mcp2"), &server.url(), Some(token));
    assert_eq!(report["echo"], "over http");
    drop(server);

    // Any address but loopback: a token is made and printed once.
    let server = HttpServer::start(dir.path(), &["--http", "0.0.0.0:0"], &journal);
    let made = server.made_token.clone().expect("a token printed");
    assert_eq!(made.len(), 64);
    let port = server.addr.rsplit(':').next().unwrap();
    let local = format!("127.0.0.1:{port}");
    assert_eq!(post(&local, &[], &initialize()).0, 401);
    let made_bearer = format!("Bearer {made}");
    assert_eq!(
        post(&local, &[("Authorization", &made_bearer)], &initialize()).0,
        200
    );
}

#[test]
fn a_client_that_disconnects_mid_call_stops_the_call() {
    let dir = plugins(&["faults"]);
    // One worker: the next call is answered only if the dropped call's worker was freed.
    let server = serve_with_config(
        dir.path(),
        "disconnect",
        "[workers]\nmax_workers = 1\nspares = 0\n",
    );
    let journal = dir.path().join("../http-disconnect.jsonl");
    let mut session = Session::open(&server.addr, &[]);
    // A call that would run 30 s, then the connection drops.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 30000}}})
    .to_string();
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        server.addr,
        call.len()
    );
    for (name, value) in session.header_refs() {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&call);
    stream.write_all(request.as_bytes()).unwrap();
    let started = Instant::now();
    // The call is running (its start is in the journal), then the client goes away.
    let ends = |kind: &str| {
        std::fs::read_to_string(&journal)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["type"] == kind)
            .collect::<Vec<Value>>()
    };
    while ends("tool_running").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the call never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stream);
    let dropped = Instant::now();
    let end = loop {
        if let Some(end) = ends("tool_execution_end").pop() {
            break end;
        }
        assert!(
            dropped.elapsed() < Duration::from_secs(5),
            "the call did not end after the client left"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(end["outcome"], "error", "{end}");
    assert!(
        end["output"]["text"]
            .as_str()
            .unwrap()
            .contains("cancelled by the client"),
        "{end}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ends("tool_execution_end").len(), 1, "one end event");
    let asked = Instant::now();
    let (status, text) = session.send("tools/call", json!({"name": "nap", "arguments": {"ms": 1}}));
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"rho/outcome\":\"ok\""), "{text}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the worker was not freed"
    );
}

#[test]
fn both_spec_eras_see_a_reload_as_a_list_change_over_stdio_and_http() {
    let picture = rho_tests::plugin_lib("picture");
    for (mode, requirement, name, version) in PYTHON_ERAS {
        let sdk = python_sdk(requirement, name);
        for transport in ["stdio", "http"] {
            let served = client_target(transport, false, "listen", &["echo"]);
            let mut client = Command::new("python3");
            client
                .arg(workspace_dir().join("tests/python/listen.py"))
                .args([mode, transport, &served.target])
                .arg(served.dir.path())
                .arg(&picture)
                .env("PYTHONPATH", &sdk);
            let context = format!("{mode} over {transport}");
            let report = client_report(client, &context);
            assert_eq!(report["version"], version, "{context}");
            assert_eq!(report["before"], json!(["echo"]), "{context}");
            assert_eq!(
                report["after"],
                json!(["checkerboard", "echo"]),
                "{context}"
            );
        }
    }
}

#[test]
fn both_spec_eras_get_an_ask_approved_or_declined_by_their_user_over_stdio_and_http() {
    for (mode, requirement, name, version) in PYTHON_ERAS {
        let sdk = python_sdk(requirement, name);
        for transport in ["stdio", "http"] {
            let served = client_target(transport, true, "ask", &["echo"]);
            let mut client = Command::new("python3");
            client
                .arg(workspace_dir().join("tests/python/ask.py"))
                .args([mode, transport, &served.target])
                .arg(served.dir.path())
                .args(&served.config)
                .env("PYTHONPATH", &sdk);
            let report = client_report(client, &format!("{mode} over {transport}"));
            let context = format!("{mode} over {transport}: {report}");
            assert_eq!(report["version"], version, "{context}");
            assert_eq!(report["asked"].as_array().unwrap().len(), 2, "{context}");
            assert_eq!(report["first"], json!(["approved", false]), "{context}");
            assert_eq!(
                report["second"],
                json!(["the user declined the call of `echo`", true]),
                "{context}"
            );
        }
    }
}

#[test]
fn both_spec_eras_answer_a_tools_question_and_read_its_blocks_over_stdio_and_http() {
    use base64::Engine;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    for (mode, requirement, name, version) in PYTHON_ERAS {
        let sdk = python_sdk(requirement, name);
        for transport in ["stdio", "http"] {
            let served = client_target(transport, false, "tool-asks", &["faults"]);
            let mut client = Command::new("python3");
            client
                .arg(workspace_dir().join("tests/python/tool_asks.py"))
                .args([mode, transport, &served.target])
                .arg(served.dir.path())
                .env("PYTHONPATH", &sdk);
            let report = client_report(client, &format!("{mode} over {transport}"));
            let context = format!("{mode} over {transport}: {report}");
            assert_eq!(report["version"], version, "{context}");
            let asked = report["asked"].as_array().unwrap();
            assert_eq!(asked.len(), 2, "{context}");
            assert_eq!(asked[0]["message"], "Delete 3 files?", "{context}");
            assert_eq!(
                asked[0]["schema"]["properties"]["confirm"]["type"], "boolean",
                "{context}"
            );
            let reply = |which: &str| report[which]["replies"][0].clone();
            assert_eq!(reply("first")["reply"], "accepted", "{context}");
            assert_eq!(
                reply("first")["value"],
                json!({"confirm": true}),
                "{context}"
            );
            assert_eq!(reply("second")["reply"], "declined", "{context}");
            assert_eq!(reply("second")["value"], "the user declined", "{context}");
            assert_eq!(reply("unable")["reply"], "declined", "{context}");
            assert_eq!(
                reply("unable")["value"],
                "this client cannot ask its user (it declared no elicitation)",
                "{context}"
            );
            assert_eq!(
                report["blocks"],
                json!([
                    {"type": "text", "text": "first"},
                    {"type": "audio", "mime": "audio/wav", "data": b64(b"RIFF-not-really")},
                    {"type": "resource", "uri": "file:///notes.txt", "mime": "text/plain", "text": "a note", "blob": null},
                    {"type": "image", "mime": "image/png", "data": b64(&[0x89, b'P', b'N', b'G'])},
                    {"type": "resource", "uri": "file:///data.bin", "mime": "application/octet-stream", "text": null, "blob": b64(&[0, 1, 2, 255])},
                    {"type": "resource_link", "uri": "file:///big.log", "name": "big.log", "description": "the whole log"},
                    {"type": "text", "text": "last"},
                ]),
                "{context}"
            );
        }
    }
}

/// Reads Server-Sent Events of `/events` from `addr` after `after` until `want` events arrived;
/// their seqs and types.
fn read_events(addr: &str, after: impl std::fmt::Display, want: usize) -> Vec<(u64, String)> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nLast-Event-ID: {after}\r\n\r\n"
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buffer = String::new();
    let mut chunk = [0u8; 4096];
    while seen.len() < want {
        let n = stream.read(&mut chunk).expect("events before the timeout");
        assert!(n > 0, "the stream ended after {seen:?}");
        buffer.push_str(&String::from_utf8_lossy(&chunk[..n]));
        seen = buffer
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .map(|e| {
                (
                    e["seq"].as_u64().unwrap(),
                    e["type"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
    }
    seen
}

/// One `tools/call` of echo over a fresh session, read to its end.
fn call_echo(addr: &str, text: &str) {
    call_tool(addr, "echo", json!({ "text": text }));
}

/// One `tools/call` over a fresh session, read to its end: the response as text.
fn call_tool(addr: &str, tool: &str, arguments: Value) -> String {
    call_tool_with(addr, &[], tool, arguments)
}

/// [`call_tool`] with `extra` headers on every request (a token).
fn call_tool_with(addr: &str, extra: &[(&str, &str)], tool: &str, arguments: Value) -> String {
    let mut session = Session::open(addr, extra);
    let (status, text) = session.send("tools/call", json!({"name": tool, "arguments": arguments}));
    assert_eq!(status, 200, "{text}");
    text
}

/// An initialized 2025-11-25 session over raw HTTP.
struct Session<'a> {
    addr: &'a str,
    headers: Vec<(&'a str, String)>,
    next_id: u64,
}

impl<'a> Session<'a> {
    fn open(addr: &'a str, extra: &[(&'a str, &'a str)]) -> Session<'a> {
        let mut headers = vec![
            ("Mcp-Session-Id", open_session(addr, extra)),
            ("Mcp-Protocol-Version", "2025-11-25".to_owned()),
        ];
        headers.extend(
            extra
                .iter()
                .map(|(name, value)| (*name, (*value).to_owned())),
        );
        let session = Session {
            addr,
            headers,
            next_id: 2,
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        post(
            addr,
            &session.header_refs(),
            initialized.to_string().as_bytes(),
        );
        session
    }

    fn header_refs(&self) -> Vec<(&str, &str)> {
        self.headers.iter().map(|(n, v)| (*n, v.as_str())).collect()
    }

    /// One request: the status and the raw response.
    fn send(&mut self, method: &str, params: Value) -> (u16, String) {
        let request =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        self.next_id += 1;
        post(
            self.addr,
            &self.header_refs(),
            request.to_string().as_bytes(),
        )
    }

    /// One request answered 200: its JSON-RPC `result`.
    fn result(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        let (status, text) = self.send(method, params);
        assert_eq!(status, 200, "{text}");
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|m| m["id"] == id)
            .map(|m| m["result"].clone())
            .unwrap_or_else(|| panic!("no answer to {method} in {text}"))
    }
}

#[test]
fn meta_tools_find_and_call_tools_a_stale_list_does_not_show() {
    let dir = plugins(&["echo"]);
    let server = serve_with_config(
        dir.path(),
        "meta",
        "[serve]\nmeta_tools = true\n[[gate]]\ntool = \"sleep\"\naction = \"deny\"\n",
    );
    let mut session = Session::open(&server.addr, &[]);
    let listed = session.result("tools/list", json!({}));
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rho_find_tools", "rho_call_tool", "echo"]);
    // A plugin arrives; this client never rereads the list, and finds it anyway.
    install(dir.path(), "faults");
    let deadline = Instant::now() + Duration::from_secs(10);
    let found = loop {
        let found = session.result(
            "tools/call",
            json!({"name": "rho_find_tools", "arguments": {"query": "SLEEP"}}),
        );
        if found["structuredContent"]["total"] != 0 || Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let tools = found["structuredContent"]["tools"].as_array().unwrap();
    assert_eq!(tools[0]["name"], "sleep", "{found}");
    assert!(
        tools[0]["inputSchema"]["properties"]["ms"].is_object(),
        "{found}"
    );
    assert_eq!(tools[0]["annotations"]["readOnlyHint"], false, "{found}");
    // Calls by name run as direct calls do: the gate on the tool's own name, its end event.
    let echoed = session.result(
        "tools/call",
        json!({"name": "rho_call_tool", "arguments": {"name": "echo", "arguments": {"text": "via meta"}}}),
    );
    assert_eq!(echoed["content"][0]["text"], "via meta", "{echoed}");
    assert_eq!(echoed["_meta"]["rho/outcome"], "ok", "{echoed}");
    let denied = session.result(
        "tools/call",
        json!({"name": "rho_call_tool", "arguments": {"name": "sleep", "arguments": {"ms": 1}}}),
    );
    assert_eq!(denied["isError"], true, "{denied}");
    assert_eq!(denied["_meta"]["rho/outcome"], "blocked", "{denied}");
    // Bad arguments: an error the model reads, nothing run.
    for (arguments, says) in [
        (json!({}), "`name` (a string) is required"),
        (json!({"name": "rho_call_tool"}), "is a meta-tool"),
        (
            json!({"name": "echo", "arguments": [1]}),
            "must be an object",
        ),
        (
            json!({"name": "echo", "args": {}}),
            "unknown argument `args`",
        ),
    ] {
        let refused = session.result(
            "tools/call",
            json!({"name": "rho_call_tool", "arguments": arguments}),
        );
        assert_eq!(
            refused["_meta"]["rho/outcome"], "invalid_arguments",
            "{refused}"
        );
        assert!(
            refused["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains(says),
            "{refused}"
        );
    }
    let journal = std::fs::read_to_string(dir.path().join("../http-meta.jsonl")).unwrap();
    let ends: Vec<Value> = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_execution_end")
        .collect();
    let tools: Vec<&str> = ends.iter().map(|e| e["tool"].as_str().unwrap()).collect();
    assert_eq!(
        tools,
        ["echo", "sleep"],
        "one end event per call, named by its tool"
    );
}

#[test]
fn events_stream_resumes_after_a_reconnect_with_every_event_once() {
    let dir = plugins(&["echo"]);
    let journal = dir.path().join("../http-events.jsonl");
    let _ = std::fs::remove_file(&journal);
    let server = HttpServer::start(dir.path(), &["--http", "127.0.0.1:0"], &journal);
    // From the start of the run: the plugin's load.
    let first = read_events(&server.addr, 0, 1);
    assert_eq!(first[0], (1, "plugin_loaded".to_owned()));
    // Calls while nobody listens, then a reconnect from seq 1: each missed event once, in order.
    call_echo(&server.addr, "one");
    call_echo(&server.addr, "two");
    // Each call: start, running, end.
    let missed = read_events(&server.addr, 1, 6);
    let seqs: Vec<u64> = missed.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (2..=7).collect::<Vec<u64>>(), "{missed:?}");
    let ends = missed
        .iter()
        .filter(|(_, kind)| kind == "tool_execution_end")
        .count();
    assert_eq!(ends, 2, "{missed:?}");
    // Ids are RUN-SEQ; an id of another run (the server restarted since) gets this run from its
    // start, however far that run has gone.
    let all = read_events(&server.addr, "1-5", 7);
    let seqs: Vec<u64> = all.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (1..=7).collect::<Vec<u64>>(), "{all:?}");
}

/// A raw `GET /events` after `after` that reads nothing yet: a client that has stalled.
fn open_events(addr: &str, after: u64) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nLast-Event-ID: {after}\r\n\r\n"
    )
    .unwrap();
    stream
}

/// Reads `stream` until the event with id `RUN-last`: the seqs of the ids it saw, in order.
fn event_ids_until(mut stream: TcpStream, last: u64) -> Vec<u64> {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut ids = Vec::new();
    let mut pending = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    while ids.last() != Some(&last) {
        let n = stream.read(&mut chunk).expect("events before the timeout");
        assert!(n > 0, "the stream ended after {:?}", ids.last());
        pending.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = &pending[start..start + end];
            if let Some(id) = line.strip_prefix(b"id: ") {
                let id = String::from_utf8_lossy(id);
                ids.push(id.rsplit('-').next().unwrap().trim().parse().unwrap());
            }
            start += end + 1;
        }
        pending.drain(..start);
    }
    ids
}

#[test]
fn stalled_event_streams_hold_a_bounded_queue_and_miss_nothing() {
    const STREAMS: usize = 16;
    const CALLS: usize = 40;
    let dir = plugins(&["echo"]);
    let journal = dir.path().join("../http-stalled.jsonl");
    let _ = std::fs::remove_file(&journal);
    let server = HttpServer::start(dir.path(), &["--http", "127.0.0.1:0"], &journal);
    // The plugin's load, then streams that read nothing while ~40 MiB of events go by.
    let _ = read_events(&server.addr, 0, 1);
    let stalled: Vec<TcpStream> = (0..STREAMS).map(|_| open_events(&server.addr, 1)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let before = server.resident_bytes();
    let text = "x".repeat(512 << 10);
    for _ in 0..CALLS {
        call_echo(&server.addr, &text);
    }
    let grown = server.resident_bytes().saturating_sub(before);
    eprintln!(
        "grew by {} MiB with {STREAMS} stalled event streams",
        grown >> 20
    );
    // The events themselves (the bus keeps its last 4,096) are ~40 MiB, once; each stalled
    // stream may queue 1 MiB more. Queued whole, 16 streams would hold ~640 MiB less what the
    // kernel's socket buffers took.
    assert!(
        grown < 200 << 20,
        "the server grew by {} MiB with {STREAMS} stalled event streams",
        grown >> 20
    );
    // Read now: every event once, in order, caught up from the journal where the stream lagged.
    let last = read_events(&server.addr, 1, 1)
        .last()
        .map(|(seq, _)| *seq)
        .unwrap();
    let last = last.max(std::fs::read_to_string(&journal).unwrap().lines().count() as u64);
    let readers: Vec<_> = stalled
        .into_iter()
        .map(|stream| std::thread::spawn(move || event_ids_until(stream, last)))
        .collect();
    for reader in readers {
        let ids = reader.join().unwrap();
        assert_eq!(ids, (2..=last).collect::<Vec<u64>>());
    }
}

/// Over HTTP as over stdio, every message the server cannot take is answered with the request's
/// id when it can be read (before: rmcp answered without an id, or an HTTP error only), and a
/// lone surrogate is read leniently.
#[test]
fn malformed_messages_over_http_are_answered_with_their_id() {
    let dir = plugins(&["echo"]);
    let server = serve_with_config(dir.path(), "malformed", "");
    let session = Session::open(&server.addr, &[]);
    let headers = session.header_refs();
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":93,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":{}{}}}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{}"}}}}}}"#,
        "x".repeat(17 << 20)
    );
    for (body, status, code, id) in [
        ("{}".to_owned(), 400, -32600, Value::Null),
        (deep, 400, -32600, json!(93)),
        (huge, 413, -32600, json!(7)),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","#.to_owned(),
            400,
            -32700,
            json!(5),
        ),
    ] {
        let (got, response) = post(&server.addr, &headers, body.as_bytes());
        assert_eq!(got, status, "{body:.60}: {response:.300}");
        let message = rpc_of(&response);
        assert_eq!(message["error"]["code"], code, "{body:.60}: {message}");
        assert_eq!(message["id"], id, "{body:.60}: {message}");
    }
    let surrogate = r#"{"jsonrpc":"2.0","id":88,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\ud800b"}}}"#;
    let (got, response) = post(&server.addr, &headers, surrogate.as_bytes());
    assert_eq!(got, 200, "{response}");
    let message = rpc_of(&response);
    assert_eq!(message["id"], 88);
    assert_eq!(
        message["result"]["content"][0]["text"], "a\u{fffd}b",
        "{message}"
    );
}

/// A session's standing event stream (`GET /mcp`), held open: the session has a request in flight.
fn standing_stream(addr: &str, session: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
    stream
}

/// Sessions are bounded, and a newcomer makes room by closing the session idle longest (before:
/// 256 `initialize`s of one client took every session for rmcp's 5 minutes and the next client
/// got 503); 503 only when every session has a request in flight; an idle session closes after
/// `session_idle_ms`; closing one makes room.
#[test]
fn mcp_sessions_make_room_for_newcomers_and_close_when_idle() {
    let dir = plugins(&["echo"]);
    let server = serve_with_config(
        dir.path(),
        "sessions",
        "[serve]\nmax_sessions = 2\nsession_idle_ms = 1500\n",
    );
    let addr = server.addr.as_str();
    let list = |session: &str| {
        let request = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}).to_string();
        post(
            addr,
            &[
                ("Mcp-Session-Id", session),
                ("Mcp-Protocol-Version", "2025-11-25"),
            ],
            request.as_bytes(),
        )
        .0
    };
    let a = open_session(addr, &[]);
    let b = open_session(addr, &[]);
    assert_eq!(list(&b), 200);
    // A third: `a`, idle longest, is closed for it.
    let c = open_session(addr, &[]);
    assert_eq!(list(&a), 404, "the evicted session still serves");
    assert_eq!(list(&b), 200);
    // Both busy (a standing stream each): the next is refused, with a time to retry.
    let held = [standing_stream(addr, &b), standing_stream(addr, &c)];
    let (status, head) = post(addr, &[], &initialize());
    assert_eq!(status, 503, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 5"),
        "{head}"
    );
    drop(held);
    // Idle past `session_idle_ms`, both close; two newcomers get in.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(list(&b), 404, "an idle session is still open");
    let d = open_session(addr, &[]);
    open_session(addr, &[]);
    // A session's own requests go through, and closing it makes room.
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nMcp-Session-Id: {d}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(response.starts_with("HTTP/1.1 2"), "{response}");
    open_session(addr, &[]);
}

/// Raises this process's open-file limit to its hard limit (a flood needs thousands).
fn many_descriptors() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max.min(1 << 16);
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}

/// A connection to `server` from the local address `from`; `None` when refused or out of
/// descriptors.
fn connect_from(from: &str, server: &str) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    let local: std::net::SocketAddr = format!("{from}:0").parse().ok()?;
    socket.bind(&local.into()).ok()?;
    let remote: std::net::SocketAddr = server.parse().ok()?;
    socket
        .connect_timeout(&remote.into(), Duration::from_secs(2))
        .ok()?;
    Some(socket.into())
}

/// 2,000 idle and 1,000 dripping connections, reopened as they close, while a real client opens
/// a session and calls a tool: it is answered well before the 5 s head deadline (before: 6.3 s
/// to over 20 s), whether the flood comes from another address (the per-peer cap keeps it to
/// its share) or from the client's own (a newcomer evicts the flood's connection waiting
/// longest).
#[test]
fn a_connection_flood_locks_no_one_out() {
    many_descriptors();
    let dir = plugins(&["echo"]);
    let server = serve_with_config(dir.path(), "flood", "");
    for from in ["127.0.0.2", "127.0.0.1"] {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flood = {
            let (stop, addr, from) = (stop.clone(), server.addr.clone(), from.to_owned());
            std::thread::spawn(move || {
                let open = |n: usize| -> Vec<Option<TcpStream>> {
                    (0..n).map(|_| connect_from(&from, &addr)).collect()
                };
                let (mut idle, mut slow) = (open(2000), open(1000));
                let mut round = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    round += 1;
                    for (i, conn) in slow.iter_mut().enumerate() {
                        let line = if round == 1 {
                            format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n")
                        } else {
                            format!("X-Drip-{round}: {i}\r\n")
                        };
                        let alive = conn
                            .as_mut()
                            .is_some_and(|c| c.write_all(line.as_bytes()).is_ok());
                        if !alive {
                            *conn = connect_from(&from, &addr);
                        }
                    }
                    for conn in idle.iter_mut() {
                        // Closed by the server: reopened.
                        let mut byte = [0u8; 1];
                        let closed = conn.as_mut().is_none_or(|c| {
                            c.set_nonblocking(true).ok();
                            matches!(std::io::Read::read(c, &mut byte), Ok(0))
                        });
                        if closed {
                            *conn = connect_from(&from, &addr);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            })
        };
        // Let the flood build up.
        std::thread::sleep(Duration::from_secs(3));
        let started = Instant::now();
        let text = call_tool(&server.addr, "echo", json!({"text": "through"}));
        let took = started.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flood.join().unwrap();
        assert!(text.contains("through"), "{text}");
        assert!(
            took < Duration::from_secs(5),
            "a flood from {from}: the call took {took:?}"
        );
    }
}

/// Runs a flood of `count` connections from 127.0.0.1 to `addr` on a runtime of its own until
/// `stop`: each connection reopened the moment the server closes it (an attacker's loop, not a
/// round every half second); `drip`: each sends one header line a second, never a whole head,
/// else each sends nothing.
fn reopening_flood(
    addr: &str,
    count: usize,
    drip: bool,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let addr = addr.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut tasks = Vec::new();
            for i in 0..count {
                let (addr, stop) = (addr.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let Ok(mut conn) = tokio::net::TcpStream::connect(&addr).await else {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        };
                        if drip {
                            let head = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n");
                            let mut line = 0u64;
                            let mut alive = conn.write_all(head.as_bytes()).await.is_ok();
                            while alive && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                                let mut byte = [0u8; 1];
                                tokio::select! {
                                    read = conn.read(&mut byte) => alive = matches!(read, Ok(n) if n > 0),
                                    () = tokio::time::sleep(Duration::from_secs(1)) => {
                                        line += 1;
                                        let drop = format!("X-Drip-{line}: {i}\r\n");
                                        alive = conn.write_all(drop.as_bytes()).await.is_ok();
                                    }
                                }
                            }
                        } else {
                            // Held until the server closes it (or the flood stops).
                            let mut byte = [0u8; 1];
                            loop {
                                tokio::select! {
                                    _ = conn.read(&mut byte) => break,
                                    () = tokio::time::sleep(Duration::from_millis(200)) => {
                                        if stop.load(std::sync::atomic::Ordering::Relaxed) {
                                            break;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }));
            }
            for task in tasks {
                let _ = task.await;
            }
        });
    })
}

/// One try of a fresh client: `GET /` with `Connection: close`, 2 s to connect and 2 s to its
/// first line; whether it was answered.
fn fresh_client_answered(addr: &str) -> bool {
    let Some(mut conn) = connect_from("127.0.0.1", addr) else {
        return false;
    };
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if conn.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut first = [0u8; 12];
    matches!(std::io::Read::read(&mut conn, &mut first), Ok(n) if n >= 12 && first.starts_with(b"HTTP/1.1 200"))
}

/// A flood from the client's own address whose connections come back the moment they are
/// closed (1,100 dripping a header line a second, or 2,000 idle), started 4 s before: a fresh
/// client with a whole request is answered within the head deadline, every few tries (before:
/// not one of 40 tries in 20 s; each was accepted and closed without a byte, the newest
/// connection of a full share).
#[test]
fn a_fresh_client_wins_over_a_flood_that_reopens_at_once() {
    many_descriptors();
    let dir = plugins(&["echo"]);
    let server = serve_with_config(dir.path(), "reopening-flood", "[serve]\nweb = true\n");
    for (count, drip) in [(1100, true), (2000, false)] {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flood = reopening_flood(&server.addr, count, drip, stop.clone());
        std::thread::sleep(Duration::from_secs(4));
        let started = Instant::now();
        let (mut tries, mut answered, mut first) = (0, 0, None);
        while started.elapsed() < Duration::from_secs(10) {
            tries += 1;
            if fresh_client_answered(&server.addr) {
                answered += 1;
                first.get_or_insert(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flood.join().unwrap();
        let what = if drip { "dripping" } else { "idle" };
        assert!(
            first.is_some_and(|at| at < Duration::from_secs(5)),
            "{count} {what}: first answer at {first:?}, {answered} of {tries} answered"
        );
        assert!(
            answered * 2 >= tries,
            "{count} {what}: {answered} of {tries} answered"
        );
    }
}

#[test]
fn rho_watch_attach_follows_a_server_over_http_across_a_restart() {
    let dir = plugins(&["echo"]);
    let journal = dir.path().join("../http-watch.jsonl");
    let _ = std::fs::remove_file(&journal);
    // A port of our own, so the restarted server comes back where the watch looks.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let server = HttpServer::start(dir.path(), &["--http", &addr], &journal);
    let mut watch = Command::new(rho_bin())
        .args(["watch", "--plain", "--attach"])
        .arg(format!("http://{addr}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, seen) = std::sync::mpsc::channel::<String>();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let wait_for = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match seen.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!("no line with {needle:?}"),
            }
        }
    };
    wait_for("plugin echo@0.1.0");
    call_echo(&addr, "before the restart");
    wait_for("ok echo");
    drop(server);
    let server = HttpServer::start(dir.path(), &["--http", &addr], &journal);
    // The new run from its start, then its calls.
    wait_for("plugin echo@0.1.0");
    call_echo(&addr, "after the restart");
    let line = wait_for("ok echo");
    assert!(line.contains("after the restart"), "{line}");
    drop(server);
    let _ = watch.kill();
    let _ = watch.wait();
}

/// A headless Chromium driven over WebDriver (chromedriver), installed from Debian's packages
/// when missing; quit when dropped.
struct Browser {
    driver: std::process::Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

fn installed(names: &[&str]) -> bool {
    names.iter().all(|name| {
        Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

impl Browser {
    fn start() -> Browser {
        if !installed(&["chromium", "chromedriver"]) {
            let status = Command::new("apt-get")
                .args(["install", "-y", "-q", "chromium", "chromium-driver"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .expect("run apt-get");
            assert!(status.success(), "apt-get install chromium chromium-driver");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while webdriver(port, "GET", "/status", None)["value"]["ready"] != true {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let created = webdriver(
            port,
            "POST",
            "/session",
            Some(
                json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
                "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1200,900",
                    format!("--user-data-dir={}", profile.path().display())]}}}}),
            ),
        );
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {created}"))
            .to_owned();
        Browser {
            driver,
            port,
            session,
            _profile: profile,
        }
    }

    fn open(&self, url: &str) {
        let path = format!("/session/{}/url", self.session);
        webdriver(self.port, "POST", &path, Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body) in the page; its return value.
    fn run(&self, script: &str) -> Value {
        let path = format!("/session/{}/execute/sync", self.session);
        let out = webdriver(
            self.port,
            "POST",
            &path,
            Some(json!({"script": script, "args": []})),
        );
        out["value"].clone()
    }

    /// Polls `script` until it returns `true`, for at most `within`; how long it took.
    fn until(&self, script: &str, within: Duration) -> Duration {
        let started = Instant::now();
        while self.run(script) != true {
            assert!(
                started.elapsed() < within,
                "not within {within:?}: {script}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        started.elapsed()
    }

    fn screenshot(&self, to: &Path) {
        use base64::Engine;
        let path = format!("/session/{}/screenshot", self.session);
        let png = webdriver(self.port, "GET", &path, None)["value"]
            .as_str()
            .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap())
            .unwrap();
        std::fs::write(to, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let path = format!("/session/{}", self.session);
        webdriver(self.port, "DELETE", &path, None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// One WebDriver command: its JSON answer (`null` when the driver does not answer yet).
fn webdriver(port: u16, method: &str, path: &str, body: Option<Value>) -> Value {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return Value::Null;
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let _ = write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // The answer's head, then exactly its Content-Length (chromedriver keeps the connection).
    let mut reader = std::io::BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) == 0 {
            return Value::Null;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return Value::Null;
    }
    serde_json::from_slice(&body).unwrap_or(Value::Null)
}

#[test]
fn the_live_page_shows_calls_images_and_quarantines_and_every_event_once_after_a_reconnect() {
    let dir = plugins(&["picture", "faults"]);
    let journal = dir.path().join("../http-web.jsonl");
    let _ = std::fs::remove_file(&journal);
    let token = "a-token-for-the-page-0123456789";
    let token_file = dir.path().join("../http-web-token");
    std::fs::write(&token_file, token).unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    // An MCP server beside the plugins: the page shows it as a source, serving.
    let sdk = rho_tests::python_sdk("mcp>=1.9,<2", "mcp1");
    let scripts = workspace_dir().join("tests/python");
    let mcp = format!(
        "env PYTHONPATH={} python3 {}",
        sdk.display(),
        scripts.join("mcp_server.py").display()
    );
    let server = HttpServer::start(
        dir.path(),
        &[
            "--http",
            "127.0.0.1:0",
            "--web",
            "--token-file",
            token_file.to_str().unwrap(),
            "--mcp",
            &mcp,
            "--grant-read",
            sdk.to_str().unwrap(),
            "--grant-read",
            scripts.to_str().unwrap(),
        ],
        &journal,
    );
    let bearer = format!("Bearer {token}");
    let call = |tool: &str, args: Value| {
        call_tool_with(&server.addr, &[("Authorization", &bearer)], tool, args)
    };
    // The page needs the token too.
    assert_eq!(status_of(&server.addr, "/", &[("Host", &server.addr)]), 401);
    let browser = Browser::start();
    browser.open(&format!("http://{}/?token={token}", server.addr));
    browser.until(
        "return document.getElementById('state').textContent === 'live';",
        Duration::from_secs(10),
    );
    browser.until(
        "const row = document.querySelector('#sources tr[data-source=\"mcp:mcp_server\"]');
         return !!row && row.dataset.state === 'serving' && row.textContent.includes('mcp stdio');",
        Duration::from_secs(10),
    );
    // A call with an image: in the page within a second of its end, its image loaded.
    call("checkerboard", json!({"size": 32}));
    let shown = browser.until(
        "const item = document.querySelector('#calls li[data-outcome=ok]');
         const img = item && item.querySelector('img');
         return !!(img && img.complete && img.naturalWidth === 32);",
        Duration::from_secs(5),
    );
    assert!(shown < Duration::from_secs(1), "shown after {shown:?}");
    // Crashes until the tool is quarantined: the page says so.
    for _ in 0..3 {
        call("panic", json!({"message": "boom"}));
    }
    browser.until(
        "return [...document.querySelectorAll('#changes li')].some(li => li.textContent.includes('quarantined panic'));",
        Duration::from_secs(5),
    );
    // A forced reconnect, then more calls: every call shown exactly once.
    browser.run("window.rho.reconnect(); return true;");
    call("checkerboard", json!({"size": 8}));
    call("echo_missing", json!({}));
    browser.until(
        "return document.querySelectorAll('#calls li').length >= 6;",
        Duration::from_secs(5),
    );
    std::thread::sleep(Duration::from_millis(300));
    let calls = browser
        .run("return [...document.querySelectorAll('#calls li')].map(li => li.dataset.call);");
    let calls: Vec<String> = serde_json::from_value(calls).unwrap();
    let unique: std::collections::HashSet<&String> = calls.iter().collect();
    assert_eq!(calls.len(), 6, "{calls:?}");
    assert_eq!(unique.len(), calls.len(), "a call shown twice: {calls:?}");
    let health = browser.run(
        "return [...document.querySelectorAll('#health tr[data-tool]')].map(tr => tr.dataset.tool).sort();",
    );
    assert_eq!(health, json!(["checkerboard", "echo_missing", "panic"]));
    let shot = rho_tests::profile_dir().join("rho-web-page.png");
    browser.screenshot(&shot);
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000);
}

#[test]
fn the_typescript_sdk_in_both_eras_sees_a_reload_and_gets_an_ask_answered_over_stdio_and_http() {
    let project = rho_tests::npm_project("typescript");
    let script = workspace_dir().join("tests/typescript/client.mjs");
    // Resolved from the installed project's node_modules.
    let installed_script = project.join("client.mjs");
    std::fs::copy(&script, &installed_script).unwrap();
    let picture = rho_tests::plugin_lib("picture");
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        for transport in ["stdio", "http"] {
            let served = client_target(transport, true, "ts", &["echo"]);
            let mut client = Command::new("node");
            client
                .arg(&installed_script)
                .args([mode, transport, &served.target])
                .arg(served.dir.path())
                .arg(&picture)
                .args(&served.config);
            let report = client_report(client, &format!("{mode} over {transport}"));
            let context = format!("{mode} over {transport}: {report}");
            assert_eq!(report["version"], version, "{context}");
            assert_eq!(
                report["after"],
                json!(["checkerboard", "echo"]),
                "{context}"
            );
            assert_eq!(report["first"], json!(["approved", false]), "{context}");
            assert_eq!(
                report["second"],
                json!(["the user declined the call of `echo`", true]),
                "{context}"
            );
        }
    }
}

/// The status of a GET of `path` with `headers` (the `Host` header among them), read from the
/// response head only (a stream goes on).
fn status_of(addr: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).unwrap_or(0);
    String::from_utf8_lossy(&head[..n])
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_page_that_rebinds_a_name_of_its_own_to_a_local_server_reads_nothing() {
    let dir = plugins(&["echo"]);
    let journal = dir.path().join("../http-rebind.jsonl");
    let server = HttpServer::start(dir.path(), &["--http", "127.0.0.1:0", "--web"], &journal);
    let port = server.addr.rsplit(':').next().unwrap().to_owned();
    let own = format!("127.0.0.1:{port}");
    let rebound = format!("rebind.evil.example:{port}");
    let foreign = format!("http://{rebound}");
    for path in ["/events?after=0", "/", "/images/00", "/mcp"] {
        // The name a rebinding page uses: refused on every route, not only /mcp.
        assert_eq!(
            status_of(&server.addr, path, &[("Host", &rebound)]),
            403,
            "{path}"
        );
        // A page of another origin, whatever the name.
        assert_eq!(
            status_of(&server.addr, path, &[("Host", &own), ("Origin", &foreign)]),
            403,
            "{path}"
        );
    }
    // The server's own names and its loopback origins pass.
    assert_eq!(status_of(&server.addr, "/events", &[("Host", &own)]), 200);
    let local_page = format!("http://localhost:{port}");
    let headers = [("Host", own.as_str()), ("Origin", local_page.as_str())];
    assert_eq!(status_of(&server.addr, "/", &headers), 200);
}

#[test]
fn a_connection_that_sends_no_request_head_is_closed() {
    let dir = plugins(&["echo"]);
    let journal = dir.path().join("../http-idle.jsonl");
    let server = HttpServer::start(dir.path(), &["--http", "127.0.0.1:0"], &journal);
    let started = Instant::now();
    let mut idle = TcpStream::connect(&server.addr).unwrap();
    let mut partial = TcpStream::connect(&server.addr).unwrap();
    partial
        .write_all(b"GET /events HTTP/1.1\r\nHost: 127")
        .unwrap();
    for stream in [&mut idle, &mut partial] {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut rest = Vec::new();
        // Closed by the server (its head timeout is 10 s), not by our 30 s read timeout.
        let read = stream.read_to_end(&mut rest);
        assert!(read.is_ok(), "{read:?}");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(25), "closed after {took:?}");
    // And the server still serves.
    assert_eq!(
        status_of(&server.addr, "/events", &[("Host", &server.addr)]),
        200
    );
}
