//! [4/11] Policy on every call. Cedar policies (rho-policy) decide who may list and call which
//! tool, on the principal, the tool and the call's arguments, before the gate and in the call's
//! own task; a policy file reloads like a plugin (a broken one refused, the old set kept); rate
//! and concurrency limits per principal × tool end a call over the rate at once; every decision
//! is in the call's end event; `rho serve` shows each principal only its tools and tells only the
//! sessions a policy change affects.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rho_policy::CedarPolicy;
use rho_runtime::{
    AuthMethod, BusItem, CallOptions, Decision, DirOptions, EventKind, EventType, Filter, Host,
    LimitRule, Outcome, Principal, ToolCall, ToolCtx, ToolSpec,
};
use rho_tests::{
    HttpServer, client_report, install, post, python_sdk, rho_run as rho, rpc_of, workspace_dir,
};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

/// A host tool that counts its calls and those running at once; `read_only` as told, each call
/// taking `pause`.
struct Note {
    name: &'static str,
    read_only: bool,
    pause: Duration,
    calls: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    most_at_once: Arc<AtomicUsize>,
}

impl Note {
    fn new(name: &'static str, read_only: bool, pause: Duration) -> Note {
        Note {
            name,
            read_only,
            pause,
            calls: Arc::default(),
            running: Arc::default(),
            most_at_once: Arc::default(),
        }
    }
}

#[async_trait::async_trait]
impl rho_runtime::Tool for Note {
    fn spec(&self) -> ToolSpec {
        let hints = rho_runtime::plugin_api::declare::ToolHints {
            read_only: self.read_only,
            ..Default::default()
        };
        ToolSpec::native(self.name, "Notes.", json!({"type": "object"})).with_hints(hints)
    }

    async fn call(
        &self,
        _args: Value,
        _ctx: ToolCtx,
    ) -> Result<rho_runtime::plugin_api::Answer, rho_runtime::plugin_api::ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.pause).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(rho_runtime::plugin_api::Answer::text("noted"))
    }
}

fn who(id: &str, scopes: &[&str]) -> Arc<Principal> {
    Arc::new(Principal::new(id, AuthMethod::StaticToken).with_scopes(scopes.iter().copied()))
}

async fn call_by(
    host: &Host,
    principal: &Arc<Principal>,
    tool: &str,
    args: Value,
) -> rho_runtime::ToolResult {
    let call = ToolCall::new(format!("{}-{tool}", principal.id), tool, args).by(principal.clone());
    host.call_with(&call, &CallOptions::default()).await
}

fn names(tools: Vec<ToolSpec>) -> Vec<String> {
    tools.into_iter().map(|t| t.name).collect()
}

/// echo and files (real plugins, in process) and the host's own `write_note`.
async fn notes_host(policy: CedarPolicy, note: Note) -> (Host, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "echo");
    install(dir.path(), "files");
    let (host, reports) = Host::builder()
        .plugin_dir(dir.path(), DirOptions::in_process())
        .tool(Arc::new(note))
        .policy(Arc::new(policy))
        .build()
        .await
        .unwrap();
    assert!(reports.iter().all(|r| r.errors.is_empty()), "{reports:?}");
    (host, dir)
}

const WRITERS: &str = r#"
@id("readers-for-all")
permit(principal, action, resource) when { resource.read_only || resource.source == "files" };
@id("writers")
permit(principal, action, resource) when { principal.scopes.contains("notes:write") };
@id("no-writes-for-bob")
forbid(principal == Rho::Principal::"bob", action, resource) when { resource.name like "write_*" };
@id("docs-only")
forbid(principal, action == Rho::Action::"call", resource == Rho::Tool::"read_passage")
  unless { context.arguments.hasTag("path") && context.arguments.getTag("path") like "DOCS/*" };
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_decides_each_principals_list_and_calls_on_the_tool_its_scopes_and_arguments() {
    let docs = tempfile::tempdir().unwrap();
    let secret = tempfile::tempdir().unwrap();
    for dir in [docs.path(), secret.path()] {
        std::fs::write(dir.join("a.txt"), "one\ntwo\n").unwrap();
    }
    let text = WRITERS.replace("DOCS", docs.path().to_str().unwrap());
    let policy = CedarPolicy::from_text("policy.cedar", &text).unwrap();
    assert_eq!(policy.len(), 4);
    let note = Note::new("write_note", false, Duration::ZERO);
    let written = note.calls.clone();
    let (host, _plugins) = notes_host(policy, note).await;
    let mut ends = host.subscribe_filtered(Filter::default().types([EventType::ToolExecutionEnd]));
    let (alice, bob, carol) = (
        who("alice", &["notes:write"]),
        who("bob", &["notes:write"]),
        who("carol", &[]),
    );
    let via = rho_runtime::Via::Http;
    // Lists: bob's forbid and carol's missing scope leave `write_note` out.
    assert_eq!(
        names(host.tools_for(Some(&alice), via)),
        ["echo", "read_passage", "write_note"]
    );
    assert_eq!(
        names(host.tools_for(Some(&bob), via)),
        ["echo", "read_passage"]
    );
    assert_eq!(
        names(host.tools_for(Some(&carol), via)),
        ["echo", "read_passage"]
    );

    let result = call_by(&host, &alice, "write_note", json!({})).await;
    assert_eq!(result.outcome, Outcome::Ok, "{}", result.text());
    assert_eq!(
        result.decision,
        Some(Decision::Allowed {
            policies: vec!["writers".into()]
        })
    );
    let result = call_by(&host, &bob, "write_note", json!({})).await;
    assert_eq!(result.outcome, Outcome::Blocked);
    assert_eq!(
        result.text(),
        "call of tool `write_note` by bob (static token): forbidden by policy `no-writes-for-bob`"
    );
    let result = call_by(&host, &carol, "write_note", json!({})).await;
    assert_eq!(result.outcome, Outcome::Blocked);
    assert!(
        result.text().ends_with("forbidden: no policy permits it"),
        "{}",
        result.text()
    );
    // Only alice's call reached the tool.
    assert_eq!(written.load(Ordering::SeqCst), 1);

    // On the arguments: a path beneath the docs, and none other.
    let read = |dir: &Path| json!({"path": dir.join("a.txt"), "start_line": 1, "end_line": 1});
    let result = call_by(&host, &carol, "read_passage", read(docs.path())).await;
    assert_eq!(result.outcome, Outcome::Ok, "{}", result.text());
    let result = call_by(&host, &carol, "read_passage", read(secret.path())).await;
    assert_eq!(result.outcome, Outcome::Blocked);
    assert!(result.text().contains("`docs-only`"), "{}", result.text());
    // A path that starts beneath the docs and climbs out is the path it names.
    let secret_name = secret.path().file_name().unwrap().to_str().unwrap();
    let climbing = format!("{}/../{secret_name}/a.txt", docs.path().display());
    let climbing = json!({"path": climbing, "start_line": 1, "end_line": 1});
    let result = call_by(&host, &carol, "read_passage", climbing).await;
    assert_eq!(result.outcome, Outcome::Blocked, "{}", result.text());

    // Every decision is in the end events, as the journal keeps them.
    let mut decided = Vec::new();
    while decided.len() < 6 {
        let Some(BusItem::Event(event)) = ends.next().await else {
            continue;
        };
        if let EventKind::ToolExecutionEnd {
            principal,
            decision,
            ..
        } = &event.kind
        {
            let line = serde_json::to_value(decision).unwrap();
            decided.push((
                principal.as_ref().unwrap().id.clone(),
                line["decision"].clone(),
                line["policies"].clone(),
            ));
        }
    }
    assert_eq!(
        decided,
        [
            ("alice".into(), json!("allowed"), json!(["writers"])),
            (
                "bob".into(),
                json!("forbidden"),
                json!(["no-writes-for-bob"])
            ),
            ("carol".into(), json!("forbidden"), json!([])),
            ("carol".into(), json!("allowed"), json!(["readers-for-all"])),
            ("carol".into(), json!("forbidden"), json!(["docs-only"])),
            ("carol".into(), json!("forbidden"), json!(["docs-only"])),
        ]
    );
    // A tool a principal may not list is not named to it in an unknown tool's text.
    let result = call_by(&host, &bob, "wirte_note", json!({})).await;
    assert_eq!(result.outcome, Outcome::UnknownTool);
    assert!(!result.text().contains("write_note"), "{}", result.text());
    host.shutdown().await;
}

/// Waits for the next `policy_changed` or `warning` event.
async fn next_policy_event(events: &mut rho_runtime::Subscription) -> EventKind {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(BusItem::Event(event)) = events.next().await {
                return event.kind.clone();
            }
        }
    });
    waited
        .await
        .expect("no policy event within 10 s (the reload bound is 100 ms and a read)")
}

/// As an editor saves: a new file renamed over the old one.
fn save(path: &Path, text: &str) {
    let staged = path.with_extension("saving");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_policy_file_decides_from_its_reload_and_a_broken_one_keeps_the_old_set() {
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join("policy.cedar");
    let forbid_echo = r#"
        @id("all") permit(principal, action, resource);
        @id("no-echo-for-bob") forbid(principal == Rho::Principal::"bob", action == Rho::Action::"call", resource == Rho::Tool::"echo");
    "#;
    std::fs::write(&file, forbid_echo).unwrap();
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "echo");
    let (host, _) = Host::builder()
        .plugin_dir(dir.path(), DirOptions::in_process())
        .build()
        .await
        .unwrap();
    let mut events = host.subscribe_filtered(
        Filter::default().types([EventType::PolicyChanged, EventType::Warning]),
    );
    let _watching = rho_policy::watch(&host, &file).unwrap();
    assert_eq!(
        next_policy_event(&mut events).await,
        EventKind::PolicyChanged {
            policy: Some("policy.cedar (2 policies)".into())
        }
    );
    let bob = who("bob", &[]);
    let echo = json!({"text": "hi"});
    assert_eq!(
        call_by(&host, &bob, "echo", echo.clone()).await.outcome,
        Outcome::Blocked
    );

    // Broken, then not fitting the schema: refused in one line each, the old set kept (the
    // call forbidden stays forbidden).
    for (broken, says) in [
        (
            "permit(principal, action resource);",
            "policy file policy.cedar: not Cedar: ",
        ),
        (
            r#"@id("typo") permit(principal, action, resource) when { resource.colour == "red" };"#,
            "policy file policy.cedar: policy `typo` does not fit rho's schema: ",
        ),
    ] {
        save(&file, broken);
        let EventKind::Warning { subject, message } = next_policy_event(&mut events).await else {
            panic!("a broken policy file was put in force");
        };
        assert_eq!(subject, file.display().to_string());
        assert!(message.starts_with(says), "{message}");
        assert!(
            message.ends_with("; the policies in force stay"),
            "{message}"
        );
        assert!(!message.contains('\n'), "{message}");
        let result = call_by(&host, &bob, "echo", echo.clone()).await;
        assert_eq!(result.outcome, Outcome::Blocked, "{}", result.text());
    }
    // A good one decides from its reload on.
    save(&file, r#"@id("all") permit(principal, action, resource);"#);
    assert_eq!(
        next_policy_event(&mut events).await,
        EventKind::PolicyChanged {
            policy: Some("policy.cedar (1 policy)".into())
        }
    );
    let result = call_by(&host, &bob, "echo", echo).await;
    assert_eq!(result.outcome, Outcome::Ok, "{}", result.text());
    host.shutdown().await;
}

fn rule(text: Value) -> LimitRule {
    serde_json::from_value(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_rate_calls_end_at_once_with_a_retry_after_and_never_reach_the_tool() {
    let note = Note::new("write_note", false, Duration::ZERO);
    let written = note.calls.clone();
    let (host, _) = Host::builder()
        .tool(Arc::new(note))
        .limits(vec![rule(json!({"tool": "write_*", "rate": "5/s"}))])
        .build()
        .await
        .unwrap();
    let alice = who("alice", &[]);
    // 20 calls at once against 5/s: the bucket holds 5.
    let calls = (0..20).map(|i| {
        let (host, alice) = (host.clone(), alice.clone());
        tokio::spawn(async move {
            let call = ToolCall::new(format!("w{i}"), "write_note", json!({})).by(alice);
            host.call_with(&call, &CallOptions::default()).await
        })
    });
    let mut results = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        results.push(call.await.unwrap());
    }
    let ok = results.iter().filter(|r| r.outcome == Outcome::Ok).count();
    let limited: Vec<_> = results
        .iter()
        .filter(|r| r.outcome == Outcome::RateLimited)
        .collect();
    assert_eq!((ok, limited.len()), (5, 15));
    assert_eq!(
        written.load(Ordering::SeqCst),
        5,
        "a limited call reached the tool"
    );
    for result in &limited {
        let wait = result
            .decision
            .as_ref()
            .and_then(Decision::retry_after)
            .unwrap();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(
            result.text().starts_with("call of tool `write_note` by alice (static token): rate limited (5/s, for tools `write_*`, per principal and tool), retry after "),
            "{}",
            result.text()
        );
    }
    // Counted per principal: bob has a bucket of his own.
    let bob = who("bob", &[]);
    assert_eq!(
        call_by(&host, &bob, "write_note", json!({})).await.outcome,
        Outcome::Ok
    );
    let stats = host.stats();
    let stats = stats.iter().find(|s| s.tool == "write_note").unwrap();
    assert_eq!((stats.ok, stats.rate_limited), (6, 15));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_concurrency_limit_calls_take_turns_and_all_end_ok() {
    let note = Note::new("slow_note", false, Duration::from_millis(200));
    let (calls, most) = (note.calls.clone(), note.most_at_once.clone());
    let (host, _) = Host::builder()
        .tool(Arc::new(note))
        .limits(vec![rule(json!({"tool": "slow_note", "concurrency": 2}))])
        .build()
        .await
        .unwrap();
    let alice = who("alice", &[]);
    let running = (0..5).map(|i| {
        let (host, alice) = (host.clone(), alice.clone());
        tokio::spawn(async move {
            let call = ToolCall::new(format!("s{i}"), "slow_note", json!({})).by(alice);
            host.call_with(&call, &CallOptions::default()).await
        })
    });
    for call in running.collect::<Vec<_>>() {
        let result = call.await.unwrap();
        assert_eq!(result.outcome, Outcome::Ok, "{}", result.text());
    }
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    assert_eq!(most.load(Ordering::SeqCst), 2, "more than 2 ran at once");
    host.shutdown().await;
}

/// A host runtime of one thread: a policy evaluated on it would hold every other call back.
#[tokio::test(flavor = "current_thread")]
async fn a_large_policy_set_is_decided_off_the_runtime_and_delays_no_sibling_call() {
    // 3,000 rules about one tool: its calls' decisions are slow, and run on the blocking pool.
    let mut text = String::from(r#"@id("all") permit(principal, action, resource);"#);
    for i in 0..3000 {
        text.push_str(&format!(
            "\n@id(\"heavy-{i}\") forbid(principal, action == Rho::Action::\"call\", resource == Rho::Tool::\"heavy_note\") when {{ context.arguments.hasTag(\"k\") && context.arguments.getTag(\"k\") == \"v{i}\" }};"
        ));
    }
    let policy = CedarPolicy::from_text("large.cedar", &text).unwrap();
    assert!(!rho_runtime::Policy::never_blocks(&policy));
    let heavy = Note::new("heavy_note", false, Duration::ZERO);
    let light = Note::new("light_note", false, Duration::ZERO);
    let (host, _) = Host::builder()
        .tool(Arc::new(heavy))
        .tool(Arc::new(light))
        .policy(Arc::new(policy))
        .build()
        .await
        .unwrap();
    let alice = who("alice", &[]);
    // How long the heavy decision takes alone (each call with other arguments: a decision is
    // remembered by the argument values its policies read).
    let alone = std::time::Instant::now();
    assert_eq!(
        call_by(&host, &alice, "heavy_note", json!({"k": "alone"}))
            .await
            .outcome,
        Outcome::Ok
    );
    let heavy_alone = alone.elapsed();
    // With a sibling started after it: the sibling ends first.
    let started = std::time::Instant::now();
    let heavy = {
        let (host, alice) = (host.clone(), alice.clone());
        tokio::spawn(async move {
            let result = call_by(
                &host,
                &alice,
                "heavy_note",
                json!({"k": "beside-a-sibling"}),
            )
            .await;
            (result.outcome, started.elapsed())
        })
    };
    tokio::task::yield_now().await;
    let sibling = call_by(&host, &alice, "light_note", json!({})).await;
    let sibling_took = started.elapsed();
    let (heavy_outcome, heavy_took) = heavy.await.unwrap();
    assert_eq!((heavy_outcome, sibling.outcome), (Outcome::Ok, Outcome::Ok));
    eprintln!(
        "heavy decision alone {heavy_alone:?}; with a sibling: heavy {heavy_took:?}, sibling {sibling_took:?}"
    );
    assert!(
        sibling_took < heavy_took,
        "the sibling ({sibling_took:?}) waited for the heavy decision ({heavy_took:?})"
    );
    host.shutdown().await;
}

#[test]
fn rho_policy_check_validates_a_file_and_shows_what_a_principal_may_do() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    install(&plugins, "echo");
    install(&plugins, "files");
    let good = dir.path().join("policy.cedar");
    std::fs::write(
        &good,
        r#"@id("echo-for-all") permit(principal, action, resource == Rho::Tool::"echo");
@id("readers") permit(principal, action, resource) when { principal.scopes.contains("files:read") };"#,
    )
    .unwrap();
    let file = good.to_str().unwrap();
    let (code, out, err) = rho(&["policy", "check", file]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!("{file}: valid against rho's schema (policy.cedar (2 policies))\n")
    );
    let principal = r#"{"id": "ci", "auth": "static_token", "scopes": []}"#;
    let (code, out, err) = rho(&[
        "policy",
        "check",
        file,
        "--principal",
        principal,
        "--plugins",
        plugins.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], "for ci (static token):");
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["TOOL", "LIST", "CALL"]
    );
    assert!(
        lines[3].starts_with("echo ") && lines[3].contains("allowed by policy `echo-for-all`"),
        "{out}"
    );
    assert!(
        lines[4].starts_with("read_passage ")
            && lines[4].matches("forbidden: no policy permits it").count() == 2,
        "{out}"
    );

    let bad = dir.path().join("bad.cedar");
    std::fs::write(
        &bad,
        r#"@id("x") permit(principal, action == Rho::Action::"delete", resource);"#,
    )
    .unwrap();
    let (code, out, err) = rho(&["policy", "check", bad.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.starts_with("rho: policy file bad.cedar: policy `x` does not fit rho's schema: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    // `rho tools --principal` lists what the policy lets it list.
    let (code, out, err) = rho(&[
        "tools",
        "--plugins",
        plugins.to_str().unwrap(),
        "--policy",
        file,
        "--principal",
        principal,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["echo"]
    );
}

/// A named token for `name` in `tokens` (`rho token add`).
fn token(tokens: &Path, name: &str) -> String {
    let (code, out, err) = rho(&[
        "token",
        "add",
        name,
        "--tokens-file",
        tokens.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    out.trim().to_owned()
}

#[test]
fn rho_serve_shows_each_principal_its_tools_and_tells_only_the_sessions_a_policy_change_affects() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    install(&plugins, "echo");
    install(&plugins, "files");
    let tokens = dir.path().join("tokens.toml");
    let (alice, bob) = (token(&tokens, "alice"), token(&tokens, "bob"));
    let policy = dir.path().join("policy.cedar");
    std::fs::write(
        &policy,
        r#"@id("all") permit(principal, action, resource);
@id("no-files-for-bob") forbid(principal == Rho::Principal::"bob", action, resource == Rho::Tool::"read_passage");"#,
    )
    .unwrap();
    let journal = dir.path().join("journal.jsonl");
    let server = HttpServer::start(
        &plugins,
        &[
            "--http",
            "127.0.0.1:0",
            "--tokens-file",
            tokens.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
        ],
        &journal,
    );
    // A call bob may not make: an error result naming the policy, the decision in `_meta`.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "read_passage", "arguments": {"path": "/etc/hostname", "start_line": 1, "end_line": 1},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let bearer = format!("Bearer {bob}");
    let (status, response) = post(
        &server.addr,
        &[
            ("Authorization", &bearer),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "read_passage"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{response}");
    let result = &rpc_of(&response)["result"];
    assert_eq!(result["isError"], true, "{response}");
    assert_eq!(
        result["_meta"]["rho/decision"],
        json!({"decision": "forbidden", "policies": ["no-files-for-bob"]})
    );

    // Two sessions; the new policy takes `read_passage` from alice and leaves bob's list as it
    // was: only alice's session is told.
    let new_policy = dir.path().join("new.cedar");
    std::fs::write(
        &new_policy,
        r#"@id("all") permit(principal, action, resource);
@id("no-files") forbid(principal, action, resource == Rho::Tool::"read_passage");"#,
    )
    .unwrap();
    let sdk = python_sdk("mcp>=1.9,<2", "mcp1");
    let mut client = Command::new("python3");
    client
        .arg(workspace_dir().join("tests/python/policy_sessions.py"))
        .arg(server.url())
        .args([&alice, &bob])
        .arg(&policy)
        .arg(&new_policy)
        .env("PYTHONPATH", &sdk);
    let report = client_report(client, "two principals' sessions");
    assert_eq!(report["a"]["before"], json!(["echo", "read_passage"]));
    assert_eq!(report["a"]["after"], json!(["echo"]));
    assert_eq!(report["a"]["told"], true, "{report}");
    assert_eq!(report["b"]["before"], json!(["echo"]));
    assert_eq!(report["b"]["after"], json!(["echo"]));
    assert_eq!(report["b"]["told"], false, "{report}");
    drop(server);
    // The decision is in the journal.
    let text = std::fs::read_to_string(&journal).unwrap();
    let ends: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_execution_end")
        .collect();
    assert_eq!(
        ends[0]["decision"]["policies"],
        json!(["no-files-for-bob"]),
        "{ends:?}"
    );
    assert_eq!(ends[0]["principal"]["id"], "bob");
}

#[test]
fn the_readmes_policies_and_limits_are_what_rho_reads() {
    let readme = std::fs::read_to_string(workspace_dir().join("README.md")).unwrap();
    let block = readme
        .split("```cedar\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let policy = CedarPolicy::from_text("README.md", block).unwrap();
    assert_eq!(
        policy.ids(),
        ["everyone-reads", "writers-write", "docs-only"]
    );
    // Its `[[limit]]` example, as a host reads it.
    let toml_block = readme
        .split("\n[[limit]] ")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    let config = format!("[[limit]] {toml_block}\n");
    let path = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(path.path(), &config).unwrap();
    let (code, _, err) = rho(&[
        "tools",
        "--config",
        path.path().to_str().unwrap(),
        "--plugins",
        "/nonexistent-dir",
    ]);
    assert!(
        !err.contains("limit"),
        "the README's [[limit]] was refused: {err} ({code})"
    );
    assert!(config.contains("rate = \"5/s\""), "{config}");
}
