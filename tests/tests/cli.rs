//! The `rho` binary's contract: `rho tools`, `rho call`, `rho run`, exit statuses, stderr lines.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::process::{Command, Output};

use rho_tests::{plugin_dir, rho_bin};
use serde_json::{Value, json};

fn rho(args: &[&str]) -> Output {
    Command::new(rho_bin())
        .args(args)
        .output()
        .expect("run rho")
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn tools_lists_arguments_required_first_with_their_descriptions() {
    let dir = plugin_dir(&["faults"]);
    let out = rho(&["tools", "--plugins", dir.path().to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let fail = text.split("\nfail ").nth(1).unwrap();
    let args: Vec<&str> = fail
        .lines()
        .skip_while(|l| l.trim() != "args:")
        .skip(1)
        .take_while(|l| l.starts_with("      "))
        .map(str::trim)
        .collect();
    assert!(!args.is_empty(), "{fail}");
    assert!(args[0].contains(", required)"), "{args:?}");
    assert!(args.iter().all(|a| a.contains("): ")), "{args:?}"); // A tool's own timeout and idle limit are on its first line.
    let heartbeat = text.lines().find(|l| l.starts_with("heartbeat ")).unwrap();
    assert!(heartbeat.ends_with(", idle limit 500 ms)"), "{heartbeat}");
}

#[test]
fn version_names_the_plugin_interface() {
    let out = rho(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let interface = rho_runtime::plugin_api::ffi::INTERFACE_VERSION;
    assert!(
        text.contains(&format!("plugin interface {interface}")),
        "{text}"
    );
}

#[test]
fn tools_json_lists_every_tool_with_its_schema() {
    let dir = plugin_dir(&["echo", "faults"]);
    let out = rho(&["tools", "--plugins", dir.path().to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    let tools = json_of(&out);
    let echo = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .unwrap();
    let mut keys: Vec<&str> = echo
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    // The set of keys (a JSON object's order is its writer's).
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "description",
            "hints",
            "max_result_bytes",
            "name",
            "output_schema",
            "parameters",
            "plugin",
            "plugin_version",
            "timeout_ms",
            "title"
        ]
    );
    assert_eq!(echo["plugin"], "echo");
    assert_eq!(echo["timeout_ms"], Value::Null);
    assert_eq!(echo["parameters"]["type"], "object");
    let slow = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "slow")
        .unwrap();
    assert_eq!(slow["timeout_ms"], 1000);
}

#[test]
fn call_json_outcomes_and_exit_statuses() {
    let dir = plugin_dir(&["echo", "picture", "faults"]);
    let p = dir.path().to_str().unwrap();
    let out = rho(&["call", "echo", r#"{"text":"hi"}"#, "--plugins", p, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let r = json_of(&out);
    assert_eq!(
        (r["outcome"].as_str(), r["text"].as_str()),
        (Some("ok"), Some("hi"))
    );
    assert!(r["duration_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(r["images"], json!([]));
    assert_eq!(r["details"], Value::Null);
    assert!(r.get("content").is_none(), "{r}");
    // An answer of blocks: its text, its image, and the rest summarized in order.
    let out = rho(&["call", "blocks", "--plugins", p, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let r = json_of(&out);
    assert_eq!(r["text"], "first\nlast", "{r}");
    assert_eq!(r["images"][0]["bytes"], 4, "{r}");
    assert_eq!(
        r["content"],
        json!([
            {"type": "audio", "mime_type": "audio/wav", "bytes": 15},
            {"type": "resource", "uri": "file:///notes.txt", "mime_type": "text/plain", "bytes": 6},
            {"type": "resource", "uri": "file:///data.bin", "mime_type": "application/octet-stream", "bytes": 4},
            {"type": "link", "uri": "file:///big.log", "name": "big.log"},
        ]),
        "{r}"
    );

    let out = rho(&[
        "call",
        "checkerboard",
        r#"{"size":16}"#,
        "--plugins",
        p,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let image = &json_of(&out)["images"][0];
    assert_eq!(image["mime_type"], "image/png");
    assert!(image["bytes"].as_u64().unwrap() > 8);
    assert_eq!(image["sha256"].as_str().unwrap().len(), 64);

    let out = rho(&[
        "call",
        "spin",
        "--plugins",
        p,
        "--json",
        "--timeout-ms",
        "200",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let r = json_of(&out);
    assert_eq!(r["outcome"], "timed_out");
    assert_eq!(r["text"], "tool `spin` timed out after 200 ms");

    let out = rho(&[
        "call",
        "echo",
        r#"{"text":"hi"}"#,
        "--plugins",
        p,
        "--json",
        "--gate",
        "deny:echo,spin",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_of(&out)["outcome"], "blocked");

    let out = rho(&["call", "nothing", "--plugins", p, "--json"]);
    assert_eq!(json_of(&out)["outcome"], "unknown_tool");

    let out = rho(&["call", "echo", "{not json", "--plugins", p]);
    assert_eq!(out.status.code(), Some(2));
    let out = rho(&["call", "echo", "--plugins", p, "--gate", "maybe"]);
    assert_eq!(out.status.code(), Some(2));
    let out = rho(&["call"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn call_saves_images_and_prints_text() {
    let dir = plugin_dir(&["picture"]);
    let out_dir = tempfile::tempdir().unwrap();
    let out = rho(&[
        "call",
        "checkerboard",
        r#"{"size":24}"#,
        "--plugins",
        dir.path().to_str().unwrap(),
        "--save-images",
        out_dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("24x24"));
    let saved = std::fs::read(out_dir.path().join("call-1-0.png")).unwrap();
    assert_eq!(&saved[..4], b"\x89PNG");
}

#[test]
fn load_failures_are_one_line_on_stderr_and_do_not_stop_the_command() {
    let dir = plugin_dir(&["echo"]);
    std::fs::write(dir.path().join("libbroken.so"), b"garbage").unwrap();
    let out = rho(&[
        "call",
        "echo",
        r#"{"text":"ok"}"#,
        "--plugins",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("rho: ") && lines[0].contains("libbroken.so: not a loadable library"),
        "{stderr}"
    );
}

fn rho_with_stdin(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new(rho_bin())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn rho");
    let mut pipe = child.stdin.take().unwrap();
    if let Some(input) = stdin {
        pipe.write_all(input.as_bytes()).unwrap();
    }
    drop(pipe);
    child.wait_with_output().unwrap()
}

#[test]
fn the_ask_gate_asks_on_the_terminal() {
    let dir = plugin_dir(&["echo"]);
    let p = dir.path().to_str().unwrap();
    let args = [
        "call",
        "echo",
        r#"{"text":"hi"}"#,
        "--plugins",
        p,
        "--gate",
        "ask",
        "--json",
    ];
    let yes = rho_with_stdin(&args, Some("y\n"));
    assert_eq!(json_of(&yes)["outcome"], "ok");
    assert!(String::from_utf8_lossy(&yes.stderr).contains("allow `echo` {\"text\":\"hi\"}"));
    let no = rho_with_stdin(&args, Some("n\n"));
    assert_eq!(json_of(&no)["outcome"], "blocked");
    assert_eq!(json_of(&no)["text"], "the user declined the call of `echo`");
    let closed = rho_with_stdin(&args, None);
    assert_eq!(json_of(&closed)["outcome"], "blocked");
    assert!(
        json_of(&closed)["text"]
            .as_str()
            .unwrap()
            .contains("nobody answered")
    );
}

#[test]
fn run_json_prints_the_bus_events_one_per_line() {
    let dir = plugin_dir(&["echo", "faults"]);
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!([
            {"text": "go", "tool_calls": [
                {"id": "a", "name": "echo", "arguments": {"text": "x"}},
                {"id": "b", "name": "panic", "arguments": {"message": "y"}},
                {"id": "c", "name": "exit_process", "arguments": {"code": 0}}
            ]},
            {"text": "bye"}
        ])
        .to_string(),
    )
    .unwrap();
    let out = rho(&[
        "run",
        script.to_str().unwrap(),
        "--plugins",
        dir.path().to_str().unwrap(),
        "--json",
        "--gate",
        "deny:exit_process",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"plugin_loaded"));
    assert_eq!(types.last(), Some(&"agent_end"));
    let ends: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "tool_execution_end")
        .map(|e| {
            (
                e["call_id"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    let mut sorted = ends.clone();
    sorted.sort();
    assert_eq!(sorted, [("a", "ok"), ("b", "crashed"), ("c", "blocked")]);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_attaches_to_a_journal_and_shows_health() {
    let dir = plugin_dir(&["echo", "faults"]);
    let journal = dir.path().join("serve.jsonl");
    // As `rho serve --journal` does: the journal first, so it holds the plugin loads too.
    let (host, _) = rho_tests::host_with(dir.path(), rho_runtime::DirOptions::in_process(), |b| {
        b.journal(&journal).runner(rho_tests::timeout(300))
    })
    .await;
    let mut watcher = Command::new(rho_bin())
        .args([
            "watch",
            "--attach",
            journal.to_str().unwrap(),
            "--summary-secs",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for (i, (tool, args)) in [
        ("echo", json!({"text": "a"})),
        ("echo", json!({"text": "b"})),
        ("panic", json!({"message": "p"})),
        ("spin_cancellable", json!({})),
    ]
    .into_iter()
    .enumerate()
    {
        host.call_with(
            &rho_tests::call(&i.to_string(), tool, args),
            &rho_runtime::CallOptions::default(),
        )
        .await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    // SAFETY: signals our own child.
    unsafe { libc::kill(watcher.id() as i32, libc::SIGINT) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while watcher.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            watcher.kill().unwrap();
            panic!("rho watch did not stop on SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = watcher.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ok echo #0 ok"), "{stdout}");
    assert!(stdout.contains("!! panic #2 crashed"), "{stdout}");
    assert!(
        stdout.contains("!! spin_cancellable #3 timed_out"),
        "{stdout}"
    );
    let table = stdout
        .lines()
        .find(|l| l.starts_with("echo "))
        .expect("a health table");
    assert!(
        table.contains("echo@0.1.0") && table.contains("     2      2"),
        "{table}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("panic ") && l.contains("     1      0      0      1")),
        "{stdout}"
    );
}

/// The lines a child writes on `pipe`, collected by a thread as they come.
fn collect_lines(
    pipe: impl std::io::Read + Send + 'static,
) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

/// Waits up to 20 s for a line `pred` accepts.
fn wait_line(lines: &std::sync::Mutex<Vec<String>>, what: &str, pred: impl Fn(&str) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !lines.lock().unwrap().iter().any(|l| pred(l)) {
        assert!(
            std::time::Instant::now() < deadline,
            "no line {what}: {:?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `rho watch --attach` without a path follows the newest running server: it says when that
/// server has ended, and moves to a newer one when it starts (before: it picked the newest
/// journal once, ended or not, and never moved, as MCP clients start a server per session).
#[test]
fn watch_attach_follows_the_newest_running_server() {
    let dir = plugin_dir(&["echo"]);
    let state = tempfile::tempdir().unwrap();
    let serve = || {
        Command::new(rho_bin())
            .args(["serve", "--plugins", dir.path().to_str().unwrap()])
            .env("XDG_STATE_HOME", state.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let journals = || rho_tests::journals_in(&state.path().join("rho"));
    let mut first = serve();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while journals().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no journal");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut watcher = Command::new(rho_bin())
        .args(["watch", "--attach"])
        .env("XDG_STATE_HOME", state.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = collect_lines(watcher.stderr.take().unwrap());
    let _stdout = collect_lines(watcher.stdout.take().unwrap());
    let first_journal = journals()[0].display().to_string();
    wait_line(&stderr, "following the first server", |l| {
        l.contains(&format!("following {first_journal}"))
    });
    // The first server ends (its client closed stdin).
    drop(first.stdin.take());
    first.wait().unwrap();
    wait_line(&stderr, "saying it ended", |l| {
        l.contains("has ended; waiting for a newer server")
    });
    // A newer server starts: followed, and said so.
    let mut second = serve();
    wait_line(&stderr, "moving to the newer server", |l| {
        l.contains("a newer server started; following")
    });
    let moved = stderr
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.contains("a newer server started"))
        .cloned()
        .unwrap();
    assert!(!moved.contains(&first_journal), "{moved}");
    drop(second.stdin.take());
    second.wait().unwrap();
    watcher.kill().unwrap();
    watcher.wait().unwrap();
}

/// Following the newer server B while an older A runs, then B ends: the watch says B ended and
/// waits, it does not go back to A (before: it said "a newer server started" naming A's older
/// journal, replayed A's whole journal, and its table counted A's calls twice).
#[test]
fn watch_attach_never_goes_back_to_an_older_server_nor_counts_twice() {
    use std::io::Write as _;
    let dir = plugin_dir(&["echo"]);
    let state = tempfile::tempdir().unwrap();
    let serve = || {
        Command::new(rho_bin())
            .args(["serve", "--plugins", dir.path().to_str().unwrap()])
            .env("XDG_STATE_HOME", state.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let journals = || rho_tests::journals_in(&state.path().join("rho"));
    let mut older = serve();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while journals().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no journal");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let older_journal = journals()[0].display().to_string();
    let mut watcher = Command::new(rho_bin())
        .args(["watch", "--attach", "--plain"])
        .env("XDG_STATE_HOME", state.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = collect_lines(watcher.stderr.take().unwrap());
    let stdout = collect_lines(watcher.stdout.take().unwrap());
    wait_line(&stderr, "following the older server", |l| {
        l.contains(&format!("following {older_journal}"))
    });
    // One call on the older server, seen by the watch.
    let mut input = older.stdin.take().unwrap();
    for line in rho_tests::stdio_call_lines("echo", serde_json::json!({"text": "once"})) {
        writeln!(input, "{line}").unwrap();
    }
    wait_line(&stdout, "the call on the older server", |l| {
        l.contains("echo") && l.contains("ok")
    });
    // A newer server starts, and ends; the older one still runs.
    let mut newer = serve();
    wait_line(&stderr, "moving to the newer server", |l| {
        l.contains("a newer server started; following") && !l.contains(&older_journal)
    });
    drop(newer.stdin.take());
    newer.wait().unwrap();
    wait_line(&stderr, "saying the newer one ended", |l| {
        l.contains("has ended; waiting for a newer server") && !l.contains(&older_journal)
    });
    // Time for a wrong move back to be made (one look every half second).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: signals our own child.
    unsafe { libc::kill(watcher.id() as i32, libc::SIGINT) };
    watcher.wait().unwrap();
    let said = stderr.lock().unwrap().clone();
    assert!(
        !said
            .iter()
            .any(|l| l.contains(&format!("following {older_journal}")) && l.contains("newer")),
        "went back to the older server: {said:#?}"
    );
    let shown = stdout.lock().unwrap().clone();
    let table = shown
        .iter()
        .rfind(|l| l.starts_with("echo "))
        .unwrap_or_else(|| panic!("no health table: {shown:#?}"));
    let calls: Vec<&str> = table.split_whitespace().collect();
    assert_eq!(calls.get(2), Some(&"1"), "one call, counted once: {table}");
    drop(input);
    older.wait().unwrap();
}

/// Runs rho with a deadline: a command that hangs fails the test instead of the suite.
fn rho_within(args: &[&str], secs: u64) -> Output {
    let mut child = Command::new(rho_bin())
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("rho {args:?} still runs after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn numbers_out_of_range_are_usage_errors_not_panics() {
    let dir = plugin_dir(&["echo"]);
    let plugins = dir.path().to_str().unwrap();
    let huge = "18446744073709551615";
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        "[runner]\nmax_parallel = 18446744073709551615\n",
    )
    .unwrap();
    let zero = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(zero.path(), "[runner]\ndefault_timeout_ms = 0\n").unwrap();
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), "[]").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["watch", "--summary-secs", huge], "summary-secs"),
        (
            vec![
                "run",
                script.path().to_str().unwrap(),
                "--plugins",
                plugins,
                "--max-parallel",
                huge,
            ],
            "max-parallel",
        ),
        (
            vec![
                "call",
                "echo",
                r#"{"text":"x"}"#,
                "--plugins",
                plugins,
                "--timeout-ms",
                "0",
            ],
            "timeout-ms",
        ),
        (
            vec![
                "--config",
                config.path().to_str().unwrap(),
                "tools",
                "--plugins",
                plugins,
            ],
            "runner.max_parallel",
        ),
        (
            vec![
                "--config",
                zero.path().to_str().unwrap(),
                "tools",
                "--plugins",
                plugins,
            ],
            "runner.default_timeout_ms",
        ),
    ];
    for (args, names) in cases {
        let out = rho_within(&args, 20);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn special_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rho.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    for config in ["/dev/zero", fifo.to_str().unwrap()] {
        let out = rho_within(&["--config", config, "tools", "--plugins", "."], 10);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config}: {stderr}");
        assert!(stderr.contains("not a regular file"), "{stderr}");
    }
    let out = rho_within(&["watch", "--attach", "/dev/zero"], 10);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"));
}

#[test]
fn an_unusable_plugin_directory_or_a_failed_save_exits_non_zero() {
    let missing = rho(&["tools", "--plugins", "/no/such/dir"]);
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    let dir = plugin_dir(&["picture"]);
    let file = dir.path().join("libpicture.so");
    let given_a_file = rho(&["tools", "--plugins", file.to_str().unwrap()]);
    assert_eq!(given_a_file.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&given_a_file.stderr).contains("pass the directory"),
        "{}",
        String::from_utf8_lossy(&given_a_file.stderr)
    );
    let call = rho(&[
        "call",
        "checkerboard",
        r#"{"size":8}"#,
        "--plugins",
        dir.path().to_str().unwrap(),
        "--save-images",
        "/dev/null/images",
    ]);
    assert_eq!(
        call.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&call.stderr)
    );
}

#[test]
fn the_readme_mcp_server_entry_serves_and_ends_with_its_client() {
    let readme = std::fs::read_to_string(rho_tests::workspace_dir().join("README.md")).unwrap();
    let plugins = plugin_dir(&["echo", "picture", "files"]);
    // The MCP server entry: serves, then ends when the client closes its input.
    let entry_start = readme.find("\"args\": [\"serve\"").unwrap();
    let entry = &readme[entry_start..readme[entry_start..].find(']').unwrap() + entry_start];
    assert!(
        entry.contains("\"--plugins\", \"/path/to/plugins\""),
        "{entry}"
    );
    let mut serve = Command::new(rho_bin())
        .args(["serve", "--plugins"])
        .arg(plugins.path())
        .env("XDG_STATE_HOME", rho_tests::host_dir("rho-state"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = serve.stdin.take().unwrap();
        for message in rho_tests::stdio_call_lines("echo", json!({"text": "from the readme"})) {
            writeln!(stdin, "{message}").unwrap();
        }
        // Closed once the answer is there: reading stdout to its end needs the server to exit.
        let stdout = serve.stdout.take().unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let answer = lines
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.contains("\"id\":2"))
            .unwrap();
        assert!(answer.contains("from the readme"), "{answer}");
        drop(stdin);
        assert_eq!(lines.count(), 0);
    }
    assert_eq!(serve.wait().unwrap().code(), Some(0));
}
