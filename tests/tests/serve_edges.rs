//! [3/9]: `rho serve` at its edges, driven by a raw JSON-RPC client (the SDKs hide these): every
//! malformed message gets exactly one answer with the right code and id, progress arrives before
//! its response, a huge answer is cut and the session goes on, and however the server ends,
//! every call ends exactly once in the journal, with no worker or copy left behind.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rho_tests::{install, rho_bin};
use serde_json::{Value, json};

/// A `rho serve` child and its lines.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
}

impl Raw {
    fn start(dir: &Path, extra: &[&str], journal: Option<&Path>) -> Raw {
        let mut cmd = Command::new(rho_bin());
        // Default journals go to the tests' own state directory, not the user's.
        cmd.args(["serve", "--plugins"])
            .arg(dir)
            .args(extra)
            .env("XDG_STATE_HOME", rho_tests::host_dir("rho-state"))
            .env("XDG_RUNTIME_DIR", rho_tests::host_dir("rho-runtime"));
        if let Some(journal) = journal {
            cmd.arg("--journal").arg(journal);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON from the server ({e}): {line}"));
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut raw = Raw {
            child,
            stdin,
            lines,
        };
        raw.send(
            &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string(),
        );
        assert!(
            raw.next(Duration::from_secs(20))
                .is_some_and(|m| m["id"] == "init")
        );
        raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        raw
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn next(&self, within: Duration) -> Option<Value> {
        self.lines.recv_timeout(within).ok()
    }

    /// Every message until the response with `id` (which is last).
    fn until(&self, id: &Value, within: Duration) -> Vec<Value> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        while let Some(m) = self.next(deadline.saturating_duration_since(Instant::now())) {
            let done = m["id"] == *id && m.get("method").is_none();
            got.push(m);
            if done {
                return got;
            }
        }
        panic!("no response with id {id} within {within:?}; got {got:?}");
    }

    /// Nothing more arrives within `quiet`.
    fn silent(&self, quiet: Duration) -> Option<Value> {
        self.next(quiet)
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plugin directory outside /tmp (an isolated plugin's /tmp is its own).
fn dir(names: &[&str]) -> tempfile::TempDir {
    let base = rho_tests::host_dir("rho-serve-tests");
    let dir = tempfile::tempdir_in(&base).unwrap();
    for name in names {
        install(dir.path(), name);
    }
    dir
}

#[test]
fn every_malformed_message_gets_exactly_one_answer_with_its_code_and_id() {
    let plugins = dir(&["echo", "faults"]);
    let mut raw = Raw::start(plugins.path(), &[], None);
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":"deep","method":"ping","params":{{"a":{}{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let cases: Vec<(String, i64, Value)> = vec![
        ("this is not JSON".into(), -32700, Value::Null),
        // Cut short, but its id is in its head.
        (r#"{"jsonrpc":"2.0","id":10,"method":"ping","#.into(), -32700, json!(10)),
        ("{}".into(), -32600, Value::Null),
        (deep, -32600, json!("deep")),
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":93,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":{}{}}}}}}}"#,
                "[".repeat(100_000),
                "]".repeat(100_000)
            ),
            -32600,
            json!(93),
        ),
        ("[1, 2, 3]".into(), -32600, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":12,"method":"ping","params":[]}"#.into(),
            -32600,
            json!(12),
        ),
        (
            r#"{"jsonrpc":"1.0","id":"v1","method":"ping"}"#.into(),
            -32600,
            json!("v1"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"echo","arguments":"text"}}"#
                .into(),
            -32602,
            json!(13),
        ),
        (
            r#"{"jsonrpc":"2.0","id":{"an":"object"},"method":"ping"}"#.into(),
            -32600,
            Value::Null,
        ),
    ];
    for (line, code, id) in cases {
        raw.send(&line);
        let answer = raw
            .next(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("no answer to {line:.80}"));
        assert_eq!(answer["error"]["code"], code, "{line:.80}: {answer}");
        assert!(answer.as_object().unwrap().contains_key("id"), "{answer}");
        assert_eq!(answer["id"], id, "{line:.80}: {answer}");
        assert_eq!(
            raw.silent(Duration::from_millis(100)),
            None,
            "a second answer to {line:.80}"
        );
    }
    // A lone surrogate (what JSON.stringify and json.dumps write) is read as U+FFFD: the call
    // runs (before: -32700 with a null id, and the client's request never answered).
    raw.send(r#"{"jsonrpc":"2.0","id":88,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\ud800b"}}}"#);
    let r = raw.until(&json!(88), Duration::from_secs(10));
    assert_eq!(
        r.last().unwrap()["result"]["content"][0]["text"],
        "a\u{fffd}b",
        "{r:?}"
    );
    // Lines over 16 MiB: one answer each, with the id at their head, in bounded memory; the
    // session goes on.
    let pid = raw.child.id();
    for (id, mib) in [(7, 17), (8, 100)] {
        let huge = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{}"}}}}}}"#,
            "x".repeat(mib << 20)
        );
        raw.send(&huge);
        let answer = raw.next(Duration::from_secs(30)).unwrap();
        assert_eq!(
            (answer["error"]["code"].clone(), answer["id"].clone()),
            (json!(-32600), json!(id)),
            "{mib} MiB"
        );
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(peak_kib < 96 << 10, "rho serve peaked at {peak_kib} KiB");
    // A wrong notification gets no answer.
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/whatever","params":[]}"#);
    assert_eq!(raw.silent(Duration::from_millis(300)), None);
    // Two requests with one id in flight: the second is refused, the first answered. The first
    // takes 500 ms, so it is still in flight when the second arrives.
    raw.send(r#"{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":500}}}"#);
    raw.send(r#"{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"echo","arguments":{"text":"second"}}}"#);
    let mut answers = vec![
        raw.next(Duration::from_secs(10)).unwrap(),
        raw.next(Duration::from_secs(10)).unwrap(),
    ];
    answers.sort_by_key(|a| a.get("error").is_some());
    assert_eq!(
        answers[0]["result"]["_meta"]["rho/outcome"], "ok",
        "{answers:?}"
    );
    assert_eq!(answers[1]["error"]["code"], -32600, "{answers:?}");
    assert_eq!(answers[1]["id"], 20);
    // `null` params are no params; a cancelled request's id is free again.
    raw.send(r#"{"jsonrpc":"2.0","id":22,"method":"tools/list","params":null}"#);
    let r = raw.until(&json!(22), Duration::from_secs(10));
    assert!(r.last().unwrap()["result"]["tools"].is_array(), "{r:?}");
    raw.send(r#"{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}"#);
    raw.until(&json!(23), Duration::from_secs(10));
    // And the session still serves.
    raw.send(r#"{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"echo","arguments":{"text":"alive"}}}"#);
    let r = raw.until(&json!(21), Duration::from_secs(10));
    assert_eq!(r.last().unwrap()["result"]["content"][0]["text"], "alive");
}

#[test]
fn every_update_arrives_as_progress_before_the_response() {
    let plugins = dir(&["faults"]);
    let mut raw = Raw::start(plugins.path(), &[], None);
    for run in 0..5 {
        let id = json!(100 + run);
        raw.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "updates", "arguments": {"count": 50, "interval_ms": 0},
            "_meta": {"progressToken": format!("p{run}")}}})
            .to_string(),
        );
        let got = raw.until(&id, Duration::from_secs(20));
        let progress: Vec<&Value> = got
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), 50, "run {run}: {} of 50", progress.len());
        for (i, p) in progress.iter().enumerate() {
            assert_eq!(p["params"]["message"], format!("update {}/50", i + 1));
        }
        assert_eq!(
            got.last().unwrap()["result"]["content"][0]["text"],
            "sent 50 updates"
        );
    }
}

#[test]
fn a_huge_answer_is_cut_and_the_session_serves_on() {
    let plugins = dir(&["faults", "echo"]);
    let mut raw = Raw::start(plugins.path(), &[], None);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"big_output","arguments":{"bytes":12000000}}}"#);
    let got = raw.until(&json!(1), Duration::from_secs(30));
    let answer = got.last().unwrap();
    let size = answer.to_string().len();
    assert!(size < 10 << 20, "{size} bytes sent");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("[rho: the answer is larger than this client is sent"),
        "{:.200}",
        &text[text.len() - 300..]
    );
    assert_eq!(answer["result"]["_meta"]["rho/truncated"], true);
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"next"}}}"#);
    let got = raw.until(&json!(2), Duration::from_secs(10));
    assert_eq!(got.last().unwrap()["result"]["content"][0]["text"], "next");
}

/// Processes (not zombies) whose command line names `marker`.
fn processes_naming(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let zombie = stat
                .rfind(')')
                .is_some_and(|i| stat[i + 2..].starts_with('Z'));
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            !zombie && String::from_utf8_lossy(&cmd).contains(marker)
        })
        .count()
}

fn copies_of(pid: u32) -> usize {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("rho-plugins-{pid}."))
        })
        .count()
}

#[test]
fn however_the_server_ends_every_call_ends_once_and_nothing_is_left() {
    let plugins = dir(&["faults"]);
    let marker = plugins.path().to_str().unwrap().to_owned();
    let ways = ["stdin", "stdout", "SIGTERM", "SIGINT"];
    for way in ways {
        for run in 0..20 {
            let isolated = run % 2 == 1;
            let journal = tempfile::NamedTempFile::new().unwrap();
            let extra: &[&str] = if isolated { &[] } else { &["--in-process"] };
            let mut raw = Raw::start(plugins.path(), extra, Some(journal.path()));
            let pid = raw.child.id();
            // Two calls in flight, one that honours cancellation and one that does not.
            raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":30000}}}"#);
            raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"spin","arguments":{}}}"#);
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::fs::read_to_string(journal.path())
                .unwrap()
                .matches("tool_running")
                .count()
                < 2
            {
                assert!(Instant::now() < deadline, "{way}: the calls never ran");
                std::thread::sleep(Duration::from_millis(10));
            }
            let stopped = Instant::now();
            match way {
                "stdin" => drop(raw.stdin.take()),
                // The client stops reading (its reader closes the pipe at the next line): the
                // server's next write fails.
                "stdout" => raw.lines = mpsc::channel().1,
                signal => {
                    let number = if signal == "SIGTERM" {
                        libc::SIGTERM
                    } else {
                        libc::SIGINT
                    };
                    // SAFETY: signals our own child.
                    unsafe { libc::kill(pid as i32, number) };
                }
            }
            let mut n = 100;
            let status = loop {
                if let Some(status) = raw.child.try_wait().unwrap() {
                    break status;
                }
                if way == "stdout" {
                    n += 1;
                    let ping = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"ping"}}"#);
                    let stdin = raw.stdin.as_mut().unwrap();
                    let _ = writeln!(stdin, "{ping}").and_then(|()| stdin.flush());
                }
                assert!(
                    stopped.elapsed() < Duration::from_secs(5),
                    "{way} run {run}: the server did not exit"
                );
                std::thread::sleep(Duration::from_millis(5));
            };
            let took = stopped.elapsed();
            assert!(
                took < Duration::from_secs(3),
                "{way} run {run}: exit took {took:?}"
            );
            let _ = status;
            let text = std::fs::read_to_string(journal.path()).unwrap();
            let events: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let started: Vec<&Value> = events
                .iter()
                .filter(|e| e["type"] == "tool_execution_start")
                .collect();
            for start in &started {
                let ends: Vec<&Value> = events
                    .iter()
                    .filter(|e| {
                        e["type"] == "tool_execution_end" && e["call_id"] == start["call_id"]
                    })
                    .collect();
                assert_eq!(ends.len(), 1, "{way} run {run}: {}", start["call_id"]);
                let end_text = ends[0]["output"]["text"].as_str().unwrap_or_default();
                assert!(
                    end_text.contains("the host is stopping"),
                    "{way} run {run}: {end_text}"
                );
            }
            assert_eq!(started.len(), 2, "{way} run {run}");
            let deadline = Instant::now() + Duration::from_secs(3);
            while processes_naming(&marker) > 0 {
                assert!(Instant::now() < deadline, "{way} run {run}: workers left");
                std::thread::sleep(Duration::from_millis(10));
            }
            assert_eq!(copies_of(pid), 0, "{way} run {run}: private copies left");
        }
    }
}

#[test]
fn rho_call_in_process_cannot_be_ended_or_silenced_by_its_plugin() {
    let plugins = dir(&["faults", "attacks"]);
    let out = Command::new(rho_bin())
        .args([
            "call",
            "exit_process",
            r#"{"code":0}"#,
            "--json",
            "--in-process",
            "--plugins",
        ])
        .arg(plugins.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["outcome"], "crashed", "{result}");
    assert!(
        result["text"]
            .as_str()
            .unwrap()
            .contains("ended the host process")
    );
    let out = Command::new(rho_bin())
        .args(["call", "close_stdio", "--json", "--plugins"])
        .arg(plugins.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["text"], "ok: closed");
}

#[test]
fn the_python_sdk_gets_every_progress_update_and_a_bounded_answer() {
    let plugins = dir(&["faults", "echo"]);
    for (requirement, name) in [("mcp>=2,<3", "mcp2"), ("mcp>=1.9,<2", "mcp1")] {
        let sdk = rho_tests::python_sdk(requirement, name);
        let mut client = Command::new("python3");
        client
            .arg(rho_tests::workspace_dir().join("tests/python/progress.py"))
            .arg(rho_bin())
            .arg(plugins.path())
            .env("PYTHONPATH", &sdk);
        let report = rho_tests::client_report(client, requirement);
        for run in report["runs"].as_array().unwrap() {
            let progress = run["progress"].as_array().unwrap();
            assert_eq!(progress.len(), 50, "{requirement}: {run}");
            assert_eq!(progress[49], "update 50/50");
            assert_eq!(run["text"], "sent 50 updates");
        }
        assert_eq!(report["big_truncated"], true, "{requirement}");
        assert_eq!(report["after"], "still here", "{requirement}");
    }
}

/// A plugin's log lines (interface 3), isolated and in process, reach an MCP client through the
/// official Python SDK at the level it set: none before it sets one, then those at or above it,
/// in order, before the answer.
#[test]
fn the_python_sdk_hears_log_lines_at_the_level_it_set() {
    let plugins = dir(&["faults"]);
    for (requirement, name) in [("mcp>=2,<3", "mcp2"), ("mcp>=1.9,<2", "mcp1")] {
        let sdk = rho_tests::python_sdk(requirement, name);
        for extra in [&[][..], &["--in-process"][..]] {
            let mut client = Command::new("python3");
            client
                .arg(rho_tests::workspace_dir().join("tests/python/log_levels.py"))
                .arg(rho_bin())
                .arg(plugins.path())
                .args(extra)
                .env("PYTHONPATH", &sdk);
            let report = rho_tests::client_report(client, requirement);
            assert_eq!(report["logging"], true, "{requirement} {extra:?}: {report}");
            let heard = |level: &str| -> Vec<String> {
                let run = &report["runs"][level];
                assert_eq!(
                    run["text"], "logged 4 lines",
                    "{requirement} {extra:?}: {run}"
                );
                run["heard"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| {
                        assert_eq!(h["logger"], "log_levels", "{h}");
                        format!(
                            "{}:{}",
                            h["level"].as_str().unwrap(),
                            h["data"].as_str().unwrap()
                        )
                    })
                    .collect()
            };
            assert_eq!(
                heard("unset"),
                Vec::<String>::new(),
                "{requirement} {extra:?}"
            );
            assert_eq!(
                heard("warning"),
                ["warning:warning line", "error:error line"],
                "{requirement} {extra:?}"
            );
            assert_eq!(
                heard("debug"),
                [
                    "debug:debug line",
                    "info:info line",
                    "warning:warning line",
                    "error:error line"
                ],
                "{requirement} {extra:?}"
            );
            assert_eq!(
                heard("error"),
                ["error:error line"],
                "{requirement} {extra:?}"
            );
        }
    }
}

#[test]
fn calls_beyond_the_bound_wait_for_a_turn() {
    let plugins = dir(&["faults"]);
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "[serve]\nmax_calls = 2\n").unwrap();
    let mut raw = Raw::start(
        plugins.path(),
        &["--config", config.path().to_str().unwrap()],
        None,
    );
    let started = Instant::now();
    for id in 1..=4 {
        raw.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "sleep", "arguments": {"ms": 400}}})
            .to_string(),
        );
    }
    let mut answered = 0;
    while answered < 4 {
        let m = raw.next(Duration::from_secs(10)).expect("an answer");
        if m.get("result").is_some() {
            assert_eq!(m["result"]["_meta"]["rho/outcome"], "ok", "{m}");
            answered += 1;
        }
    }
    // Two turns of two 400 ms calls.
    assert!(
        started.elapsed() >= Duration::from_millis(780),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_cancelled_request_frees_its_id_and_a_client_gone_before_initialize_ends_the_server() {
    let plugins = dir(&["faults"]);
    let mut raw = Raw::start(plugins.path(), &[], None);
    raw.send(r#"{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":20000}}}"#);
    std::thread::sleep(Duration::from_millis(300));
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":30}}"#);
    std::thread::sleep(Duration::from_millis(300));
    raw.send(r#"{"jsonrpc":"2.0","id":30,"method":"ping"}"#);
    let got = raw.until(&json!(30), Duration::from_secs(10));
    assert!(got.last().unwrap().get("result").is_some(), "{got:?}");

    // A client that closes its input before `initialize`: the server ends, at once.
    let started = Instant::now();
    let out = Command::new(rho_bin())
        .args(["serve", "--plugins"])
        .arg(plugins.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("before the MCP session started"));
}

#[test]
fn a_client_that_stops_reading_stops_the_calls_even_when_nothing_is_written() {
    let plugins = dir(&["faults"]);
    let journal = tempfile::NamedTempFile::new().unwrap();
    // Close-on-exec: the server gets only its stdout.
    let (read_end, write_end) = std::io::pipe().unwrap();
    let mut child = Command::new(rho_bin())
        .args(["serve", "--plugins"])
        .arg(plugins.path())
        .arg("--journal")
        .arg(journal.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(read_end);
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"raw","version":"1"}}}}}}"#).unwrap();
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":30000}}}}}}"#).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(journal.path())
        .unwrap()
        .contains("tool_running")
    {
        assert!(Instant::now() < deadline, "the call never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The client stops reading; it writes nothing more, and the server has nothing to write.
    drop(lines);
    let stopped = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(5),
            "the server runs on"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = std::fs::read_to_string(journal.path()).unwrap();
    assert!(
        text.contains("the host is stopping (the client closed its output)"),
        "{text}"
    );
}

/// Waits until `path` holds `needle`.
fn wait_for_text(path: &Path, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
        assert!(
            Instant::now() < deadline,
            "{} never held {needle}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn echo(raw: &mut Raw, id: u64, text: &str) {
    raw.send(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": text}}})
        .to_string(),
    );
    let got = raw.until(&json!(id), Duration::from_secs(20));
    assert_eq!(got.last().unwrap()["result"]["content"][0]["text"], text);
}

#[test]
fn a_journal_is_appended_never_shared_and_followed_across_a_restart() {
    let plugins = dir(&["echo"]);
    let state = tempfile::tempdir_in(rho_tests::host_dir("rho-state")).unwrap();
    let journal = state.path().join("serve.jsonl");
    let mut first = Raw::start(plugins.path(), &[], Some(&journal));
    echo(&mut first, 1, "from the first run");
    wait_for_text(&journal, "from the first run");
    let watcher = Command::new(rho_bin())
        .args(["watch", "--json", "--attach"])
        .arg(&journal)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A second server on the same path while the first runs: it journals elsewhere.
    let mut beside = Raw::start(plugins.path(), &[], Some(&journal));
    echo(&mut beside, 2, "from the server beside");
    // The first server goes (killed: no clean shutdown); a new one takes the journal over.
    drop(first);
    let mut restarted = Raw::start(plugins.path(), &[], Some(&journal));
    echo(&mut restarted, 3, "after the restart");
    wait_for_text(&journal, "after the restart");
    std::thread::sleep(Duration::from_millis(800));
    // SAFETY: signals our own child.
    unsafe { libc::kill(watcher.id() as i32, libc::SIGINT) };
    let out = watcher.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.contains("from the first run"),
        "the journal was truncated"
    );
    assert!(
        !text.contains("from the server beside"),
        "two servers shared the journal"
    );
    for seen in ["from the first run", "after the restart"] {
        assert!(
            stdout.contains(seen),
            "the watcher missed {seen:?}: {stderr}"
        );
    }
    assert!(stderr.contains("the server restarted"), "{stderr}");
}

#[test]
fn servers_journal_to_files_of_their_own_by_default_and_watch_finds_the_newest() {
    let plugins = dir(&["echo"]);
    let state = tempfile::tempdir_in(rho_tests::host_dir("rho-state")).unwrap();
    let serve = || {
        Command::new(rho_bin())
            .args(["serve", "--plugins"])
            .arg(plugins.path())
            .env("XDG_STATE_HOME", state.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (serve(), serve());
    let journals = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|e| e.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let rho_dir = state.path().join("rho");
    let deadline = Instant::now() + Duration::from_secs(10);
    while journals(&rho_dir).len() < 2 {
        assert!(Instant::now() < deadline, "{:?}", journals(&rho_dir));
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut newest = Command::new(rho_bin())
        .args(["watch", "--json", "--attach"])
        .env("XDG_STATE_HOME", state.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let _ = newest.kill();
    let out = newest.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rho: following ") && stderr.contains("/rho/serve-"),
        "{stderr}"
    );
    for mut server in [a, b] {
        // Gone before `initialize`: the server ends at once (status 1, one line).
        drop(server.stdin.take());
        assert_eq!(server.wait().unwrap().code(), Some(1));
    }
    assert_eq!(journals(&rho_dir).len(), 2);
}

/// A tmux session running a command in a terminal of 150x45; killed when dropped.
struct Screen(String);

impl Screen {
    fn start(command: &str) -> Screen {
        let name = format!("rho-live-{}", std::process::id());
        let ok = Command::new(rho_tests::tmux())
            .args([
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                "150",
                "-y",
                "45",
                command,
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux new-session");
        Screen(name)
    }

    fn text(&self) -> String {
        let out = Command::new(rho_tests::tmux())
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen satisfies `ok`; returns it.
    fn until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let text = self.text();
            if ok(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {what}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = Command::new(rho_tests::tmux())
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

#[test]
fn the_live_view_shows_a_running_call_with_its_elapsed_time_then_its_outcome() {
    let plugins = dir(&["faults"]);
    let state = tempfile::tempdir_in(rho_tests::host_dir("rho-state")).unwrap();
    let journal = state.path().join("live.jsonl");
    let mut server = Raw::start(plugins.path(), &[], Some(&journal));
    let screen = Screen::start(&format!(
        "{} watch --attach {}",
        rho_bin().display(),
        journal.display()
    ));
    screen.until("the view", |s| {
        s.contains("running now") && s.contains("faults@0.1.0")
    });
    server.send(
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 3000}}})
        .to_string(),
    );
    // Running, with an elapsed time that moves on.
    let running = |s: &str| {
        s.contains("1 running")
            && s.lines().any(|l| {
                l.contains("sleep")
                    && l.contains("mcp-")
                    && l.trim_end_matches('│').trim_end().ends_with(" s")
            })
    };
    let first = screen.until("a running call", running);
    let elapsed = |s: &str| -> String {
        s.lines()
            .find(|l| l.contains("sleep") && l.trim_end_matches('│').trim_end().ends_with(" s"))
            .map(|l| {
                l.trim_end_matches('│')
                    .trim()
                    .rsplit("  ")
                    .next()
                    .unwrap_or("")
                    .to_owned()
            })
            .unwrap_or_default()
    };
    let before = elapsed(&first);
    screen.until("the elapsed time moving on", |s| {
        running(s) && elapsed(s) != before
    });
    let got = server.until(&json!(7), Duration::from_secs(20));
    assert_eq!(
        got.last().unwrap()["result"]["content"][0]["text"],
        "slept 3000 ms"
    );
    // Then its outcome, and nothing running.
    let done = screen.until("the call's outcome", |s| {
        s.contains("0 running")
            && s.lines()
                .any(|l| l.contains("ok") && l.contains("sleep") && l.contains("slept 3000 ms"))
    });
    eprintln!("{done}");
    // Calls that end otherwise (arguments refused) have a column, as in the plain table.
    server.send(
        &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": "long"}}})
        .to_string(),
    );
    server.until(&json!(8), Duration::from_secs(20));
    let counts = |s: &str| -> Option<Vec<String>> {
        let row = s
            .lines()
            .find(|l| l.contains("sleep") && l.contains("faults@0.1.0"))?;
        Some(
            row.trim_matches(|c: char| c == '│' || c.is_whitespace())
                .split_whitespace()
                .skip(2)
                .take(6)
                .map(str::to_owned)
                .collect(),
        )
    };
    screen.until("the other column", |s| {
        s.contains("other") && counts(s).is_some_and(|c| c == ["2", "1", "0", "0", "0", "1"])
    });
}

#[test]
fn rho_call_runs_in_a_running_host_through_its_owner_only_control_socket() {
    use std::os::unix::fs::PermissionsExt;
    let plugins = dir(&["echo"]);
    let state = tempfile::tempdir_in(rho_tests::host_dir("rho-state")).unwrap();
    let journal = state.path().join("control.jsonl");
    let mut server = Raw::start(plugins.path(), &[], Some(&journal));
    let sockets = rho_tests::host_dir("rho-runtime").join("rho");
    let socket = sockets.join(format!("host-{}.sock", server.child.id()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "no control socket at {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(&sockets), mode(&socket)), (0o700, 0o600));
    let out = Command::new(rho_bin())
        .args([
            "call",
            "echo",
            r#"{"text":"through the host"}"#,
            "--json",
            "--host",
        ])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (result["outcome"].as_str(), result["text"].as_str()),
        (Some("ok"), Some("through the host"))
    );
    // The call ran in the server: its journal has it, and its stats count it.
    wait_for_text(&journal, "through the host");
    echo(&mut server, 9, "the server serves on");
    // A host that is not there: one line, status 1.
    let out = Command::new(rho_bin())
        .args(["call", "echo", "--host"])
        .arg(sockets.join("host-0.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("rho: cannot reach the host"));
    // Without a socket: the newest running host of this user.
    let runtime = tempfile::tempdir_in(rho_tests::host_dir("rho-runtime")).unwrap();
    let mut alone = Command::new(rho_bin())
        .args(["serve", "--plugins"])
        .arg(plugins.path())
        .env("XDG_STATE_HOME", state.path())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let found = loop {
        let out = Command::new(rho_bin())
            .args(["call", "echo", r#"{"text":"found"}"#, "--host"])
            .env("XDG_RUNTIME_DIR", runtime.path())
            .output()
            .unwrap();
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        String::from_utf8_lossy(&found.stdout).trim(),
        "found",
        "{}",
        String::from_utf8_lossy(&found.stderr)
    );
    drop(alone.stdin.take());
    let _ = alone.wait();
}

#[test]
fn an_isolated_plugin_with_the_network_cannot_run_calls_through_the_control_socket() {
    // The sandbox's own namespaces tell it apart from `rho call --host`, even with the host's uid
    // and unix sockets granted.
    let plugins = dir(&["attacks", "echo"]);
    // The plugin runs as the host's own user (as it does whenever the host is not root), so
    // the peer's uid alone would let it in.
    let config = plugins.path().join("rho.toml");
    std::fs::write(&config, "[workers]\nidentity = \"host\"\n").unwrap();
    let config = config.to_str().unwrap().to_owned();
    let mut server = Raw::start(
        plugins.path(),
        &["--grant-network", "--config", &config],
        None,
    );
    let socket = rho_tests::host_dir("rho-runtime")
        .join("rho")
        .join(format!("host-{}.sock", server.child.id()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "no control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let request = json!({"tool": "echo", "arguments": {"text": "pivoted"}}).to_string();
    server.send(
        &json!({"jsonrpc": "2.0", "id": 31, "method": "tools/call", "params": {
        "name": "unix_request", "arguments": {"path": socket, "line": request}}})
        .to_string(),
    );
    let got = server.until(&json!(31), Duration::from_secs(20));
    let text = got.last().unwrap()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !text.contains("pivoted"),
        "the sandbox ran a call in the host: {text}"
    );
    // The owner still can.
    let out = Command::new(rho_bin())
        .args(["call", "echo", r#"{"text":"owner"}"#, "--host"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "owner");
}
