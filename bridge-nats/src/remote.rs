//! [`NodeTools`]: the tools of `rho node`s, joined to a host's registry as a remote source.
//!
//! The source follows the nodes' announcements, each on its node's own subject (one naming
//! another node in its payload is passed over): a tool is offered while at least one node that
//! announced within the last 2 s serves it (a node that stops cleanly is dropped at once). When
//! nodes serve different versions of one tool, the version most nodes serve wins (ties: the
//! greater version string), and calls go only to nodes of that version, in turn, so every call of
//! a tool counts against one plugin version, whichever node runs it.
//!
//! A call (see [`crate::rpc`]) ends
//! - `unavailable` when no node listens for it (NATS answers "no responders");
//! - `crashed`, naming the node, when the node that accepted it falls silent for 1.5 s (it died,
//!   or was cut off), or when no node accepts it within 2 s;
//! - as the node's call ended otherwise: `ok`, `error`; a node's `crashed` or `timed_out` is
//!   `crashed` here (naming the node), a tool the node no longer has is `unavailable`.
//!
//! The calling host's timeout is the one that counts: when it passes (or the call is cancelled)
//! the node is told to stop the call.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::StreamExt;
use rho_runtime::{
    Answer, Failure, Image, Outcome, Output, RemoteCall, RemoteSource, RemoteTool, RemoteToolEntry,
    ToolCtx, ToolError, ToolSource,
};
use serde_json::Value;

use crate::rpc::{
    self, ANNOUNCE_ALL, Announce, CHUNK_HEADER, CallRequest, Cancel, Done, HELLO, NODE_GONE_AFTER,
    Offer, Reply, SILENT_AFTER,
};

/// How long a call waits for a node to accept it.
const ACCEPT_WAIT: Duration = Duration::from_secs(2);

/// The largest answer a node may send, bytes (in parts).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The largest announcement read, bytes.
const MAX_ANNOUNCE_BYTES: usize = 8 << 20;

/// The most tools taken from one node: past it, the rest of its announcement is set aside
/// (each tool's schemas are compiled when the list changes).
pub const MAX_TOOLS_PER_NODE: usize = 1024;

/// The tools of the `rho node`s reachable through a NATS client, as a [`ToolSource`]:
/// `Host::builder().source("nats://...", NodeTools::new(client))`.
pub struct NodeTools {
    client: async_nats::Client,
}

impl NodeTools {
    /// The nodes' tools through `client`.
    pub fn new(client: async_nats::Client) -> NodeTools {
        NodeTools { client }
    }
}

impl ToolSource for NodeTools {
    fn run(
        self: Box<Self>,
        source: RemoteSource,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(follow_nodes(self.client, source))
    }
}

/// A node as last heard.
struct Heard {
    at: Instant,
    tools: Vec<Offer>,
}

/// The nodes as last heard, shared with the tools (a call picks its node from them).
type Nodes = Arc<std::sync::RwLock<BTreeMap<String, Heard>>>;

async fn follow_nodes(client: async_nats::Client, source: RemoteSource) {
    let mut announcements = loop {
        match client.subscribe(ANNOUNCE_ALL).await {
            Ok(subscriber) => break subscriber,
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow the nodes yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let _ = client.publish(HELLO, Vec::new().into()).await;
    let shared: Nodes = Arc::default();
    let mut offered: Vec<(String, String)> = Vec::new();
    let mut check = tokio::time::interval(Duration::from_millis(250));
    let mut warned: std::collections::HashSet<String> = Default::default();
    loop {
        // Whether any node's set of (tool, version) changed: nodes announce every 500 ms, and
        // most announcements repeat the last.
        let changed = tokio::select! {
            message = announcements.next() => {
                let Some(message) = message else { return };
                if message.payload.len() > MAX_ANNOUNCE_BYTES {
                    continue;
                }
                let Ok(announce) = serde_json::from_slice::<Announce>(&message.payload) else {
                    continue;
                };
                // Only a node's own subject speaks for it (the server's permissions say who may
                // publish there).
                if rpc::announcer(message.subject.as_str()) != Some(announce.node.as_str()) {
                    let line = format!(
                        "an announcement on {} names node {:?}; passed over",
                        message.subject, announce.node
                    );
                    warn_once(&source, &mut warned, line);
                    continue;
                }
                let mut nodes = shared.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                let mut announce = announce;
                if announce.tools.len() > MAX_TOOLS_PER_NODE {
                    let line = format!(
                        "node {} offers {} tools; the first {MAX_TOOLS_PER_NODE} are taken",
                        announce.node,
                        announce.tools.len()
                    );
                    announce.tools.truncate(MAX_TOOLS_PER_NODE);
                    warn_once(&source, &mut warned, line);
                }
                if announce.leaving {
                    nodes.remove(&announce.node).is_some()
                } else {
                    let same = nodes
                        .get(&announce.node)
                        .is_some_and(|before| versions(&before.tools).eq(versions(&announce.tools)));
                    nodes.insert(announce.node, Heard { at: Instant::now(), tools: announce.tools });
                    !same
                }
            }
            _ = check.tick() => {
                let mut nodes = shared.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                let before = nodes.len();
                nodes.retain(|_, heard| heard.at.elapsed() < NODE_GONE_AFTER);
                nodes.len() != before
            }
        };
        if !changed {
            continue;
        }
        let chosen = choose(
            &shared
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let now: Vec<(String, String)> = chosen
            .iter()
            .map(|o| (o.spec.name.clone(), o.origin.clone()))
            .collect();
        if now == offered {
            continue;
        }
        offered = now;
        let entries = chosen
            .into_iter()
            .map(|offer| RemoteToolEntry {
                origin: offer.origin.clone(),
                tool: Arc::new(NodeTool {
                    client: client.clone(),
                    nodes: shared.clone(),
                    turn: std::sync::atomic::AtomicUsize::new(0),
                    tool: offer.spec.name.clone(),
                    origin: offer.origin.clone(),
                }),
                spec: offer.spec,
            })
            .collect();
        for refused in source.set_tools(entries) {
            warn_once(&source, &mut warned, refused);
        }
    }
}

/// Logs `line` and publishes it as a warning, the first time only.
fn warn_once(source: &RemoteSource, warned: &mut std::collections::HashSet<String>, line: String) {
    // Bounded: a publisher making up new lines cannot grow it without end.
    if warned.len() >= 4096 {
        warned.clear();
    }
    if warned.insert(line.clone()) {
        tracing::warn!(%line, "a node's offer set aside");
        source.bus().publish(
            None,
            rho_runtime::EventKind::Warning {
                subject: source.name().to_owned(),
                message: line,
            },
        );
    }
}

/// What a node's offers amount to for the host: each tool's name and version.
fn versions(tools: &[Offer]) -> impl Iterator<Item = (&str, &str)> {
    tools
        .iter()
        .map(|o| (o.spec.name.as_str(), o.origin.as_str()))
}

/// One offer per tool name: the version most nodes serve (ties: the greater version string).
fn choose(nodes: &BTreeMap<String, Heard>) -> Vec<Offer> {
    let mut by_tool: BTreeMap<&str, HashMap<&str, (usize, &Offer)>> = BTreeMap::new();
    for heard in nodes.values() {
        for offer in &heard.tools {
            let versions = by_tool.entry(offer.spec.name.as_str()).or_default();
            versions
                .entry(offer.origin.as_str())
                .or_insert((0, offer))
                .0 += 1;
        }
    }
    by_tool
        .into_values()
        .filter_map(|versions| {
            versions
                .into_iter()
                .max_by(|(a_origin, (a, _)), (b_origin, (b, _))| {
                    a.cmp(b).then_with(|| a_origin.cmp(b_origin))
                })
                .map(|(_, (_, offer))| offer.clone())
        })
        .collect()
}

/// One remote tool version, served by the nodes that announce it.
struct NodeTool {
    client: async_nats::Client,
    nodes: Nodes,
    /// Whose turn it is among the nodes serving it.
    turn: std::sync::atomic::AtomicUsize,
    tool: String,
    origin: String,
}

impl NodeTool {
    /// The nodes serving this version now, starting with the one whose turn it is.
    fn candidates(&self) -> Vec<String> {
        let nodes = self
            .nodes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut serving: Vec<String> = nodes
            .iter()
            .filter(|(_, heard)| {
                heard.at.elapsed() < NODE_GONE_AFTER
                    && heard
                        .tools
                        .iter()
                        .any(|o| o.spec.name == self.tool && o.origin == self.origin)
            })
            .map(|(name, _)| name.clone())
            .collect();
        if !serving.is_empty() {
            let turn = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let at = turn % serving.len();
            serving.rotate_left(at);
        }
        serving
    }
}

impl RemoteTool for NodeTool {
    /// The call is a NATS request: the future only waits on the network.
    fn never_blocks(&self) -> bool {
        true
    }

    fn call(&self, args: Arc<Value>, ctx: ToolCtx) -> RemoteCall {
        let client = self.client.clone();
        let candidates = self.candidates();
        let (tool, origin) = (self.tool.clone(), self.origin.clone());
        let request = CallRequest {
            call_id: ctx.call_id().to_owned(),
            tool: self.tool.clone(),
            arguments: Arc::unwrap_or_clone(args),
            time_left_ms: ctx.time_left().map(|d| d.as_millis() as u64),
            traceparent: ctx.traceparent().map(str::to_owned),
        };
        let what = format!("`{}` ({})", self.tool, self.origin);
        Box::pin(async move {
            // A node that heard nothing (NATS's "no responders": it just went) gives way to the
            // next; the call is sent to one node at a time.
            for node in &candidates {
                let subject = rpc::call_subject(node, &tool, &origin);
                match call(client.clone(), subject, node, request.clone(), &what, &ctx).await {
                    Err(Failure::Unavailable(_)) => continue,
                    ended => return ended,
                }
            }
            Err(Failure::Unavailable(format!("no node serves {what} now")))
        })
    }
}

/// Tells the node to stop the call if the call ends (or is dropped) before its answer.
struct CancelOnDrop {
    client: async_nats::Client,
    call_id: String,
    node: Option<String>,
    answered: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let (false, Some(node)) = (self.answered, self.node.take()) {
            let client = self.client.clone();
            let cancel = Cancel {
                call_id: std::mem::take(&mut self.call_id),
            };
            if let (Ok(payload), Ok(runtime)) = (
                serde_json::to_vec(&cancel),
                tokio::runtime::Handle::try_current(),
            ) {
                runtime.spawn(async move {
                    let _ = client
                        .publish(rpc::cancel_subject(&node), payload.into())
                        .await;
                    let _ = client.flush().await;
                });
            }
        }
    }
}

/// One call sent to node `chosen` on `subject`, to its end.
async fn call(
    client: async_nats::Client,
    subject: String,
    chosen: &str,
    request: CallRequest,
    what: &str,
    ctx: &ToolCtx,
) -> Result<Answer, Failure> {
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| Failure::crashed(format!("{what}: cannot wait for a node's answer: {e}")))?;
    let payload = serde_json::to_vec(&request)
        .map_err(|e| Failure::crashed(format!("{what}: the request cannot be encoded: {e}")))?;
    let mut guard = CancelOnDrop {
        client: client.clone(),
        call_id: request.call_id.clone(),
        node: None,
        answered: false,
    };
    // The W3C trace context in a header too, as tracing over messaging carries it; who the
    // call is for in one of its own.
    let mut headers = async_nats::HeaderMap::new();
    if let Some(traceparent) = &request.traceparent {
        headers.insert("traceparent", traceparent.as_str());
    }
    if let Some(principal) = ctx
        .principal()
        .and_then(|p| serde_json::to_string(p).ok())
        .and_then(|json| json.parse::<async_nats::HeaderValue>().ok())
    {
        headers.insert(rpc::PRINCIPAL_HEADER, principal);
    }
    client
        .publish_with_reply_and_headers(subject, inbox, headers, payload.into())
        .await
        .map_err(|e| Failure::Unavailable(format!("{what}: cannot reach NATS: {e}")))?;
    let mut parts: Vec<u8> = Vec::new();
    loop {
        let wait = if guard.node.is_some() {
            SILENT_AFTER
        } else {
            ACCEPT_WAIT
        };
        let message = match tokio::time::timeout(wait, replies.next()).await {
            Ok(Some(message)) => message,
            Ok(None) => {
                return Err(Failure::crashed(format!(
                    "{what}: the reply subscription ended"
                )));
            }
            Err(_) => {
                return Err(Failure::crashed(match &guard.node {
                    Some(node) => format!(
                        "node {node} stopped answering during the call of {what}: nothing for {} ms (it died or was cut off)",
                        wait.as_millis()
                    ),
                    None => format!(
                        "no node accepted the call of {what} within {} ms",
                        wait.as_millis()
                    ),
                }));
            }
        };
        if message.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            return Err(Failure::Unavailable(format!("no node serves {what} now")));
        }
        let node = guard.node.clone().unwrap_or_else(|| "?".into());
        let part = message
            .headers
            .as_ref()
            .and_then(|h| h.get(CHUNK_HEADER))
            .and_then(|v| {
                let (index, count) = v.as_str().split_once('/')?;
                Some((index.parse::<usize>().ok()?, count.parse::<usize>().ok()?))
            });
        let reply = match part {
            Some((index, count)) => {
                parts.extend_from_slice(&message.payload);
                if parts.len() > MAX_ANSWER_BYTES {
                    return Err(Failure::crashed(format!(
                        "node {node} sent an answer over {MAX_ANSWER_BYTES} bytes for {what}"
                    )));
                }
                if index < count {
                    continue;
                }
                serde_json::from_slice::<Reply>(&std::mem::take(&mut parts))
            }
            None => serde_json::from_slice::<Reply>(&message.payload),
        };
        let reply = reply.map_err(|e| {
            Failure::crashed(format!(
                "node {node} broke the protocol answering {what}: {e}"
            ))
        })?;
        match reply {
            Reply::Accepted { node } if node == chosen => guard.node = Some(node),
            Reply::Accepted { node } => {
                return Err(Failure::crashed(format!(
                    "node {node} answered the call of {what} sent to node {chosen}"
                )));
            }
            Reply::Update { text } => ctx.update(&text),
            Reply::Beat => {}
            Reply::Done(done) => {
                guard.answered = true;
                return answer(done, &node);
            }
        }
    }
}

/// The call's result from the node's end of it.
fn answer(done: Done, node: &str) -> Result<Answer, Failure> {
    match done.outcome {
        Outcome::Ok => {
            // Refused before any image is decoded (the runner holds every answer to the limit).
            if done.images.len() > rho_runtime::MAX_IMAGES {
                return Err(Failure::Tool(ToolError::new(format!(
                    "node {node} answered with {} images; an answer may carry at most {}",
                    done.images.len(),
                    rho_runtime::MAX_IMAGES
                ))));
            }
            let mut images = Vec::new();
            for image in done.images {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(image.base64)
                    .map_err(|e| {
                        Failure::crashed(format!(
                            "node {node} sent an image that is not base64: {e}"
                        ))
                    })?;
                images.push(Image::new(image.mime_type, bytes));
            }
            let output = match images.len() {
                0 => Output::Text(done.text),
                1 => Output::Image {
                    image: images.remove(0),
                    text: done.text,
                },
                _ => Output::Images {
                    images,
                    text: done.text,
                },
            };
            Ok(Answer {
                output,
                structured: done.structured,
                details: done.details,
            })
        }
        Outcome::Crashed | Outcome::TimedOut => {
            Err(Failure::crashed(format!("on node {node}: {}", done.text)))
        }
        Outcome::UnknownTool | Outcome::Quarantined | Outcome::Unavailable => Err(
            Failure::Unavailable(format!("on node {node}: {}", done.text)),
        ),
        _ => {
            let mut error = ToolError::new(done.text);
            error.details = done.details;
            Err(Failure::Tool(error))
        }
    }
}
