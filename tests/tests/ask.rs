//! A tool's questions to the user (`Ctx::ask`) and answers of blocks (audio, resources, links),
//! through `Host` with the real `faults` plugin, in process and in a worker: the answerer's reply
//! reaches the tool, the wait moves the deadline and is bounded, a host with no one to ask
//! declines, a call cancelled while its tool waits ends once and frees its worker, and blocks
//! arrive whole and in order.
#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::sync::Arc;
use std::time::{Duration, Instant};

use rho_runtime::CancellationToken;
use rho_runtime::{
    Answerer, Block, CallOptions, DirOptions, Host, NO_ONE_TO_ASK, Outcome, Question, Reply,
    ResourceContents, RunnerConfig, ToolCall,
};
use rho_tests::{call, install, isolated};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

/// A host over the `faults` plugin, in process or isolated, with `config`.
async fn faults(isolate: bool, config: RunnerConfig) -> (Host, tempfile::TempDir) {
    let dir = tempfile::tempdir_in(rho_tests::host_dir("ask-tests")).unwrap();
    install(dir.path(), "faults");
    let options = if isolate {
        isolated()
    } else {
        DirOptions::default()
    };
    let (host, reports) = Host::builder()
        .plugin_dir(dir.path(), options)
        .runner(config)
        .build()
        .await
        .unwrap();
    assert!(reports[0].errors.is_empty(), "{:?}", reports[0].errors);
    (host, dir)
}

/// The `ask` tool's report of its replies.
fn replies(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Answers each question after `wait` with the next of `replies`, recording the questions.
fn answering(
    wait: Duration,
    replies: Vec<Reply>,
) -> (Arc<dyn Answerer>, Arc<std::sync::Mutex<Vec<Question>>>) {
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let queue = Arc::new(std::sync::Mutex::new(replies));
    let seen = asked.clone();
    let answerer = move |question: Question, _call: ToolCall| {
        let (seen, queue) = (seen.clone(), queue.clone());
        async move {
            seen.lock().unwrap().push(question);
            tokio::time::sleep(wait).await;
            let mut queue = queue.lock().unwrap();
            if queue.is_empty() {
                Reply::Declined("no more replies".into())
            } else {
                queue.remove(0)
            }
        }
    };
    (Arc::new(answerer), asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_asks_and_reads_the_reply_its_wait_not_counted_against_its_timeout() {
    for isolate in [false, true] {
        let (host, _dir) = faults(isolate, RunnerConfig::default()).await;
        // The tool's timeout is 3 s; the user takes 2 s for each of two questions: 4 s of
        // waiting, and the call still ends `ok`, its time left moved by each wait.
        let (answerer, asked) = answering(
            Duration::from_secs(2),
            vec![
                Reply::Accepted(json!({"confirm": true})),
                Reply::Declined("the user declined".into()),
            ],
        );
        let options = CallOptions {
            answerer: Some(answerer),
            ..CallOptions::default()
        };
        let started = Instant::now();
        let r = host
            .call_with(
                &call(
                    "1",
                    "ask",
                    json!({"message": "Delete 3 files?", "times": 2}),
                ),
                &options,
            )
            .await;
        let context = format!("isolated: {isolate}: {}", r.text());
        assert_eq!(r.outcome, Outcome::Ok, "{context}");
        assert!(started.elapsed() >= Duration::from_secs(4), "{context}");
        let report = replies(&r.text());
        assert_eq!(report["replies"][0]["reply"], "accepted", "{context}");
        assert_eq!(
            report["replies"][0]["value"],
            json!({"confirm": true}),
            "{context}"
        );
        assert_eq!(report["replies"][1]["reply"], "declined", "{context}");
        assert_eq!(
            report["replies"][1]["value"], "the user declined",
            "{context}"
        );
        // The deadline moved by each wait: after 4 s of questions most of the 3 s are left.
        for n in 0..2 {
            let left = report["replies"][n]["time_left_ms"].as_u64().unwrap();
            assert!(
                left > 2_000 && left <= 3_000,
                "{context}: reply {n} left {left} ms"
            );
        }
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 2, "{context}");
        assert_eq!(asked[0].message, "Delete 3 files?");
        assert_eq!(asked[0].schema["properties"]["confirm"]["type"], "boolean");
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_no_one_to_ask_declines_and_an_answer_off_the_schema_is_cancelled() {
    for isolate in [false, true] {
        let (host, _dir) = faults(isolate, RunnerConfig::default()).await;
        let r = host.call("ask", json!({"message": "Sure?"})).await;
        let context = format!("isolated: {isolate}: {}", r.text());
        assert_eq!(r.outcome, Outcome::Ok, "{context}");
        let report = replies(&r.text());
        assert_eq!(report["replies"][0]["reply"], "declined", "{context}");
        assert_eq!(report["replies"][0]["value"], NO_ONE_TO_ASK, "{context}");

        // An answer that does not fit the question's schema never reaches the tool as one.
        let (answerer, _) = answering(
            Duration::ZERO,
            vec![Reply::Accepted(json!({"confirm": "yes please"}))],
        );
        let options = CallOptions {
            answerer: Some(answerer),
            ..CallOptions::default()
        };
        let r = host
            .call_with(&call("2", "ask", json!({"message": "Sure?"})), &options)
            .await;
        let report = replies(&r.text());
        assert_eq!(report["replies"][0]["reply"], "cancelled", "{report}");
        assert!(
            report["replies"][0]["value"]
                .as_str()
                .unwrap()
                .starts_with("the answer does not fit the question's schema"),
            "{report}"
        );
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_no_one_answers_is_cancelled_at_the_bound_and_the_call_goes_on() {
    for isolate in [false, true] {
        let config = RunnerConfig {
            ask_timeout: Duration::from_millis(300),
            ..RunnerConfig::default()
        };
        let (host, _dir) = faults(isolate, config).await;
        let never = |_question: Question, _call: ToolCall| std::future::pending::<Reply>();
        let options = CallOptions {
            answerer: Some(Arc::new(never)),
            ..CallOptions::default()
        };
        let r = host
            .call_with(&call("1", "ask", json!({"message": "Anyone?"})), &options)
            .await;
        let context = format!("isolated: {isolate}: {}", r.text());
        assert_eq!(r.outcome, Outcome::Ok, "{context}");
        let report = replies(&r.text());
        assert_eq!(report["replies"][0]["reply"], "cancelled", "{context}");
        assert_eq!(
            report["replies"][0]["value"], "no answer within 0 s (the host's bound on a question)",
            "{context}"
        );
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_its_tool_waits_ends_once_and_frees_the_worker() {
    for isolate in [false, true] {
        let (host, _dir) = faults(isolate, RunnerConfig::default()).await;
        let mut events = host.subscribe();
        let cancel = CancellationToken::new();
        let never = |_question: Question, _call: ToolCall| std::future::pending::<Reply>();
        let options = CallOptions {
            answerer: Some(Arc::new(never)),
            cancel: Some(cancel.clone()),
            ..CallOptions::default()
        };
        let canceller = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                cancel.cancel();
            })
        };
        let r = host
            .call_with(&call("1", "ask", json!({"message": "Anyone?"})), &options)
            .await;
        canceller.await.unwrap();
        let context = format!("isolated: {isolate}: {}", r.text());
        assert_eq!(r.outcome, Outcome::Error, "{context}");
        assert!(r.text().contains("cancelled by the client"), "{context}");
        // The next call is served at once (the worker was told the question is off, not killed
        // after its grace period).
        let started = Instant::now();
        let next = host.call("nap", json!({"ms": 1})).await;
        assert_eq!(next.outcome, Outcome::Ok, "{context}: {}", next.text());
        assert!(started.elapsed() < Duration::from_secs(2), "{context}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut ends = 0;
        while let Ok(Some(item)) =
            tokio::time::timeout(Duration::from_millis(100), events.next()).await
        {
            if let rho_runtime::BusItem::Event(e) = item
                && matches!(e.kind, rho_runtime::EventKind::ToolExecutionEnd { ref call_id, .. } if call_id == "1")
            {
                ends += 1;
            }
        }
        assert_eq!(ends, 1, "{context}: one end event");
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_arrive_whole_and_in_order_in_process_and_isolated_and_events_summarize_them() {
    for isolate in [false, true] {
        let (host, _dir) = faults(isolate, RunnerConfig::default()).await;
        let mut events = host.subscribe();
        let r = host.call("blocks", json!({})).await;
        let context = format!("isolated: {isolate}");
        assert_eq!(r.outcome, Outcome::Ok, "{context}: {}", r.text());
        let blocks = r.output.blocks();
        assert_eq!(blocks.len(), 7, "{context}: {blocks:?}");
        assert_eq!(blocks[0], Block::text("first"));
        assert_eq!(
            blocks[1],
            Block::audio("audio/wav", b"RIFF-not-really".to_vec())
        );
        let Block::Resource(note) = &blocks[2] else {
            panic!("{context}: {:?}", blocks[2]);
        };
        assert_eq!(note.uri, "file:///notes.txt");
        assert_eq!(note.contents, ResourceContents::Text("a note".into()));
        assert_eq!(
            blocks[3],
            Block::image("image/png", vec![0x89, b'P', b'N', b'G'])
        );
        let Block::Resource(data) = &blocks[4] else {
            panic!("{context}: {:?}", blocks[4]);
        };
        assert_eq!(data.contents, ResourceContents::Blob(vec![0, 1, 2, 255]));
        let Block::Link(link) = &blocks[5] else {
            panic!("{context}: {:?}", blocks[5]);
        };
        assert_eq!(
            (link.uri.as_str(), link.name.as_str()),
            ("file:///big.log", "big.log")
        );
        assert_eq!(link.description.as_deref(), Some("the whole log"));
        assert_eq!(blocks[6], Block::text("last"));
        assert_eq!(r.text(), "first\nlast");
        // The end event: the text, the image, and the rest summarized in order.
        let end = loop {
            let Some(rho_runtime::BusItem::Event(e)) = events.next().await else {
                continue;
            };
            if let rho_runtime::EventKind::ToolExecutionEnd { output, .. } = &e.kind {
                break serde_json::to_value(output).unwrap();
            }
        };
        assert_eq!(end["text"], "first\nlast", "{context}: {end}");
        assert_eq!(
            end["images"][0]["mime_type"], "image/png",
            "{context}: {end}"
        );
        let kinds: Vec<&str> = end["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["audio", "resource", "resource", "link"],
            "{context}: {end}"
        );
        host.shutdown().await;
    }
}

/// Answers questions asked together in one `answer_all`, recording each batch.
struct Together(Arc<std::sync::Mutex<Vec<Vec<Question>>>>);

#[async_trait::async_trait]
impl Answerer for Together {
    async fn answer(&self, _question: &Question, _call: &ToolCall) -> Reply {
        Reply::Declined("asked one at a time".into())
    }

    async fn answer_all(&self, questions: &[Question], _call: &ToolCall) -> Vec<Reply> {
        self.0.lock().unwrap().push(questions.to_vec());
        tokio::time::sleep(Duration::from_secs(2)).await;
        questions
            .iter()
            .map(|q| Reply::Accepted(json!({"confirm": q.key.as_deref() == Some("yes")})))
            .collect()
    }
}

/// `Ctx::ask_all`: the questions reach the answerer together, each with the key its tool gave
/// it, in one wait that moves the deadline once; the replies come back in order. Keys that are
/// not keys, or repeat, are declined before anyone is asked. In process and isolated (before:
/// a tool could ask only one question at a time, under no name of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_asked_together_reach_the_answerer_together_with_their_keys() {
    for isolate in [false, true] {
        let (host, _dir) = faults(isolate, RunnerConfig::default()).await;
        let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
        let options = CallOptions {
            answerer: Some(Arc::new(Together(batches.clone()))),
            ..CallOptions::default()
        };
        let args = json!({"message": "Go on?", "keys": ["yes", "no", "also.ok-1"]});
        let r = host.call_with(&call("1", "ask", args), &options).await;
        let context = format!("isolated: {isolate}: {}", r.text());
        assert_eq!(r.outcome, Outcome::Ok, "{context}");
        let report = replies(&r.text());
        let confirms: Vec<&Value> = (0..3)
            .map(|n| &report["replies"][n]["value"]["confirm"])
            .collect();
        assert_eq!(
            confirms,
            [&json!(true), &json!(false), &json!(false)],
            "{context}"
        );
        // One wait of 2 s against a 3 s timeout: the deadline moved by it, once.
        let left = report["replies"][2]["time_left_ms"].as_u64().unwrap();
        assert!(left > 2_000 && left <= 3_000, "{context}: left {left} ms");
        let batches = batches.lock().unwrap().clone();
        assert_eq!(batches.len(), 1, "{context}");
        let keys: Vec<Option<&str>> = batches[0].iter().map(|q| q.key.as_deref()).collect();
        assert_eq!(
            keys,
            [Some("yes"), Some("no"), Some("also.ok-1")],
            "{context}"
        );

        // A key that is none, and one asked twice: declined with the reason; the valid one is
        // asked.
        let args = json!({"message": "Go on?", "keys": ["yes", "not a key!", "yes"]});
        let r = host.call_with(&call("2", "ask", args), &options).await;
        let context = format!("isolated: {isolate}: {}", r.text());
        assert_eq!(r.outcome, Outcome::Ok, "{context}");
        let report = replies(&r.text());
        assert_eq!(report["replies"][0]["reply"], "accepted", "{context}");
        for n in [1, 2] {
            assert_eq!(report["replies"][n]["reply"], "declined", "{context}");
        }
        assert!(
            report["replies"][1]["value"]
                .as_str()
                .unwrap()
                .contains("key"),
            "{context}"
        );
        // At most 32 together: the 33rd is declined, the others asked.
        let keys: Vec<String> = (0..33).map(|n| format!("k{n}")).collect();
        let args = json!({"message": "Go on?", "keys": keys});
        let r = host.call_with(&call("3", "ask", args), &options).await;
        let context = format!("isolated: {isolate}: {}", r.text());
        let report = replies(&r.text());
        let kinds: Vec<&str> = (0..33)
            .map(|n| report["replies"][n]["reply"].as_str().unwrap())
            .collect();
        assert!(kinds[..32].iter().all(|k| *k == "accepted"), "{context}");
        assert_eq!(kinds[32], "declined", "{context}");
        host.shutdown().await;
    }
}
