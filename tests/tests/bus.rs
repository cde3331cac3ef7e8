//! [3/8]: the event bus: events in order for every outcome, exactly one end per call, lag made
//! explicit with exact counts, recovery from the journal, and subscribers that cannot hurt others.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::sync::Arc;
use std::time::Duration;

use rho_runtime::{
    Bus, BusItem, CallOptions, DirOptions, Event, EventKind, EventType, Filter, Gate, GateCtx,
    Journal, Outcome, ToolCall, Verdict,
};
use rho_tests::{call, host_with, plugin_dir, timeout};
use serde_json::json;
use tokio_stream::StreamExt;

struct SlowGate;

#[async_trait::async_trait]
impl Gate for SlowGate {
    async fn check(&self, call: &ToolCall, _ctx: &GateCtx) -> Verdict {
        if call.id == "gated" {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        if call.id == "blocked" {
            return Verdict::Block("not today".into());
        }
        Verdict::Allow
    }
}

async fn drain(sub: &mut rho_runtime::Subscription, quiet: Duration) -> Vec<Arc<Event>> {
    let mut events = Vec::new();
    while let Ok(Some(item)) = tokio::time::timeout(quiet, sub.next()).await {
        match item {
            BusItem::Event(e) => events.push(e),
            BusItem::Lagged { .. } => panic!("unexpected lag"),
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_in_order_for_a_call_of_each_outcome() {
    let dir = plugin_dir(&["echo", "faults"]);
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.runner(timeout(300)).gate(Arc::new(SlowGate))
    })
    .await;
    let mut sub = host.subscribe();
    let cases = [
        (
            call("ok", "echo", json!({"text": "x"})),
            Outcome::Ok,
            vec!["tool_execution_start", "tool_running", "tool_execution_end"],
        ),
        (
            call("gated", "echo", json!({"text": "x"})),
            Outcome::Ok,
            vec![
                "tool_execution_start",
                "tool_gate_waiting",
                "tool_running",
                "tool_execution_end",
            ],
        ),
        (
            call("upd", "updates", json!({"count": 3, "interval_ms": 1})),
            Outcome::Ok,
            vec![
                "tool_execution_start",
                "tool_running",
                "tool_execution_update",
                "tool_execution_update",
                "tool_execution_update",
                "tool_execution_end",
            ],
        ),
        (
            call("err", "fail", json!({"message": "m"})),
            Outcome::Error,
            vec!["tool_execution_start", "tool_running", "tool_execution_end"],
        ),
        (
            call("blocked", "echo", json!({"text": "x"})),
            Outcome::Blocked,
            vec!["tool_execution_start", "tool_execution_end"],
        ),
        (
            call("to", "spin_cancellable", json!({})),
            Outcome::TimedOut,
            vec!["tool_execution_start", "tool_running", "tool_execution_end"],
        ),
        (
            call("crash", "panic", json!({"message": "p"})),
            Outcome::Crashed,
            vec!["tool_execution_start", "tool_running", "tool_execution_end"],
        ),
        (
            call("unknown", "nope", json!({})),
            Outcome::UnknownTool,
            vec!["tool_execution_start", "tool_execution_end"],
        ),
        (
            call("invalid", "echo", json!({})),
            Outcome::InvalidArguments,
            vec!["tool_execution_start", "tool_execution_end"],
        ),
    ];
    let opts = CallOptions {
        session_id: Some("s9".into()),
        ..CallOptions::default()
    };
    for (c, outcome, _) in &cases {
        let r = host.call_with(c, &opts).await;
        assert_eq!(r.outcome, *outcome, "{}", c.id);
    }
    let events = drain(&mut sub, Duration::from_millis(200)).await;
    // seq is contiguous.
    for pair in events.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq + 1);
    }
    for (c, outcome, expected) in &cases {
        let mine: Vec<&Arc<Event>> = events
            .iter()
            .filter(|e| e.kind.call_id() == Some(c.id.as_str()))
            .collect();
        let types: Vec<&str> = mine.iter().map(|e| e.kind.type_name()).collect();
        assert_eq!(&types, expected, "{}", c.id);
        assert!(mine.iter().all(|e| e.session_id.as_deref() == Some("s9")));
        let EventKind::ToolExecutionEnd {
            outcome: o,
            is_error,
            duration_ms,
            ..
        } = &mine.last().unwrap().kind
        else {
            panic!("last is not the end")
        };
        assert_eq!((o, *is_error), (outcome, *outcome != Outcome::Ok));
        assert!(*duration_ms >= 0.0);
    }
    let upd: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolExecutionUpdate { partial, .. } => Some(partial.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(upd, ["update 1/3", "update 2/3", "update 3/3"]);
    // JSON form: one object with a type tag.
    let end = serde_json::to_value(&**events.last().unwrap()).unwrap();
    assert_eq!(end["type"], "tool_execution_end");
    assert_eq!(end["outcome"], "invalid_arguments");
    assert_eq!(end["session_id"], "s9");
}

/// On one thread the publishing task and its 64 subscribers share the runtime: the publisher's
/// `emit` yields when its budget is spent, so the fast subscribers keep up with a tight loop.
#[tokio::test(flavor = "current_thread")]
async fn sixty_four_subscribers_one_slow_recovers_from_the_journal() {
    const TOTAL: u64 = 6_000;
    let bus = Bus::new(1024);
    let journal_dir = tempfile::tempdir().unwrap();
    let journal = Journal::attach(&bus, &journal_dir.path().join("events.jsonl")).unwrap();
    let mut fast = Vec::new();
    for _ in 0..63 {
        let mut sub = bus.subscribe();
        fast.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            let mut lags = 0;
            while let Some(item) = sub.next().await {
                match item {
                    BusItem::Event(e) => {
                        seqs.push(e.seq);
                        if e.seq == TOTAL {
                            break;
                        }
                    }
                    BusItem::Lagged { .. } => lags += 1,
                }
            }
            (seqs, lags)
        }));
    }
    let mut slow_sub = bus.subscribe();
    let slow = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut lags = Vec::new();
        while let Some(item) = slow_sub.next().await {
            match item {
                BusItem::Event(e) => {
                    got.push(e.seq);
                    if e.seq == TOTAL {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                BusItem::Lagged {
                    missed,
                    resume_from,
                } => lags.push((missed, resume_from)),
            }
        }
        (got, lags)
    });
    let publisher = bus.clone();
    tokio::spawn(async move {
        for i in 0..TOTAL {
            publisher
                .emit(
                    None,
                    EventKind::Warning {
                        subject: "bench".into(),
                        message: i.to_string(),
                    },
                )
                .await;
        }
    })
    .await
    .unwrap();
    for task in fast {
        let (seqs, lags) = task.await.unwrap();
        assert_eq!(lags, 0, "a fast subscriber lagged");
        assert_eq!(seqs, (1..=TOTAL).collect::<Vec<_>>());
    }
    let (got, lags) = slow.await.unwrap();
    assert!(!lags.is_empty(), "the slow subscriber should have lagged");
    // Exact counts: what it got plus what it was told it missed is everything, with no overlap.
    let missed_total: u64 = lags.iter().map(|(m, _)| m).sum();
    assert_eq!(got.len() as u64 + missed_total, TOTAL);
    let mut recovered = got.clone();
    for (missed, from) in &lags {
        let replay: Vec<_> = journal
            .replay(*from, from + missed - 1)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(replay.len() as u64, *missed);
        assert_eq!(replay.first().unwrap().seq, *from);
        assert!(
            replay
                .iter()
                .all(|e| matches!(e.kind, EventKind::Warning { .. }))
        );
        recovered.extend(replay.iter().map(|e| e.seq));
    }
    recovered.sort_unstable();
    assert_eq!(recovered, (1..=TOTAL).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_or_dropped_subscriber_harms_no_one() {
    let bus = Bus::new(256);
    let mut panicky = bus.subscribe();
    let panicker = tokio::spawn(async move {
        let mut n = 0;
        while let Some(_item) = panicky.next().await {
            n += 1;
            if n == 10 {
                panic!("subscriber bug");
            }
        }
    });
    let dropped = bus.subscribe();
    let mut healthy = bus.subscribe();
    let dir = plugin_dir(&["echo"]);
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.bus(bus.clone()).runner(timeout(5_000))
    })
    .await;
    drop(dropped);
    let mut results = Vec::new();
    for i in 0..50 {
        results.push(
            host.call_with(
                &call(&i.to_string(), "echo", json!({"text": "x"})),
                &CallOptions::default(),
            )
            .await,
        );
    }
    assert!(results.iter().all(|r| r.outcome == Outcome::Ok));
    assert!(panicker.await.unwrap_err().is_panic());
    let events = drain(&mut healthy, Duration::from_millis(200)).await;
    let ends = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ToolExecutionEnd { .. }))
        .count();
    assert_eq!(ends, 50);
    assert_eq!(bus.subscriber_count(), 1);
}

#[tokio::test]
async fn filters_keep_only_what_was_asked() {
    let bus = Bus::default();
    let mut by_type =
        bus.subscribe_filtered(Filter::default().types([EventType::ToolExecutionEnd]));
    let mut by_session = bus.subscribe_filtered(Filter::default().session("a"));
    let mut by_tool = bus.subscribe_filtered(Filter::default().tool("echo"));
    let end = |tool: &str, id: &str| EventKind::ToolExecutionEnd {
        call_id: id.into(),
        tool: tool.into(),
        outcome: Outcome::Ok,
        output: rho_runtime::OutputView {
            text: String::new(),
            images: vec![],
            content: vec![],
        },
        is_error: false,
        structured: None,
        details: None,
        full_text: None,
        duration_ms: 1.0,
        served_by: None,
        principal: None,
        decision: None,
    };
    bus.publish(Some("a"), EventKind::TurnStart { turn: 1 });
    bus.publish(Some("b"), end("echo", "1"));
    bus.publish(Some("a"), end("other", "2"));
    bus.publish(
        None,
        EventKind::ToolRunning {
            call_id: "3".into(),
            tool: "echo".into(),
            timeout_ms: 1,
        },
    );
    let ids = |events: Vec<Arc<Event>>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        ids(drain(&mut by_type, Duration::from_millis(50)).await),
        [2, 3]
    );
    assert_eq!(
        ids(drain(&mut by_session, Duration::from_millis(50)).await),
        [1, 3]
    );
    assert_eq!(
        ids(drain(&mut by_tool, Duration::from_millis(50)).await),
        [2, 4]
    );
}

/// Image bytes are kept for `Bus::image` only once asked (`Bus::keep_recent_images`, as the HTTP
/// server does): before, an image answer leaves nothing behind on the bus; after, its bytes are
/// there under the hash its end event names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_bytes_are_kept_only_once_asked() {
    let dir = plugin_dir(&["faults"]);
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| b).await;
    let mut sub = host.subscribe_filtered(Filter::default().types([EventType::ToolExecutionEnd]));
    let image_of = |event: &Event| match &event.kind {
        EventKind::ToolExecutionEnd { output, .. } => output.images[0].sha256.clone(),
        other => panic!("not an end: {other:?}"),
    };
    let mut hashes = Vec::new();
    for (i, bytes) in [1000, 2000].into_iter().enumerate() {
        if i == 1 {
            host.bus().keep_recent_images();
        }
        let result = host
            .call_with(
                &call(&format!("c{i}"), "raw_image", json!({"bytes": bytes})),
                &CallOptions::default(),
            )
            .await;
        assert_eq!(result.outcome, Outcome::Ok, "{}", &*result.text());
        let Some(BusItem::Event(end)) = sub.recv().await else {
            panic!("no end event")
        };
        hashes.push(image_of(&end));
    }
    assert!(host.bus().image(&hashes[0]).is_none(), "kept before asked");
    let kept = host.bus().image(&hashes[1]).expect("kept once asked");
    assert_eq!(kept.bytes.len(), 2000);
}

/// Events are built and published only for someone who receives them: with no subscriber a call
/// publishes nothing; a subscription filtered to end events makes each call publish its end
/// alone; an unfiltered one, all three; a dropped one stops counting. The store of recent images
/// still gets an image answer's bytes when no one listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_nobody_listens_for_are_not_published() {
    let dir = plugin_dir(&["echo", "faults"]);
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| b).await;
    let bus = host.bus();
    let echo = |id: &str| call(id, "echo", json!({"text": "x"}));
    let published_by = |id: &'static str| {
        let host = host.clone();
        async move {
            let before = host.bus().last_seq();
            let result = host.call_with(&echo(id), &CallOptions::default()).await;
            assert_eq!(result.outcome, Outcome::Ok, "{}", &*result.text());
            host.bus().last_seq() - before
        }
    };
    assert_eq!(
        published_by("alone").await,
        0,
        "published with no one listening"
    );

    let mut ends = host.subscribe_filtered(Filter::default().types([EventType::ToolExecutionEnd]));
    let mut other = host.subscribe_filtered(Filter::default().types([EventType::PluginRemoved]));
    assert_eq!(published_by("ends").await, 1);
    let Some(BusItem::Event(end)) = ends.recv().await else {
        panic!("no end event")
    };
    assert_eq!(end.kind.call_id(), Some("ends"));
    assert_eq!(end.seq, bus.last_seq());
    assert!(
        tokio::time::timeout(Duration::from_millis(100), other.recv())
            .await
            .is_err(),
        "a filter of another type received something"
    );

    let mut all = host.subscribe();
    assert_eq!(published_by("all").await, 3);
    let seen: Vec<_> = drain(&mut all, Duration::from_millis(100))
        .await
        .iter()
        .map(|e| e.kind.type_name())
        .collect();
    assert_eq!(
        seen,
        ["tool_execution_start", "tool_running", "tool_execution_end"]
    );
    drop((ends, other, all));
    assert_eq!(
        published_by("after").await,
        0,
        "a dropped subscription still counted"
    );

    bus.keep_recent_images();
    let result = host
        .call_with(
            &call("img", "raw_image", json!({"bytes": 1500})),
            &CallOptions::default(),
        )
        .await;
    assert_eq!(result.outcome, Outcome::Ok, "{}", &*result.text());
    let view = rho_runtime::OutputView::from(&result.output);
    let kept = bus
        .image(&view.images[0].sha256)
        .expect("image kept unheard");
    assert_eq!(kept.bytes.len(), 1500);
}
