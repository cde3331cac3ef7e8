//! [3/11] Know who calls. `rho serve --http` tells its callers apart, and every call says who it
//! was for (journal, OpenTelemetry):
//! - named static tokens (`rho token add`): two tokens, two principals; a removed token refused
//!   from the next request on; an MCP session is its opener's;
//! - an OAuth 2.1 resource server in front of a real OpenID provider (npm `oidc-provider`,
//!   `tests/oidc`): the official MCP Python SDK's client-credentials client starts with no token,
//!   follows rho's 401 to the RFC 9728 metadata, the issuer's metadata and a token for rho's URL,
//!   steps up to a tool's scope on a 403, and its calls carry its principal; every token that
//!   must not be taken (none, malformed, expired, for another audience or issuer, signed by an
//!   unknown key, `alg: none`, HS256 keyed with the public key) is a 401 with a challenge while
//!   the server keeps serving; a rotated key is taken after one fetch of the key set, and a
//!   thousand made-up key ids cost a bounded number of fetches.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rho_tests::{
    HttpServer, OidcProvider, OtlpReceiver, attribute, install, post, python_sdk, rho_bin,
    rho_run as rho, rpc_of,
};
use serde_json::{Value, json};

/// A 2026-07-28 `tools/call` of `tool` to `addr`, with `Authorization: Bearer TOKEN` when given:
/// the status and the whole response.
fn call_as(addr: &str, token: Option<&str>, tool: &str, arguments: Value) -> (u16, String) {
    let params = json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
    ];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    post(addr, &headers, body.to_string().as_bytes())
}

/// The text of a call's answer.
fn answer_text(response: &str) -> String {
    rpc_of(response)["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text answer: {response:.600}"))
        .to_owned()
}

/// A response header's value (the first of that name), if there is one.
fn header<'a>(response: &'a str, name: &str) -> Option<&'a str> {
    let head = response.split("\r\n\r\n").next()?;
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// The journal's events.
fn journal(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The principals of the journal's `tool_execution_end` events of `tool`, in order, as
/// `(id, auth)`.
fn principals_of(events: &[Value], tool: &str) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_execution_end" && e["tool"] == tool)
        .map(|e| {
            (
                e["principal"]["id"].as_str().unwrap_or("-").to_owned(),
                e["principal"]["auth"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect()
}

#[test]
fn named_tokens_are_principals_and_a_removed_one_is_refused_from_the_next_request() {
    let plugins = tempfile::tempdir().unwrap();
    install(plugins.path(), "echo");
    let state = tempfile::tempdir().unwrap();
    let tokens = state.path().join("tokens.toml");
    let file = tokens.to_str().unwrap();
    let (code, ci, said) = rho(&[
        "token",
        "add",
        "ci",
        "--scope",
        "tools:call",
        "--tokens-file",
        file,
    ]);
    assert_eq!(code, 0, "{said}");
    let ci = ci.trim().to_owned();
    let (_, alice, _) = rho(&["token", "add", "alice", "--tokens-file", file]);
    let alice = alice.trim().to_owned();
    // The file holds digests, owner-only; a name is taken once.
    let held = std::fs::read_to_string(&tokens).unwrap();
    assert!(!held.contains(&ci) && !held.contains(&alice), "{held}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (code, _, said) = rho(&["token", "add", "alice", "--tokens-file", file]);
    assert_eq!(code, 1);
    assert!(said.contains("exists"), "{said}");
    let (_, listed, _) = rho(&["token", "list", "--tokens-file", file]);
    assert_eq!(listed, "ci  tools:call\nalice  (no scopes)\n");

    let journal_path = state.path().join("journal.jsonl");
    let server = HttpServer::start(
        plugins.path(),
        &["--http", "127.0.0.1:0", "--tokens-file", file],
        &journal_path,
    );
    let addr = server.addr.as_str();
    for (token, text) in [(&ci, "from ci"), (&alice, "from alice")] {
        let (status, response) = call_as(addr, Some(token), "echo", json!({"text": text}));
        assert_eq!((status, answer_text(&response)), (200, text.to_owned()));
    }
    let (status, _) = call_as(addr, None, "echo", json!({"text": "nobody"}));
    assert_eq!(status, 401);

    // Removed: refused from the next request on; the other one still serves.
    let (code, _, said) = rho(&["token", "remove", "alice", "--tokens-file", file]);
    assert_eq!(code, 0, "{said}");
    let (status, response) = call_as(addr, Some(&alice), "echo", json!({"text": "again"}));
    assert_eq!(status, 401, "{response}");
    let (status, response) = call_as(addr, Some(&ci), "echo", json!({"text": "still"}));
    assert_eq!((status, answer_text(&response)), (200, "still".to_owned()));

    // A 2025-era session is its opener's: another principal naming it is answered as if it
    // were unknown.
    let (_, bob, _) = rho(&["token", "add", "bob", "--tokens-file", file]);
    let bob = bob.trim().to_owned();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "rho-tests", "version": "1"}}});
    let ci_bearer = format!("Bearer {ci}");
    let (status, opened) = post(
        addr,
        &[("Authorization", &ci_bearer)],
        init.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{opened}");
    let session = header(&opened, "mcp-session-id").unwrap().to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let bob_bearer = format!("Bearer {bob}");
    let (status, response) = post(
        addr,
        &[
            ("Authorization", &bob_bearer),
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        list.to_string().as_bytes(),
    );
    assert_eq!(status, 404, "{response}");
    let (status, response) = post(
        addr,
        &[
            ("Authorization", &ci_bearer),
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        list.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{response}");
    drop(server);

    let events = journal(&journal_path);
    assert_eq!(
        principals_of(&events, "echo"),
        [
            ("ci".into(), "static_token".into()),
            ("alice".into(), "static_token".into()),
            ("ci".into(), "static_token".into()),
        ]
    );
    let ci_end = events
        .iter()
        .find(|e| e["type"] == "tool_execution_end")
        .unwrap();
    assert_eq!(ci_end["principal"]["scopes"], json!(["tools:call"]));
    let refusals: Vec<(u64, &str)> = events
        .iter()
        .filter(|e| e["type"] == "access_refused")
        .map(|e| (e["status"].as_u64().unwrap(), e["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        refusals,
        [
            (401, "no token"),
            (401, "unknown token"),
            (404, "an MCP session another principal opened"),
        ]
    );
    // No token ever reaches the journal.
    let text = std::fs::read_to_string(&journal_path).unwrap();
    for token in [&ci, &alice, &bob] {
        assert!(!text.contains(token.as_str()), "a token in the journal");
    }
}

/// `rho serve --http` over `plugins` behind `provider` (`[serve.oauth]`, every token needing
/// `tools:call`; the key set fetched again at most once a second).
fn oauth_server(plugins: &Path, state: &Path, provider: &OidcProvider) -> HttpServer {
    let config = format!(
        "[serve.oauth]\nissuers = [\"{}\"]\nscopes = [\"tools:call\"]\njwks_refetch_ms = 1000\n",
        provider.issuer()
    );
    let path = state.join("rho.toml");
    std::fs::write(&path, config).unwrap();
    HttpServer::start(
        plugins,
        &["--http", "127.0.0.1:0", "--config", path.to_str().unwrap()],
        &state.join("journal.jsonl"),
    )
}

/// The README's worked example of `[serve.oauth]`: its `rho.toml` and its `rho serve` line.
fn readme_oauth_example() -> (String, String) {
    let readme = std::fs::read_to_string(rho_tests::workspace_dir().join("README.md")).unwrap();
    let section = readme
        .split("### Know who calls")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    let after_toml = section.split("```toml\n").nth(1).unwrap();
    let toml = after_toml.split("```").next().unwrap().to_owned();
    let serve = after_toml
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    (toml, serve)
}

/// A command run by `sh` in a process group of its own, stopped (the whole group) when dropped.
struct Shell(std::process::Child);

impl Drop for Shell {
    fn drop(&mut self) {
        // SAFETY: signals our own child's process group.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

#[test]
fn the_readme_example_behind_a_real_issuer_serves_the_python_sdk_and_names_who_called() {
    let provider = OidcProvider::start();
    let receiver = OtlpReceiver::start();
    let plugins = tempfile::tempdir().unwrap();
    install(plugins.path(), "echo");
    install(plugins.path(), "picture");
    let home = tempfile::tempdir().unwrap();
    let port = rho_tests::free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    // The README's configuration and command as a user types them, the example's names
    // replaced by this machine's (and an OTLP endpoint added).
    let (toml, serve) = readme_oauth_example();
    let config = toml
        .replace("https://id.example.com", &provider.issuer())
        .replace("https://rho.example.com/mcp", &url)
        + &format!(
            "\n[otel]\nendpoint = \"http://127.0.0.1:{}\"\n",
            receiver.http
        );
    std::fs::write(home.path().join("rho.toml"), config).unwrap();
    let line = serve
        .replacen("rho ", &format!("{} ", rho_bin().display()), 1)
        .replace("0.0.0.0:8750", &format!("127.0.0.1:{port}"))
        .replace("/path/to/plugins", plugins.path().to_str().unwrap());
    let mut child = {
        use std::os::unix::process::CommandExt;
        Command::new("sh")
            .args(["-c", &line])
            .current_dir(home.path())
            .env("HOME", home.path())
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_RUNTIME_DIR")
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut said = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    let _server = Shell(child);
    let mut journal_path = None;
    let mut oauth_line = String::new();
    for line in said.by_ref() {
        let line = line.unwrap();
        if let Some(path) = line.strip_prefix("rho: journal ") {
            journal_path = Some(path.split(" (").next().unwrap().to_owned());
        }
        if line.starts_with("rho: OAuth 2.1") {
            oauth_line = line;
            break;
        }
    }
    std::thread::spawn(move || for _ in said {});
    assert_eq!(
        oauth_line,
        format!(
            "rho: OAuth 2.1: access tokens of {} for {url} (metadata: \
             http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp)",
            provider.issuer()
        )
    );
    let journal_path = std::path::PathBuf::from(journal_path.unwrap());

    let sdk = python_sdk("mcp>=1.9,<2", "mcp1");
    let client = |client: &str, tools: &[&str]| {
        let mut command = Command::new("python3");
        command
            .arg(rho_tests::workspace_dir().join("tests/python/oauth_client.py"))
            .args([&url, &provider.issuer(), client])
            .arg(format!("{client}-secret"))
            .arg("tools:call")
            .args(tools)
            .env("PYTHONPATH", &sdk);
        rho_tests::client_report(command, client)
    };
    // rho-admin may step up to tools:admin when checkerboard asks for it.
    let report = client("rho-admin", &["echo", "checkerboard"]);
    assert_eq!(report["tools"], json!(["checkerboard", "echo"]));
    assert_eq!(report["calls"]["echo"], "over oauth");
    assert!(
        report["calls"]["checkerboard"]
            .as_str()
            .unwrap()
            .contains("checkerboard"),
        "{report}"
    );
    let requests: Vec<&str> = report["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(
        requests[..4],
        [
            "POST /mcp",
            "GET /.well-known/oauth-protected-resource/mcp",
            "GET /.well-known/oauth-authorization-server",
            "POST /token",
        ],
        "{requests:?}"
    );
    assert_eq!(
        requests.iter().filter(|r| **r == "POST /token").count(),
        2,
        "one token, then one stepped up: {requests:?}"
    );

    let events = journal(&journal_path);
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    for end in &ends {
        let principal = &end["principal"];
        assert_eq!(
            (&principal["id"], &principal["auth"], &principal["issuer"]),
            (
                &json!("rho-admin"),
                &json!("oauth"),
                &json!(provider.issuer())
            )
        );
        assert_eq!(principal["claims"]["client_id"], "rho-admin");
    }
    assert_eq!(
        ends[1]["principal"]["scopes"],
        json!(["tools:call", "tools:admin"])
    );
    let refused: Vec<(u64, &str)> = events
        .iter()
        .filter(|e| e["type"] == "access_refused")
        .map(|e| (e["status"].as_u64().unwrap(), e["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        refused,
        [
            (401, "no token"),
            (403, "insufficient scope (needs tools:call tools:admin)")
        ]
    );
    // The call's span and its request's span name who asked.
    receiver.wait_for("the spans of echo", |r| {
        let spans = r.spans();
        ["execute_tool echo", "tools/call echo"]
            .iter()
            .all(|name| spans.iter().any(|s| s["name"] == *name))
    });
    let spans = receiver.spans();
    for name in ["execute_tool echo", "tools/call echo"] {
        let span = spans.iter().find(|s| s["name"] == name).unwrap();
        assert_eq!(attribute(span, "enduser.id"), "rho-admin", "{name}");
        assert_eq!(attribute(span, "enduser.scope"), "tools:call", "{name}");
    }

    // rho-tests may not have tools:admin: its echo is served, its checkerboard refused, and
    // the server goes on serving.
    let report = client("rho-tests", &["echo"]);
    assert_eq!(report["calls"]["echo"], "over oauth");
    let addr = format!("127.0.0.1:{port}");
    let token = provider.token("rho-tests", "tools:call", &url);
    let (status, response) = call_as(&addr, Some(&token), "checkerboard", json!({"size": 8}));
    assert_eq!(status, 403, "{response}");
    let challenge = header(&response, "www-authenticate").unwrap();
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"tools:call tools:admin\""),
        "{challenge}"
    );
    let (status, response) = call_as(&addr, Some(&token), "echo", json!({"text": "ok"}));
    assert_eq!((status, answer_text(&response)), (200, "ok".to_owned()));
}

#[test]
fn tokens_not_for_this_server_are_refused_with_a_challenge_and_the_server_keeps_serving() {
    let mut provider = OidcProvider::start();
    let plugins = tempfile::tempdir().unwrap();
    install(plugins.path(), "echo");
    let state = tempfile::tempdir().unwrap();
    let server = oauth_server(plugins.path(), state.path(), &provider);
    let addr = server.addr.clone();
    let resource = server.url();
    let issuer = provider.issuer();
    let metadata_url = format!("http://{addr}/.well-known/oauth-protected-resource/mcp");

    // The metadata names the resource and its issuer, open to all.
    let (status, response) = {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            stream,
            "GET /.well-known/oauth-protected-resource/mcp HTTP/1.1\r\nHost: {addr}\r\n\
             Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        (text.split(' ').nth(1).unwrap().to_owned(), text)
    };
    assert_eq!(status, "200", "{response}");
    let body: Value = serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["resource"], resource);
    assert_eq!(body["authorization_servers"], json!([issuer]));

    // A valid token serves.
    let good = provider.token("rho-tests", "tools:call", &resource);
    let (status, response) = call_as(&addr, Some(&good), "echo", json!({"text": "good"}));
    assert_eq!((status, answer_text(&response)), (200, "good".to_owned()));

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = |changes: Value| {
        let mut claims = json!({
            "iss": issuer, "sub": "mallory", "aud": resource, "iat": now,
            "exp": now + 300, "scope": "tools:call", "client_id": "mallory",
        });
        for (key, value) in changes.as_object().unwrap() {
            claims[key] = value.clone();
        }
        claims
    };
    let other_audience = provider.token("rho-tests", "tools:call", "http://127.0.0.1:1/other");
    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("no token", None, "no token"),
        ("malformed", Some("not.a-token".into()), "not a JWT"),
        (
            "expired",
            Some(provider.mint(claims(json!({"exp": now - 120})), "provider", None)),
            "token expired",
        ),
        ("another audience", Some(other_audience), "wrong audience"),
        (
            "another issuer",
            Some(provider.mint(
                claims(json!({"iss": "http://127.0.0.1:1"})),
                "provider",
                None,
            )),
            "wrong issuer",
        ),
        (
            "a key not in the key set",
            Some(provider.mint(claims(json!({})), "foreign", Some("made-up"))),
            "unknown key",
        ),
        (
            "another key under the issuer's key id",
            Some(provider.mint(claims(json!({})), "foreign", None)),
            "bad signature",
        ),
        (
            "alg none",
            Some(provider.mint(claims(json!({})), "none", None)),
            "algorithm none not allowed",
        ),
        (
            "HS256 keyed with the public key",
            Some(provider.mint(claims(json!({})), "hs256-public", None)),
            "algorithm HS256 not allowed",
        ),
    ];
    for (case, token, reason) in &cases {
        let (status, response) = call_as(&addr, token.as_deref(), "echo", json!({"text": "x"}));
        assert_eq!(status, 401, "{case}: {response}");
        let challenge = header(&response, "www-authenticate").unwrap_or_default();
        assert!(
            challenge.starts_with(&format!("Bearer resource_metadata=\"{metadata_url}\""))
                && challenge.contains("scope=\"tools:call\""),
            "{case}: {challenge}"
        );
        if token.is_some() {
            assert!(
                challenge.contains("error=\"invalid_token\""),
                "{case}: {challenge}"
            );
        }
        assert!(response.contains(reason), "{case}: {response}");
        // The server keeps serving.
        let (status, response) = call_as(&addr, Some(&good), "echo", json!({"text": "still"}));
        assert_eq!(
            (status, answer_text(&response)),
            (200, "still".to_owned()),
            "{case}"
        );
    }
    // `rho watch --attach` follows such a server with an access token in its token file.
    let token_file = state.path().join("access-token");
    std::fs::write(&token_file, &good).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut watch = Command::new(rho_bin())
        .args(["watch", "--plain", "--attach", &format!("http://{addr}")])
        .arg("--token-file")
        .arg(&token_file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let watched = std::io::BufRead::lines(std::io::BufReader::new(watch.stdout.take().unwrap()));
    let (lines, seen) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in watched.map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    let line = loop {
        let (status, _) = call_as(&addr, Some(&good), "echo", json!({"text": "watched"}));
        assert_eq!(status, 200);
        match seen.recv_timeout(Duration::from_millis(500)) {
            Ok(line) if line.contains("watched") && line.contains("-> echo") => break line,
            _ => assert!(Instant::now() < deadline, "rho watch saw no call"),
        }
    };
    assert!(line.contains("by rho-tests"), "{line}");
    let _ = watch.kill();
    let _ = watch.wait();

    // A token without the scope every call needs: 403.
    let unscoped = provider.mint(claims(json!({"scope": "other"})), "provider", None);
    let (status, response) = call_as(&addr, Some(&unscoped), "echo", json!({"text": "x"}));
    assert_eq!(status, 403, "{response}");

    // Rotation: the issuer signs with a new key; its first token costs one fetch of the set.
    std::thread::sleep(Duration::from_millis(1100));
    provider.restart(true);
    let before = provider.jwks_fetches();
    let rotated = provider.token("rho-tests", "tools:call", &resource);
    let (status, response) = call_as(&addr, Some(&rotated), "echo", json!({"text": "rotated"}));
    assert_eq!(
        (status, answer_text(&response)),
        (200, "rotated".to_owned())
    );
    let (status, _) = call_as(&addr, Some(&good), "echo", json!({"text": "old key"}));
    assert_eq!(status, 200, "a token of the old key, still published");
    assert_eq!(provider.jwks_fetches() - before, 1);

    // A thousand made-up key ids: at most one fetch per jwks_refetch_ms (1 s here), and one.
    let before = provider.jwks_fetches();
    let started = Instant::now();
    for i in 0..1000 {
        let kid = format!("made-up-{i}");
        let token = provider.mint(claims(json!({})), "provider", Some(&kid));
        let (status, _) = call_as(&addr, Some(&token), "echo", json!({"text": "x"}));
        assert_eq!(status, 401);
    }
    let fetched = provider.jwks_fetches() - before;
    let bound = started.elapsed().as_millis() as u64 / 1000 + 1;
    assert!(
        fetched <= bound,
        "{fetched} fetches of the key set in {:?}",
        started.elapsed()
    );
    eprintln!(
        "1,000 made-up key ids: {fetched} fetches of the key set in {:?}",
        started.elapsed()
    );
    let (status, _) = call_as(&addr, Some(&rotated), "echo", json!({"text": "after"}));
    assert_eq!(status, 200);
    drop(server);

    // Each refusal is one journal line with its reason, never the token.
    let text = std::fs::read_to_string(state.path().join("journal.jsonl")).unwrap();
    let events = journal(&state.path().join("journal.jsonl"));
    let reasons: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "access_refused")
        .map(|e| e["reason"].as_str().unwrap())
        .take(cases.len())
        .collect();
    let wanted: Vec<&str> = cases.iter().map(|(_, _, reason)| *reason).collect();
    assert_eq!(reasons, wanted);
    for (_, token, _) in &cases {
        if let Some(token) = token {
            assert!(!text.contains(token.as_str()), "a token in the journal");
        }
    }
    assert!(!text.contains(&good));
}
