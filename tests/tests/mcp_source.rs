//! An MCP server as a supervised tool source (`rho-mcp`), with a real server of the
//! project's own written with the official Python SDK (`tests/python/mcp_server.py`): its tools
//! serve beside with their origin; progress, images, log lines and questions map; a crash
//! mid-call is `crashed` naming the exit, calls while it is down are `unavailable` at once, and
//! it comes back; a hung server is found by a ping after a timeout and restarted; a server that
//! cannot start is retried with a growing backoff.
#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::sync::Arc;
use std::time::{Duration, Instant};

use rho_mcp::{McpServer, McpSource};
use rho_runtime::{
    BusItem, CallOptions, EventKind, Host, Outcome, Question, Reply, RunnerConfig, SourceState,
    ToolCall,
};
use rho_tests::{call, collecting_updates, python_sdk, workspace_dir};
use serde_json::json;
use tokio_stream::StreamExt;

/// What the test server reads beside the system: the SDK and its script.
fn server_reads() -> [std::path::PathBuf; 2] {
    // The sandbox's launcher is `rho-worker`, beside the test binary's directory.
    rho_tests::built();
    [
        python_sdk("mcp>=1.9,<2", "mcp1"),
        workspace_dir().join("tests/python"),
    ]
}

/// The test server, started through `env` so it finds the SDK (the source clears the rest of
/// the environment), in the sandbox with read grants on the SDK and its script.
fn server(extra: &[&str]) -> McpServer {
    let [sdk, scripts] = server_reads();
    let mut args = vec![
        format!("PYTHONPATH={}", sdk.display()),
        "python3".into(),
        scripts.join("mcp_server.py").display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut server = McpServer::command("misbehaving", "env", args);
    server.grants.read.extend(server_reads());
    server
}

/// The `--grant-read` flags of the test server's reads.
fn grant_flags() -> Vec<String> {
    server_reads()
        .iter()
        .flat_map(|p| ["--grant-read".to_owned(), p.display().to_string()])
        .collect()
}

/// A host over the test server, once its tools are listed.
async fn host_over(server: McpServer, runner: RunnerConfig) -> Host {
    let (host, _) = Host::builder()
        .source("mcp:misbehaving", McpSource::new(server))
        .runner(runner)
        .build()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !host.tools().iter().any(|t| t.name == "echo") {
        assert!(Instant::now() < deadline, "the server's tools never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    host
}

/// Calls `echo` until it answers (the server is back), within `within`: meanwhile it is
/// `unavailable`, or `crashed` when it was in flight on a server found hung.
async fn until_back(host: &Host, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let r = host.call("echo", json!({"text": "back"})).await;
        if r.outcome == Outcome::Ok {
            return started.elapsed();
        }
        let hung =
            r.outcome == Outcome::Crashed && r.text().contains("hung: stuck in a call of tool");
        assert!(
            r.outcome == Outcome::Unavailable || hung,
            "{:?}: {}",
            r.outcome,
            r.text()
        );
        assert!(started.elapsed() < within, "the server never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_tools_serve_with_their_origin_progress_images_logs_and_questions() {
    let host = host_over(server(&[]), RunnerConfig::default()).await;
    let mut events = host.subscribe();
    let echo = host.tools().into_iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(echo.plugin.as_deref(), Some("mcp:misbehaving"));
    // FastMCP declares an output schema (`{"result": ...}`) and answers text content and
    // structured content: both reach the host as the server sent them.
    let r = host.call("echo", json!({"text": "hi"})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert_eq!(r.structured, Some(json!({"result": "hi"})));
    assert_eq!(r.text(), "hi");

    // The call's trace context reaches the server in `_meta.traceparent`.
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let options = CallOptions {
        traceparent: Some(traceparent.into()),
        ..CallOptions::default()
    };
    let r = host
        .call_with(&call("t", "traceparent", json!({})), &options)
        .await;
    assert_eq!(
        r.structured,
        Some(json!({"result": traceparent})),
        "{}",
        r.text()
    );

    // Arguments are checked against the server's schema before the call.
    let r = host.call("echo", json!({"text": 5})).await;
    assert_eq!(r.outcome, Outcome::InvalidArguments, "{}", r.text());

    let (options, updates) = collecting_updates();
    let r = host
        .call_with(&call("s", "slow", json!({"ms": 300})), &options)
        .await;
    assert_eq!(r.structured, Some(json!({"result": "slept 300 ms"})));
    assert_eq!(*updates.lock().unwrap(), ["step 1", "step 2", "step 3"]);

    // Its progress notifications keep a call alive under an idle limit (three, 0.5 s apart, under
    // 0.9 s); a second between them does not (under 0.4 s): `timed_out`, naming the idle limit.
    let idle = |ms| CallOptions {
        idle_timeout: Some(Duration::from_millis(ms)),
        ..CallOptions::default()
    };
    let r = host
        .call_with(&call("i1", "slow", json!({"ms": 1500})), &idle(900))
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let r = host
        .call_with(&call("i2", "slow", json!({"ms": 3000})), &idle(400))
        .await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    assert!(r.text().contains("(its idle limit)"), "{}", r.text());

    let r = host.call("image", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert_eq!(r.output.images()[0].mime_type, "image/png");
    assert_eq!(r.output.images()[0].bytes, b"\x89PNG\r\n\x1a\nfake");

    let r = host.call("log", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let mut lines = Vec::new();
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_millis(300), events.next()).await
    {
        if let BusItem::Event(e) = item
            && let EventKind::ToolExecutionLog { message, level, .. } = &e.kind
        {
            lines.push(format!("{level}: {message}"));
        }
    }
    assert_eq!(lines, ["info: an info line", "warning: a warning line"]);

    // The server's question goes to the call's answerer.
    let answerer = |q: Question, _c: ToolCall| async move {
        assert_eq!(q.message, "Sure?");
        Reply::Accepted(json!({"confirm": true}))
    };
    let options = CallOptions {
        answerer: Some(Arc::new(answerer)),
        ..CallOptions::default()
    };
    let r = host
        .call_with(&call("a", "ask", json!({"message": "Sure?"})), &options)
        .await;
    assert_eq!(r.structured, Some(json!({"result": "accepted: True"})));
    // Without anyone to ask, the server is told no.
    let r = host.call("ask", json!({"message": "Sure?"})).await;
    assert_eq!(r.structured, Some(json!({"result": "decline"})));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_is_crashed_calls_while_down_are_unavailable_and_it_comes_back() {
    let host = host_over(server(&[]), RunnerConfig::default()).await;
    let r = host.call("crash", json!({})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
    let text = r.text();
    assert!(text.contains("mcp server `misbehaving`"), "{text}");
    assert!(text.contains("exit status: 7"), "{text}");
    assert!(
        text.contains("crashing on purpose"),
        "its last words: {text}"
    );
    // Down: the next call fails at once, saying when it comes back.
    let started = Instant::now();
    let r = host.call("echo", json!({"text": "x"})).await;
    assert_eq!(r.outcome, Outcome::Unavailable, "{}", r.text());
    assert!(r.text().contains("restarting in"), "{}", r.text());
    assert!(started.elapsed() < Duration::from_millis(200));
    until_back(&host, Duration::from_secs(30)).await;
    // Two more crashes of `crash` quarantine it (3 within the window); `echo` keeps serving.
    for _ in 0..2 {
        let r = host.call("crash", json!({})).await;
        assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
        until_back(&host, Duration::from_secs(30)).await;
    }
    let r = host.call("crash", json!({})).await;
    assert_eq!(r.outcome, Outcome::Quarantined, "{}", r.text());
    assert!(r.text().contains("3 crash(es)"), "{}", r.text());
    let r = host.call("echo", json!({"text": "still"})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    host.shutdown().await;
}

/// The server's `notifications/tools/list_changed` makes the source list its tools again: the
/// new tool serves, and the registry says what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_list_changed_swaps_its_tools_in_the_registry() {
    let host = host_over(server(&[]), RunnerConfig::default()).await;
    let mut events = host.subscribe();
    assert!(!host.tools().iter().any(|t| t.name == "grown"));
    let r = host.call("grow", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let added = loop {
        let Ok(Some(item)) = tokio::time::timeout(Duration::from_secs(20), events.next()).await
        else {
            panic!("no remote_tools_changed after the server's list_changed");
        };
        if let BusItem::Event(e) = item
            && let EventKind::RemoteToolsChanged { added, .. } = &e.kind
        {
            break added.clone();
        }
    };
    assert!(added.iter().any(|a| a.starts_with("grown")), "{added:?}");
    let r = host.call("grown", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert_eq!(r.structured, Some(json!({"result": "grown"})));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_is_found_by_a_ping_after_a_timeout_and_restarted() {
    let mut runner = RunnerConfig::default();
    runner
        .timeout_overrides
        .insert("hang".into(), Duration::from_millis(500));
    runner
        .timeout_overrides
        .insert("slow".into(), Duration::from_millis(500));
    let host = host_over(server(&[]), runner).await;
    let mut events = host.subscribe();
    // A long call that times out on a server that still answers pings: not hung.
    let r = host.call("slow", json!({"ms": 3000})).await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = host.call("echo", json!({"text": "still here"})).await;
    assert_eq!(r.structured, Some(json!({"result": "still here"})));
    // A call that blocks the server: timed out at once, then the server is found hung. Two
    // calls of `echo` stuck behind it end `crashed`, naming the hang, and are charged to `hang`:
    // its timeout and those two crashes quarantine it (3 within the window), not `echo`.
    let started = Instant::now();
    let stuck: Vec<_> = (0..2)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                host.call("echo", json!({"text": "stuck"})).await
            })
        })
        .collect();
    let r = host.call("hang", json!({})).await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    assert!(started.elapsed() < Duration::from_secs(2));
    for call in stuck {
        let r = call.await.unwrap();
        assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
        assert!(
            r.text().contains("hung: stuck in a call of tool `hang`"),
            "{}",
            r.text()
        );
    }
    let warning = loop {
        let Ok(Some(item)) = tokio::time::timeout(Duration::from_secs(20), events.next()).await
        else {
            panic!("no state change saying the server hung");
        };
        if let BusItem::Event(e) = item
            && let EventKind::SourceStateChanged {
                state: SourceState::Restarting,
                message,
                ..
            } = &e.kind
        {
            break message.clone();
        }
    };
    assert!(
        warning.contains("hung: stuck in a call of tool `hang`"),
        "{warning}"
    );
    until_back(&host, Duration::from_secs(30)).await;
    let r = host.call("hang", json!({})).await;
    assert_eq!(r.outcome, Outcome::Quarantined, "{}", r.text());
    assert!(
        r.text().contains("2 crash(es) and 1 timeout(s)"),
        "{}",
        r.text()
    );
    host.shutdown().await;
}

/// A server stuck in one call (`hang`, sent first) is found hung when a later call (`count`)
/// times out: the tool it is stuck in is the oldest call's, not the one given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_is_blamed_on_the_call_the_server_is_stuck_in_not_the_one_given_up() {
    let mut runner = RunnerConfig::default();
    runner
        .timeout_overrides
        .insert("count".into(), Duration::from_millis(300));
    let host = host_over(server(&[]), runner).await;
    let stuck = {
        let host = host.clone();
        tokio::spawn(async move { host.call("hang", json!({})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = host.call("count", json!({})).await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    let r = stuck.await.unwrap();
    assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
    assert!(
        r.text().contains("stuck in a call of tool `hang`"),
        "{}",
        r.text()
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_retried_with_a_growing_backoff() {
    let journal = tempfile::NamedTempFile::new().unwrap();
    let (host, _) = Host::builder()
        .source(
            "mcp:misbehaving",
            McpSource::new(server(&["exit_at_start"])),
        )
        .journal(journal.path())
        .build()
        .await
        .unwrap();
    // The journal's record of the source's states: starting, restarting (with the backoff),
    // starting again, ...
    let deadline = Instant::now() + Duration::from_secs(30);
    let restarts = loop {
        let states: Vec<(u64, SourceState, Option<u64>, String)> =
            rho_runtime::read_range(journal.path(), 0, None)
                .unwrap()
                .into_iter()
                .filter_map(|e| match e.kind {
                    EventKind::SourceStateChanged {
                        state,
                        retry_in_ms,
                        message,
                        ..
                    } => Some((e.ts_ms, state, retry_in_ms, message)),
                    _ => None,
                })
                .collect();
        let restarts: Vec<_> = states
            .iter()
            .filter(|(_, state, ..)| *state == SourceState::Restarting)
            .cloned()
            .collect();
        if restarts.len() >= 3 {
            assert_eq!(states[0].1, SourceState::Starting, "{states:?}");
            break restarts;
        }
        assert!(Instant::now() < deadline, "too few restarts: {states:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (_, _, _, message) in &restarts {
        assert!(message.contains("refusing to start"), "{message}");
    }
    let backoffs: Vec<Option<u64>> = restarts.iter().map(|r| r.2).collect();
    assert_eq!(backoffs[..3], [Some(500), Some(1000), Some(2000)]);
    // Each attempt waited its backoff (and the start of python) before the next.
    assert!(restarts[1].0 - restarts[0].0 >= 500, "{restarts:?}");
    assert!(restarts[2].0 - restarts[1].0 >= 1000, "{restarts:?}");
    assert!(host.tools().is_empty());
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_stdout_restarts_the_server_and_an_answer_over_16_mib_is_an_error() {
    let host = host_over(server(&[]), RunnerConfig::default()).await;
    // An answer over rmcp's bound: that call ends `error` saying why, the server keeps serving.
    let started = Instant::now();
    let r = host.call("big", json!({"bytes": 20_000_000})).await;
    assert_eq!(
        r.outcome,
        Outcome::Error,
        "{}",
        &r.text()[..r.text().len().min(300)]
    );
    assert!(
        r.text()
            .contains("an MCP message may be at most 16777216 bytes"),
        "{}",
        r.text()
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let r = host.call("echo", json!({"text": "after"})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    // A flood of stderr costs its bounded tail and nothing else.
    let r = host.call("flood_stderr", json!({"lines": 10000})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    // A line that is not MCP: a protocol failure, the call in flight `crashed` naming the
    // server, and it is restarted.
    let r = host.call("garbage", json!({})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
    assert!(
        r.text()
            .contains("mcp server `misbehaving` wrote what is not MCP on its stdout"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("this is not json-rpc"), "{}", r.text());
    until_back(&host, Duration::from_secs(30)).await;
    host.shutdown().await;
}

/// The test server's command line, as `--mcp` takes it.
fn command_line() -> String {
    let server = server(&[]);
    std::iter::once(server.command)
        .chain(server.args)
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn rho_serve_lists_and_calls_a_plugins_tools_and_an_mcp_servers_beside_them() {
    let dir = rho_tests::plugin_dir(&["echo"]);
    let mut client = std::process::Command::new("python3");
    client
        .arg(workspace_dir().join("tests/python/serve_mcp.py"))
        .arg(rho_tests::rho_bin())
        .arg(dir.path())
        .arg(command_line())
        .args(grant_flags())
        .env("PYTHONPATH", python_sdk("mcp>=1.9,<2", "mcp1"));
    let report = rho_tests::client_report(client, "serve --mcp");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for name in ["echo", "big", "slow", "crash", "ask"] {
        assert!(tools.contains(&name), "{report}");
    }
    assert_eq!(
        report["echo"], "from the plugin",
        "the plugin ranks first: {report}"
    );
    assert_eq!(report["big"], json!({"result": "bbbbb"}), "{report}");
    assert_eq!(report["big_outcome"], "ok", "{report}");
    assert_eq!(
        report["grown"], "grown",
        "rho's list_changed followed: {report}"
    );
}

#[test]
fn rho_call_runs_an_mcp_servers_tool_and_says_when_it_cannot_start() {
    let out = std::process::Command::new(rho_tests::rho_bin())
        .args([
            "call",
            "big",
            r#"{"bytes": 3}"#,
            "--json",
            "--mcp",
            &command_line(),
        ])
        .args(grant_flags())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["structured"], json!({"result": "bbb"}), "{r}");
    let out = std::process::Command::new(rho_tests::rho_bin())
        .args([
            "call",
            "big",
            "{}",
            "--mcp",
            &format!("{} exit_at_start", command_line()),
        ])
        .args(grant_flags())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mcp server `mcp_server` is down"),
        "{stderr}"
    );
    assert!(stderr.contains("refusing to start"), "{stderr}");
    assert!(stderr.contains("unknown tool `big`"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_served_by_a_plugin_and_a_server_goes_to_the_plugin_and_the_clash_is_reported() {
    let dir = rho_tests::plugin_dir(&["echo"]);
    let (host, _) = Host::builder()
        .plugin_dir(dir.path(), rho_runtime::DirOptions::default())
        .build()
        .await
        .unwrap();
    let mut events = host.subscribe();
    host.add_source("mcp:misbehaving", McpSource::new(server(&[])));
    let conflict = loop {
        let Ok(Some(item)) = tokio::time::timeout(Duration::from_secs(60), events.next()).await
        else {
            panic!("no conflict reported");
        };
        if let BusItem::Event(e) = item
            && let EventKind::ToolNameConflict {
                tool,
                kept,
                ignored,
            } = &e.kind
        {
            break (tool.clone(), kept.clone(), ignored.clone());
        }
    };
    assert_eq!(conflict.0, "echo");
    assert!(conflict.1.contains("echo@0.1.0"), "{conflict:?}");
    assert!(conflict.2.contains("mcp:misbehaving"), "{conflict:?}");
    let r = host.call("echo", json!({"text": "plugin"})).await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "plugin"));
    host.shutdown().await;
}

/// `stateless = true`: each call has a server process of its own, so no state carries over, a
/// crash ends that call alone (naming the exit), and a hung call's process goes with its timeout:
/// the next call needs no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_server_runs_one_process_per_call() {
    let mut stateless = server(&[]);
    stateless.stateless = true;
    let mut runner = RunnerConfig::default();
    runner
        .timeout_overrides
        .insert("hang".into(), Duration::from_millis(300));
    let host = host_over(stateless, runner).await;
    for _ in 0..3 {
        let r = host.call("count", json!({})).await;
        assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
        assert_eq!(r.structured, Some(json!({"result": 1})), "{}", r.text());
    }
    let r = host.call("crash", json!({})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
    assert!(r.text().contains("exit status: 7"), "{}", r.text());
    assert!(r.text().contains("crashing on purpose"), "{}", r.text());
    let r = host.call("hang", json!({})).await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    let r = host.call("echo", json!({"text": "at once"})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    host.shutdown().await;
}

/// The host pids of live processes whose command line holds `token`.
fn processes_with(token: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(token) {
            found.push(pid);
        }
    }
    found
}

/// Waits up to 5 s until none of `pids` is alive (a zombie has no command line: it counts as
/// gone once its parent is gone too, which `/proc/PID` not existing says).
fn until_gone(pids: &[i32], when: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| !stat.contains(") Z "))
            })
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{when}: processes left: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The server of one run: the test server tagged with `token` on its command line (its children
/// inherit it), and the processes to find once its `spawn` made 3 children that call `setsid`.
async fn spawned(host: &Host, token: &str) -> Vec<i32> {
    let r = host.call("spawn", json!({"count": 3})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let pids = processes_with(token);
    assert!(pids.len() >= 4, "the server and its 3 children: {pids:?}");
    pids
}

/// No process of a server is left, `setsid` or not, whichever way it ends: a host that shuts
/// down, a host that is SIGKILLed (`rho serve`), a server killed as hung after a timeout; 20
/// runs, counted from `/proc`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_process_of_a_server_outlives_it_whichever_way_it_ends() {
    let mut killed_hosts = Vec::new();
    for run in 0..20 {
        let token = format!("rho-orphans-{}-{run}", std::process::id());
        match run % 10 {
            // The server is found hung after a timeout, killed and restarted.
            0 => {
                let mut runner = RunnerConfig::default();
                runner
                    .timeout_overrides
                    .insert("hang".into(), Duration::from_millis(300));
                let host = host_over(server(&[&token]), runner).await;
                let pids = spawned(&host, &token).await;
                let r = host.call("hang", json!({})).await;
                assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
                until_back(&host, Duration::from_secs(30)).await;
                until_gone(&pids, "after the hung server's restart");
                host.shutdown().await;
            }
            // `rho serve` SIGKILLed while its server and the children run.
            1..=4 => {
                let (pids, host_pid) = sigkilled_serve(&token);
                until_gone(&pids, "after the host's SIGKILL");
                killed_hosts.push(host_pid);
            }
            // The host shuts down. A sandboxed server's HOME is its own /tmp: nothing of the
            // host's is made for it, nothing left.
            _ => {
                let mut tagged = server(&[&token]);
                tagged.name = format!("orphans{run}");
                let host = host_over(tagged, RunnerConfig::default()).await;
                let pids = spawned(&host, &token).await;
                let home = format!("rho-mcp-{}-orphans{run}-", std::process::id());
                assert_eq!(homes_named(&home), Vec::<String>::new(), "{home}");
                host.shutdown().await;
                assert_eq!(homes_named(&home), Vec::<String>::new());
                drop(host);
                until_gone(&pids, "after the host's shutdown");
            }
        }
        until_gone(&processes_with(&token), &format!("run {run}"));
    }
    // The homes the SIGKILLed hosts could not remove went when later sources started.
    for pid in killed_hosts {
        assert_eq!(
            homes_named(&format!("rho-mcp-{pid}-")),
            Vec::<String>::new()
        );
    }
}

/// The servers' private homes and their lock files in the temporary directory whose names start
/// with `prefix`.
fn homes_named(prefix: &str) -> Vec<String> {
    std::fs::read_dir(rho_runtime::secure_temp_dir().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(prefix))
        .collect()
}

/// Starts `rho serve --mcp` over the test server tagged `token`, has it call `spawn` over MCP on
/// stdio, SIGKILLs it, and returns the server's processes as they were, and the host's pid.
fn sigkilled_serve(token: &str) -> (Vec<i32>, u32) {
    use std::io::{BufRead, Write};
    let mut serve = std::process::Command::new(rho_tests::rho_bin())
        .args(["serve", "--mcp", &format!("{} {token}", command_line())])
        .args(grant_flags())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = serve.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(serve.stdout.take().unwrap());
    let requests = rho_tests::stdio_call_lines("spawn", json!({"count": 3}));
    for request in requests {
        writeln!(stdin, "{request}").unwrap();
    }
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "rho serve ended");
        let message: serde_json::Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 2 {
            assert_eq!(message["result"]["isError"], false, "{message}");
            break;
        }
    }
    let pids = processes_with(token);
    assert!(pids.len() >= 4, "the server and its 3 children: {pids:?}");
    let host_pid = serve.id();
    serve.kill().unwrap();
    serve.wait().unwrap();
    (pids, host_pid)
}

/// A server's `HOME` is bounded (`home_mb`) and off the host's disk: writing past it stops with
/// "no space left on device", and nothing of it lands in the host's temporary directory (before:
/// 300 MiB written there landed on the host's disk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_home_is_bounded_and_off_the_hosts_disk() {
    let temp = rho_runtime::secure_temp_dir().unwrap();
    let used = || {
        let out = std::process::Command::new("du")
            .args(["-sk"])
            .arg(&temp)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .and_then(|k| k.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut server = server(&[]);
    server.home_mb = 8;
    let host = host_over(server, RunnerConfig::default()).await;
    let before = used();
    let r = host.call("fill_home", json!({"mib": 20})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let text = r.text().into_owned();
    assert!(
        text.starts_with("stopped after ") && text.contains("No space left on device"),
        "{text}"
    );
    let written: u64 = text["stopped after ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(written <= 8, "{text}");
    // Nothing of it on the host's disk (other tests may write there meanwhile: far less).
    let grown = used().saturating_sub(before);
    assert!(
        grown < 4 << 10,
        "the host's {} grew by {grown} KiB",
        temp.display()
    );
    host.shutdown().await;
}
