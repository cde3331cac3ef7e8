//! [2/13]: node traffic is trusted to no one the server does not authorise. With the shipped
//! least-privilege configuration (`deploy/nats/rho.conf`, users by NKey), against a real
//! `nats-server`: a watcher can neither announce nor answer nor publish events, node n2 cannot
//! announce n1's tools or n1's leaving nor hear n1's calls, and the host, the node and a watcher
//! do their work (before: every client could offer tools, answer calls first and knock a node's
//! tools out).

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use rho_bridge_nats::NatsConfig;
use rho_bridge_nats::rpc::{Announce, Offer, announce_subject};
use rho_bridge_nats::{EventExport, ExportConfig, Follower, HostName, Node, NodeTools, connect};
use rho_runtime::{DirOptions, Host, Outcome};
use rho_tests::{NatsServer, plugin_dir, workspace_dir};
use serde_json::json;

/// A user's NKey seed in an owner-only file, and its public key.
fn user(dir: &Path, name: &str) -> (std::path::PathBuf, String) {
    let pair = nkeys::KeyPair::new_user();
    let seed = dir.join(format!("{name}.nk"));
    std::fs::write(&seed, pair.seed().unwrap()).unwrap();
    std::fs::set_permissions(&seed, std::fs::Permissions::from_mode(0o600)).unwrap();
    (seed, pair.public_key())
}

/// The shipped configuration with the users' keys filled in and its node block copied for n2,
/// as a deployment does.
fn shipped_with_n2(keys: &[(&str, &str)], n2_key: &str) -> String {
    let mut shipped =
        std::fs::read_to_string(workspace_dir().join("deploy/nats/rho.conf")).unwrap();
    for (variable, key) in keys {
        let placeholder = format!("{variable} = \"UREPLACE_WITH_THE_PUBLIC_KEY_OF_{variable}\"");
        assert!(shipped.contains(&placeholder), "{placeholder}");
        shipped = shipped.replace(&placeholder, &format!("{variable} = \"{key}\""));
    }
    let start = shipped.find("    # Node n1").unwrap();
    let end = shipped.find("    # Watcher w1").unwrap();
    let n2 = shipped[start..end]
        .replace("n1", "n2")
        .replace("NODE_N1", "NODE_N2");
    format!(
        "NODE_N2 = \"{n2_key}\"\n{}{n2}{}",
        &shipped[..end],
        &shipped[end..]
    )
}

async fn as_user(server: &NatsServer, name: &str, seed: &Path) -> async_nats::Client {
    connect(&NatsConfig {
        url: Some(server.url()),
        host: Some(name.into()),
        nkey_file: Some(seed.to_owned()),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn announce(node: &str, tool: &str, leaving: bool) -> Vec<u8> {
    serde_json::to_vec(&Announce {
        node: node.into(),
        tools: vec![Offer {
            spec: rho_runtime::ToolSpec::native(tool, "forged", json!({"type": "object"})),
            origin: "evil@1".into(),
        }],
        leaving,
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_permissions_keep_each_role_to_its_own_subjects() {
    let secrets = tempfile::tempdir().unwrap();
    let [(h1, h1_pub), (n1, n1_pub), (n2, n2_pub), (w1, w1_pub)] =
        ["h1", "n1", "n2", "w1"].map(|name| user(secrets.path(), name));
    let keys = [
        ("HOST_H1", h1_pub.as_str()),
        ("NODE_N1", n1_pub.as_str()),
        ("WATCHER_W1", w1_pub.as_str()),
    ];
    std::fs::write(
        secrets.path().join("rho.conf"),
        shipped_with_n2(&keys, &n2_pub),
    )
    .unwrap();
    let server_conf = secrets.path().join("server.conf");
    std::fs::write(&server_conf, "include ./rho.conf\n").unwrap();
    let server = NatsServer::start_with(Some(&server_conf));

    // Node n1 serves echo; host h1 follows the nodes and exports its events.
    let node_dir = plugin_dir(&["echo"]);
    let (node_host, _) = Host::builder()
        .plugin_dir(node_dir.path(), DirOptions::in_process())
        .build()
        .await
        .unwrap();
    let node = Node::start(
        &node_host,
        as_user(&server, "n1", &n1).await,
        HostName::new("n1").unwrap(),
    )
    .await
    .unwrap();
    let journal = secrets.path().join("h1.jsonl");
    let (host, _) = Host::builder()
        .journal(&journal)
        .source("nats", NodeTools::new(as_user(&server, "h1", &h1).await))
        .build()
        .await
        .unwrap();
    let export = EventExport::start(
        &host,
        as_user(&server, "h1", &h1).await,
        ExportConfig::new(HostName::new("h1").unwrap()),
    )
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !host.tools().iter().any(|t| t.name == "echo") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "n1's echo never came"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The watcher and n2 try what their roles must not do.
    let watcher = as_user(&server, "w1", &w1).await;
    let rogue = as_user(&server, "n2", &n2).await;
    let mut overheard = Vec::new();
    for client in [&watcher, &rogue] {
        if let Ok(subscriber) = client.subscribe("rho-rpc.call.>").await {
            overheard.push(subscriber);
        }
    }
    for _ in 0..4 {
        for (client, subject, payload) in [
            (
                &watcher,
                announce_subject("w1"),
                announce("w1", "evil_w", false),
            ),
            (
                &watcher,
                announce_subject("n1"),
                announce("n1", "evil_w1", false),
            ),
            (
                &rogue,
                announce_subject("n1"),
                announce("n1", "evil_n1", false),
            ),
            (
                &rogue,
                announce_subject("n2"),
                announce("n1", "evil_as_n1", false),
            ),
            (&rogue, announce_subject("n1"), announce("n1", "echo", true)),
            (&rogue, announce_subject("n2"), announce("n1", "echo", true)),
        ] {
            let _ = client.publish(subject, payload.into()).await;
        }
        let event =
            json!({"seq": 1, "ts_ms": 0, "type": "warning", "subject": "w", "message": "forged"});
        let _ = watcher
            .publish("rho.h1.warning", event.to_string().into())
            .await;
        let _ = watcher.flush().await;
        let _ = rogue.flush().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let names: Vec<String> = host.tools().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["echo"], "a forged offer or leave was taken");

    // Calls go to n1 and are answered by n1 alone; nobody else heard them.
    for i in 0..4 {
        let r = host
            .call("echo", json!({"text": format!("call {i}")}))
            .await;
        assert_eq!(
            (r.outcome, &*r.text()),
            (Outcome::Ok, format!("call {i}").as_str())
        );
    }
    for mut subscriber in overheard {
        let heard = tokio::time::timeout(Duration::from_millis(300), subscriber.next()).await;
        assert!(!matches!(heard, Ok(Some(_))), "a call was overheard");
    }

    // [3/11] A call carries who it is for to n1 (a header, never a token), where the gate, the
    // journal and the spans see it; a principal forged by the watcher or by n2 on n1's call
    // subject never reaches n1: the server refuses their publishing there.
    let mut started = node_host.subscribe_filtered(
        rho_runtime::Filter::default().types([rho_runtime::EventType::ToolExecutionStart]),
    );
    let alice = rho_runtime::Principal::new("alice", rho_runtime::AuthMethod::OAuth)
        .with_scopes(["tools:call"]);
    let call = rho_runtime::ToolCall::new("for-alice", "echo", json!({"text": "for alice"}))
        .by(std::sync::Arc::new(alice.clone()));
    let r = host
        .call_with(&call, &rho_runtime::CallOptions::default())
        .await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "for alice"));
    let served = node_host
        .stats()
        .into_iter()
        .find(|t| t.tool == "echo")
        .unwrap();
    let subject = rho_bridge_nats::rpc::call_subject("n1", "echo", &served.origin.release());
    let mallory = serde_json::to_string(&rho_runtime::Principal::new(
        "mallory",
        rho_runtime::AuthMethod::OAuth,
    ))
    .unwrap();
    for client in [&watcher, &rogue] {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(rho_bridge_nats::rpc::PRINCIPAL_HEADER, mallory.as_str());
        let request = json!({"call_id": "forged", "tool": "echo",
            "arguments": {"text": "forged"}, "time_left_ms": 1000});
        let _ = client
            .publish_with_reply_and_headers(
                subject.clone(),
                client.new_inbox(),
                headers,
                request.to_string().into(),
            )
            .await;
        let _ = client.flush().await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut principals = Vec::new();
    while let Ok(Some(rho_runtime::BusItem::Event(event))) =
        tokio::time::timeout(Duration::from_millis(200), started.recv()).await
    {
        if let rho_runtime::EventKind::ToolExecutionStart { principal, .. } = &event.kind {
            principals.push(principal.as_deref().cloned());
        }
    }
    assert_eq!(principals, [Some(alice)], "n1 ran a call for someone else");

    // The watcher reads h1's events, and only h1's.
    let last = host.bus().last_seq();
    assert!(
        export.confirmed(last, Duration::from_secs(20)).await,
        "{:?}",
        export.status()
    );
    let mut follower = Follower::start(watcher.clone(), "RHO_EVENTS", None, "w1")
        .await
        .unwrap();
    for seq in 1..=last {
        let followed = tokio::time::timeout(Duration::from_secs(20), follower.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((followed.host.as_str(), followed.event.seq), ("h1", seq));
        followed.ack().await.unwrap();
    }
    node.stop().await;
    export.stop().await;
    host.shutdown().await;
    node_host.shutdown().await;
}
