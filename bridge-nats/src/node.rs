//! [`Node`]: a host's tools offered to other hosts over NATS (`rho node`).
//!
//! A node serves each of its tools as a NATS service endpoint (service `rho-node`) on a subject
//! of its own and the tool's version ([`crate::rpc::call_subject`]); hosts share the calls of a
//! version among the nodes serving it. It announces its tools on its own subject every 500 ms and
//! at once when they change (a plugin loaded, reloaded or removed, a tool quarantined or
//! restored): hosts following nodes drop one that falls silent. Each call runs through the node's
//! own host (its plugin directories, sandbox, timeouts and gate), with the node's name, updates
//! and a beat every 200 ms sent back to the caller, and stops when the caller cancels it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_nats::service::ServiceExt;
use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use rho_runtime::{CallOptions, EventType, Filter, Host, ToolCall};
use tokio_util::sync::CancellationToken;

use crate::rpc::{
    self, ANNOUNCE_EVERY, Announce, BEAT_EVERY, CHUNK_HEADER, CallRequest, Cancel, Done, HELLO,
    Offer, QUEUE, Reply, WireImage,
};
use crate::{HostName, NatsError};

/// A host's tools served over NATS until [`Node::stop`] (or drop).
pub struct Node {
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// The calls running on this node, by the caller's call id: how a cancel reaches them.
type Running = Arc<Mutex<HashMap<String, CancellationToken>>>;

impl Node {
    /// Starts serving `host`'s tools as the node `name` through `client` (which must reach the
    /// server now: the service is registered at once).
    pub async fn start(
        host: &Host,
        client: async_nats::Client,
        name: HostName,
    ) -> Result<Node, NatsError> {
        let failed = |e: &dyn std::fmt::Display| NatsError::JetStream(format!("node {name}: {e}"));
        let service = client
            .service_builder()
            .description("rho: the tools of a rho host")
            .queue_group(QUEUE)
            .start("rho-node", env!("CARGO_PKG_VERSION"))
            .await
            .map_err(|e| failed(&e))?;
        let cancels = client
            .subscribe(rpc::cancel_subject(name.as_str()))
            .await
            .map_err(|e| failed(&e))?;
        let hellos = client.subscribe(HELLO).await.map_err(|e| failed(&e))?;
        let stop = CancellationToken::new();
        let serving = Serving {
            host: host.clone(),
            client,
            name: name.to_string(),
            service,
            running: Running::default(),
            endpoints: HashMap::new(),
        };
        let task = tokio::spawn(serving.run(cancels, hellos, stop.clone()));
        Ok(Node {
            stop,
            task: Some(task),
        })
    }

    /// Stops serving: says so to the hosts (they drop this node at once), ends the endpoints;
    /// calls running finish on their own. Within 2 s: a node whose server is gone stops without
    /// saying so (the hosts drop it when its beats stop).
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(mut task) = self.task.take() {
            // Saying it leaves needs the server: one that is gone cannot hold the node.
            if tokio::time::timeout(STOP_WITHIN, &mut task).await.is_err() {
                tracing::warn!("the node's NATS server did not take its leaving within 2 s");
                task.abort();
            }
        }
    }
}

/// How long [`Node::stop`] waits for the node to say it leaves.
const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The node's task and what it holds.
struct Serving {
    host: Host,
    client: async_nats::Client,
    name: String,
    service: async_nats::service::Service,
    running: Running,
    /// One endpoint task per served subject, with its stop.
    endpoints: HashMap<String, CancellationToken>,
}

impl Serving {
    async fn run(
        mut self,
        mut cancels: async_nats::Subscriber,
        mut hellos: async_nats::Subscriber,
        stop: CancellationToken,
    ) {
        let mut changes = self.host.subscribe_filtered(Filter::default().types([
            EventType::PluginLoaded,
            EventType::PluginReloaded,
            EventType::PluginRemoved,
            EventType::ToolQuarantined,
            EventType::ToolRestored,
        ]));
        let mut tick = tokio::time::interval(ANNOUNCE_EVERY);
        let mut offers = self.sync_endpoints().await;
        loop {
            tokio::select! {
                _ = changes.next() => {
                    offers = self.sync_endpoints().await;
                    self.announce(&offers, false).await;
                }
                _ = tick.tick() => self.announce(&offers, false).await,
                Some(_) = hellos.next() => self.announce(&offers, false).await,
                Some(message) = cancels.next() => {
                    if let Ok(cancel) = serde_json::from_slice::<Cancel>(&message.payload) {
                        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
                        if let Some(token) = running.get(&cancel.call_id) {
                            token.cancel();
                        }
                    }
                }
                () = stop.cancelled() => break,
            }
        }
        self.announce(&[], true).await;
        for (_, stop) in self.endpoints.drain() {
            stop.cancel();
        }
        let _ = self.client.flush().await;
    }

    /// What the node serves now (tools not quarantined here, with their plugin versions), with
    /// an endpoint for each and none for anything else.
    async fn sync_endpoints(&mut self) -> Vec<Offer> {
        let stats = self.host.stats();
        let offers: Vec<Offer> = self
            .host
            .tools()
            .into_iter()
            .filter_map(|spec| {
                let stat = stats.iter().find(|s| s.tool == spec.name)?;
                if stat.quarantine.is_some() {
                    return None;
                }
                // The version is what nodes share, not the file.
                let origin = stat.origin.release();
                Some(Offer { spec, origin })
            })
            .collect();
        let wanted: HashMap<String, &Offer> = offers
            .iter()
            .map(|o| (rpc::call_subject(&self.name, &o.spec.name, &o.origin), o))
            .collect();
        self.endpoints.retain(|subject, stop| {
            let keep = wanted.contains_key(subject);
            if !keep {
                stop.cancel();
            }
            keep
        });
        for (subject, offer) in wanted {
            if self.endpoints.contains_key(&subject) {
                continue;
            }
            let endpoint = self
                .service
                .endpoint_builder()
                .name(&offer.spec.name)
                .add(subject.clone())
                .await;
            match endpoint {
                Ok(endpoint) => {
                    let stop = CancellationToken::new();
                    tokio::spawn(serve_endpoint(
                        endpoint,
                        self.host.clone(),
                        self.client.clone(),
                        self.name.clone(),
                        self.running.clone(),
                        stop.clone(),
                    ));
                    self.endpoints.insert(subject, stop);
                }
                Err(e) => {
                    tracing::warn!(tool = %offer.spec.name, error = %e, "cannot serve a tool over NATS");
                }
            }
        }
        offers
    }

    async fn announce(&self, offers: &[Offer], leaving: bool) {
        let announce = Announce {
            node: self.name.clone(),
            tools: offers.to_vec(),
            leaving,
        };
        if let Ok(payload) = serde_json::to_vec(&announce) {
            let _ = self
                .client
                .publish(rpc::announce_subject(&self.name), payload.into())
                .await;
        }
    }
}

/// Serves one endpoint's calls, each in a task of its own, until `stop`.
async fn serve_endpoint(
    mut endpoint: async_nats::service::endpoint::Endpoint,
    host: Host,
    client: async_nats::Client,
    node: String,
    running: Running,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            request = endpoint.next() => match request {
                Some(request) => {
                    tokio::spawn(serve_call(
                        request,
                        host.clone(),
                        client.clone(),
                        node.clone(),
                        running.clone(),
                    ));
                }
                None => return,
            },
            () = stop.cancelled() => {
                let _ = endpoint.stop().await;
                return;
            }
        }
    }
}

/// Runs one call and answers it on its reply subject.
async fn serve_call(
    request: async_nats::service::Request,
    host: Host,
    client: async_nats::Client,
    node: String,
    running: Running,
) {
    let Some(reply_to) = request.message.reply.clone() else {
        return;
    };
    let send = async |reply: &Reply| {
        if let Ok(payload) = serde_json::to_vec(reply) {
            let _ = client.publish(reply_to.clone(), payload.into()).await;
        }
    };
    send(&Reply::Accepted { node: node.clone() }).await;
    let call: CallRequest = match serde_json::from_slice(&request.message.payload) {
        Ok(call) => call,
        Err(e) => {
            let done = Done {
                outcome: rho_runtime::Outcome::InvalidArguments,
                text: format!("node {node}: the call request is not valid: {e}"),
                images: Vec::new(),
                structured: None,
                details: None,
            };
            send_done(&client, &reply_to, &done).await;
            return;
        }
    };
    // The caller's trace context: its `traceparent` header, else the request's field.
    let traceparent = request
        .message
        .headers
        .as_ref()
        .and_then(|h| h.get("traceparent"))
        .map(|v| v.as_str().to_owned())
        .or_else(|| call.traceparent.clone());
    // Who the call is for, as the calling host told its caller apart (only hosts may publish
    // calls: see `rpc`); a header that is not a principal refuses the call.
    let principal = match request
        .message
        .headers
        .as_ref()
        .and_then(|h| h.get(rpc::PRINCIPAL_HEADER))
        .map(|v| serde_json::from_str::<rho_runtime::Principal>(v.as_str()))
    {
        None => None,
        Some(Ok(principal)) => Some(Arc::new(principal)),
        Some(Err(e)) => {
            let done = Done {
                outcome: rho_runtime::Outcome::Blocked,
                text: format!(
                    "node {node}: the call's {} header is not a principal: {e}",
                    rpc::PRINCIPAL_HEADER
                ),
                images: Vec::new(),
                structured: None,
                details: None,
            };
            send_done(&client, &reply_to, &done).await;
            return;
        }
    };
    let cancel = CancellationToken::new();
    running
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(call.call_id.clone(), cancel.clone());
    let (updates, mut pending) = tokio::sync::mpsc::channel::<String>(256);
    let options = CallOptions {
        cancel: Some(cancel),
        traceparent,
        on_update: Some(Arc::new(move |partial: &str| {
            let _ = updates.try_send(partial.to_owned());
        })),
        via: rho_runtime::Via::Nats,
        ..CallOptions::default()
    };
    let mut tool_call = ToolCall::new(
        format!("{}@{node}", call.call_id),
        call.tool.clone(),
        call.arguments,
    );
    tool_call.principal = principal;
    let result = host.call_with(&tool_call, &options);
    tokio::pin!(result);
    let mut beat = tokio::time::interval(BEAT_EVERY);
    let result = loop {
        tokio::select! {
            biased;
            result = &mut result => break result,
            Some(text) = pending.recv() => send(&Reply::Update { text }).await,
            _ = beat.tick() => send(&Reply::Beat).await,
        }
    };
    while let Ok(text) = pending.try_recv() {
        send(&Reply::Update { text }).await;
    }
    running
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&call.call_id);
    let done = Done {
        outcome: result.outcome,
        text: result.text().into_owned(),
        images: result
            .output
            .images()
            .iter()
            .map(|image| WireImage {
                mime_type: image.mime_type.clone(),
                base64: base64::engine::general_purpose::STANDARD.encode(&image.bytes),
            })
            .collect(),
        structured: result.structured,
        details: result.details,
    };
    send_done(&client, &reply_to, &done).await;
}

/// Sends `done`: as one message when it fits, else in parts numbered by [`CHUNK_HEADER`].
async fn send_done(client: &async_nats::Client, reply_to: &async_nats::Subject, done: &Done) {
    let Ok(payload) = serde_json::to_vec(&Reply::Done(done.clone())) else {
        return;
    };
    let room = client
        .server_info()
        .max_payload
        .saturating_sub(4096)
        .max(4096);
    if payload.len() <= room {
        let _ = client.publish(reply_to.clone(), payload.into()).await;
        return;
    }
    let payload = Bytes::from(payload);
    let count = payload.len().div_ceil(room);
    for (index, part) in payload.chunks(room).enumerate() {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(CHUNK_HEADER, format!("{}/{count}", index + 1).as_str());
        let _ = client
            .publish_with_headers(reply_to.clone(), headers, payload.slice_ref(part))
            .await;
    }
}
