//! The reference MCP servers from npm (`@modelcontextprotocol/server-everything` and
//! `server-filesystem`, pinned in `tests/mcp-servers`, installed by the tests into the target
//! directory) as rho tool sources: over stdio in the sandbox, and over Streamable HTTP.
#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::time::{Duration, Instant};

use rho_mcp::{McpServer, McpSource};
use rho_runtime::{Host, Outcome};
use rho_tests::{call, collecting_updates, free_port};
use serde_json::json;

/// A host over `server`, once its tool `tool` is listed.
async fn host_with(server: McpServer, tool: &str) -> Host {
    // The sandbox's launcher is `rho-worker`, beside the test binary's directory.
    rho_tests::built();
    let source = format!("mcp:{}", server.name);
    let (host, _) = Host::builder()
        .source(&source, McpSource::new(server))
        .build()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !host.tools().iter().any(|t| t.name == tool) {
        assert!(
            Instant::now() < deadline,
            "the tools of {source} never came"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    host
}

/// `@modelcontextprotocol/server-everything` from npm (pinned in `tests/mcp-servers`), installed
/// into the target directory: its tools listed with their origin, `echo` answered, a long
/// operation's progress as updates, its image and its resource links as rho's content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_everything_server_from_npm_serves_through_rho() {
    let servers = rho_tests::npm_project("mcp-servers");
    let bin = servers.join("node_modules/.bin/mcp-server-everything");
    let mut everything =
        McpServer::command("everything", bin.to_str().unwrap(), Vec::<String>::new());
    everything.grants.read.push(servers);
    let host = host_with(everything, "echo").await;
    let tools = host.tools();
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(echo.plugin.as_deref(), Some("mcp:everything"));
    for name in [
        "get-tiny-image",
        "trigger-long-running-operation",
        "get-resource-links",
    ] {
        assert!(tools.iter().any(|t| t.name == name), "{name} missing");
    }
    let r = host.call("echo", json!({"message": "hi"})).await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "Echo: hi"));

    let (options, updates) = collecting_updates();
    let long = call(
        "l",
        "trigger-long-running-operation",
        json!({"duration": 1, "steps": 3}),
    );
    let r = host.call_with(&long, &options).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let updates = updates.lock().unwrap().clone();
    assert_eq!(updates.len(), 3, "{updates:?}");

    let r = host.call("get-tiny-image", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let image = r.output.images()[0].clone();
    assert_eq!(image.mime_type, "image/png");
    assert!(image.bytes.starts_with(b"\x89PNG"), "decoded from base64");

    let r = host.call("get-resource-links", json!({"count": 2})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let links = r
        .output
        .blocks()
        .iter()
        .filter(|b| matches!(b, rho_runtime::Block::Link(_)))
        .count();
    assert_eq!(links, 2, "{:?}", r.output);
    host.shutdown().await;
}

/// `@modelcontextprotocol/server-filesystem` given `/` (it would serve any file) runs in the
/// sandbox with a read grant on one directory: a file there is read; a file beside it, outside
/// the grant, is refused by the sandbox, and so is a write into the granted directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_filesystem_given_root_reads_only_what_its_sandbox_grants() {
    let servers = rho_tests::npm_project("mcp-servers");
    // Beside the target directory, not under /tmp (the sandbox's own scratch there).
    let base = rho_tests::profile_dir().join(format!("mcp-fs-{}", std::process::id()));
    let (granted, secret) = (base.join("granted"), base.join("secret"));
    for dir in [&granted, &secret] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(granted.join("open.txt"), "granted text").unwrap();
    std::fs::write(secret.join("closed.txt"), "secret text").unwrap();
    let bin = servers.join("node_modules/.bin/mcp-server-filesystem");
    let mut fs = McpServer::command("fs", bin.to_str().unwrap(), ["/"]);
    fs.grants.read = vec![servers.clone(), granted.clone()];
    let host = host_with(fs, "read_text_file").await;
    let read = |path: std::path::PathBuf| {
        let host = &host;
        async move {
            host.call(
                "read_text_file",
                json!({"path": path.display().to_string()}),
            )
            .await
        }
    };
    let r = read(granted.join("open.txt")).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    // What the server said: its text content as text, its structured content beside it.
    assert_eq!(&*r.text(), "granted text");
    assert_eq!(r.structured, Some(json!({"content": "granted text"})));
    let r = read(secret.join("closed.txt")).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    assert!(!r.text().contains("secret text"), "{}", r.text());
    assert!(
        r.text().contains("EACCES") || r.text().contains("ermission denied"),
        "refused by the sandbox, not the server: {}",
        r.text()
    );
    let path = granted.join("new.txt").display().to_string();
    let r = host
        .call("write_file", json!({"path": path, "content": "x"}))
        .await;
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    assert!(!granted.join("new.txt").exists());
    host.shutdown().await;
    std::fs::remove_dir_all(&base).unwrap();
}

/// server-everything serving Streamable HTTP on `port` (a process of the test's: rho neither
/// starts nor confines a server at a URL).
struct HttpEverything(std::process::Child);

impl HttpEverything {
    fn start(servers: &std::path::Path, port: u16) -> HttpEverything {
        let script =
            servers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let child = std::process::Command::new("node")
            .arg(script)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Listening before the host tries it: under load node takes seconds to start, and the
        // source's backoff (up to 30 s between tries) would stretch the wait past any deadline.
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "node never listened on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpEverything(child)
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// server-everything over Streamable HTTP as a source: listed and called; stopped, its calls end
/// `unavailable` at once and the source says it is restarting; started again, the source
/// reconnects and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_serves_and_is_unavailable_at_once_while_down() {
    let servers = rho_tests::npm_project("mcp-servers");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let everything = HttpEverything::start(&servers, port);
    let mut remote = McpServer::url("everything", &url);
    // Initializing may take a while on a loaded machine.
    remote.start_timeout_ms = 10_000;
    let host = host_with(remote, "echo").await;
    let echo = host.tools().into_iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(echo.plugin.as_deref(), Some("mcp:everything"));
    let r = host.call("echo", json!({"message": "over http"})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert!(r.text().contains("over http"), "{}", r.text());
    let (options, updates) = collecting_updates();
    let r = host
        .call_with(
            &call(
                "l",
                "trigger-long-running-operation",
                json!({"duration": 1, "steps": 3}),
            ),
            &options,
        )
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert!(!updates.lock().unwrap().is_empty(), "progress over http");

    drop(everything);
    let started = Instant::now();
    let r = host.call("echo", json!({"message": "anyone?"})).await;
    assert_eq!(r.outcome, Outcome::Unavailable, "{}", r.text());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Found down: every call from then on is unavailable at once, saying it reconnects.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let started = Instant::now();
        let r = host.call("echo", json!({"message": "anyone?"})).await;
        assert_eq!(r.outcome, Outcome::Unavailable, "{}", r.text());
        assert!(started.elapsed() < Duration::from_secs(2));
        if r.text().contains("is down") {
            break;
        }
        assert!(Instant::now() < deadline, "never found down: {}", r.text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _again = HttpEverything::start(&servers, port);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = host.call("echo", json!({"message": "back"})).await;
        if r.outcome == Outcome::Ok {
            break;
        }
        assert_eq!(r.outcome, Outcome::Unavailable, "{}", r.text());
        assert!(Instant::now() < deadline, "never reconnected: {}", r.text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    host.shutdown().await;
}
