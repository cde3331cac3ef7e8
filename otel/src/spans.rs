//! From a host's events to spans and metrics: the export task.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::metrics::Histogram;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use rho_runtime::{Event, EventKind, Host, Outcome, Runs, ServedBy};
use tokio::sync::mpsc;

use crate::Item;

/// The most calls followed at once (a start whose end was dropped is forgotten past it).
const MAX_OPEN: usize = 65_536;

/// The most spans sent in one export.
const BATCH: usize = 512;

/// How often what gathered is exported, and how often a status may be published.
const EVERY: Duration = Duration::from_secs(1);

/// How long the exporter lets events gather after the first of a burst woke it (the queue half
/// full wakes it at once): while calls run, it wakes once per this, not once per event.
pub(crate) const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// The longest text attribute (arguments, results), bytes.
const MAX_TEXT: usize = 8 << 10;

/// A call between its start and its end.
struct OpenCall {
    tool: String,
    started_ms: u64,
    traceparent: Option<String>,
    args: Option<String>,
    gate_wait_ms: Option<u64>,
}

/// Where a tool comes from, as spans say it.
struct Origin {
    plugin: Option<(String, String)>,
    source: &'static str,
    isolation: &'static str,
}

impl Origin {
    /// The span's words for what served a call.
    fn of(ServedBy { origin, runs }: &ServedBy) -> Origin {
        match origin {
            rho_runtime::Origin::Host => Origin {
                plugin: None,
                source: "native",
                isolation: "in_process",
            },
            rho_runtime::Origin::Plugin {
                plugin,
                version,
                file,
            } => {
                let (source, isolation) = match runs {
                    _ if file.ends_with(".wasm") => ("wasm", "wasm"),
                    Runs::Worker => ("plugin", "process"),
                    Runs::Host | Runs::Source => ("plugin", "in_process"),
                };
                Origin {
                    plugin: Some((plugin.clone(), version.clone())),
                    source,
                    isolation,
                }
            }
            rho_runtime::Origin::Remote { offered, via } => {
                let (source, isolation) = if via.starts_with("mcp:") {
                    ("mcp_server", "process")
                } else {
                    ("remote_node", "remote")
                };
                let plugin = match offered.split_once('@') {
                    Some((name, version)) => Some((name.to_owned(), version.to_owned())),
                    None => Some((via.clone(), String::new())),
                };
                Origin {
                    plugin,
                    source,
                    isolation,
                }
            }
        }
    }
}

/// The export task: events in, spans out in batches, metrics recorded.
pub(crate) struct Worker {
    pub(crate) host: Host,
    pub(crate) exporter: opentelemetry_otlp::SpanExporter,
    /// The exporter of the last batch, at exit: one try, bounded by the exit's time.
    pub(crate) last_exporter: opentelemetry_otlp::SpanExporter,
    pub(crate) meters: SdkMeterProvider,
    pub(crate) tool_duration: Histogram<f64>,
    pub(crate) received: mpsc::Receiver<Item>,
    pub(crate) wake: Arc<tokio::sync::Notify>,
    pub(crate) dropped: Arc<AtomicU64>,
    pub(crate) destination: String,
    pub(crate) export_arguments: bool,
}

/// How the export stands, for `export_status` events.
#[derive(Default)]
struct Standing {
    exported: u64,
    connected: Option<bool>,
    reported_connected: Option<bool>,
    reported_dropped: u64,
    reported_at: Option<Instant>,
    reason: Option<String>,
}

impl Worker {
    /// Runs until told to stop; what did not go out by then, and why.
    pub(crate) async fn run(mut self) -> crate::ExitReport {
        let mut open: HashMap<String, OpenCall> = HashMap::new();
        let mut batch: Vec<SpanData> = Vec::new();
        let mut standing = Standing::default();
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Idle, the task sleeps until an event comes (one wake-up), then lets the burst
            // gather for DRAIN_EVERY (or until the queue is half full) and takes it in one go:
            // while calls run, one wake-up per DRAIN_EVERY, not one per event.
            let first = tokio::select! {
                item = self.received.recv() => Some(item),
                _ = tick.tick() => None,
            };
            let mut stop = match first {
                None => {
                    self.flush(&mut batch, &mut standing).await;
                    self.report(&mut standing);
                    continue;
                }
                Some(None) => true,
                Some(Some(item)) => self.take(item, &mut open, &mut batch),
            };
            if !stop {
                tokio::select! {
                    () = tokio::time::sleep(DRAIN_EVERY) => {}
                    () = self.wake.notified() => {}
                }
            }
            while !stop {
                match self.received.try_recv() {
                    Ok(item) => stop = self.take(item, &mut open, &mut batch),
                    Err(mpsc::error::TryRecvError::Disconnected) => stop = true,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                }
                if batch.len() >= BATCH {
                    self.flush(&mut batch, &mut standing).await;
                }
            }
            if stop {
                break;
            }
        }
        // What came before the stop, in one try, then the metrics.
        while let Ok(item) = self.received.try_recv() {
            self.take(item, &mut open, &mut batch);
        }
        if !batch.is_empty() {
            // Counted lost unless the one try goes out before the exit's bound cuts it short.
            let n = batch.len() as u64;
            self.dropped.fetch_add(n, Ordering::Relaxed);
            match self.last_exporter.export(std::mem::take(&mut batch)).await {
                Ok(()) => {
                    self.dropped.fetch_sub(n, Ordering::Relaxed);
                    standing.exported += n;
                    standing.reason = None;
                }
                Err(e) => standing.reason = Some(e.to_string()),
            }
        }
        let _ = self.exporter.shutdown();
        let _ = self.last_exporter.shutdown();
        let meters = self.meters.clone();
        // The reader's final export blocks on the runtime's tasks: off this one.
        let _ = tokio::task::spawn_blocking(move || meters.shutdown()).await;
        crate::ExitReport {
            dropped: self.dropped.load(Ordering::Relaxed),
            reason: standing.reason.take(),
            ..crate::ExitReport::default()
        }
    }

    /// One queued item into `batch` (a call's span at its end, a server's span as it is);
    /// `true` for the stop.
    fn take(
        &self,
        item: Item,
        open: &mut HashMap<String, OpenCall>,
        batch: &mut Vec<SpanData>,
    ) -> bool {
        match item {
            Item::Event(event) => {
                if let Some(span) = self.follow(&event, open) {
                    batch.push(span);
                }
                false
            }
            Item::Span(span) => {
                batch.push(*span);
                false
            }
            Item::Stop => true,
        }
    }

    /// One event: a call's span when it is its end.
    fn follow(&self, event: &Event, open: &mut HashMap<String, OpenCall>) -> Option<SpanData> {
        match &event.kind {
            EventKind::ToolExecutionStart {
                call_id,
                tool,
                args,
                traceparent,
                ..
            } => {
                // A start whose end was dropped (the queue full) would stay for ever: when full,
                // the oldest eighth goes.
                if open.len() >= MAX_OPEN {
                    let mut ages: Vec<u64> = open.values().map(|c| c.started_ms).collect();
                    let (_, cut, _) = ages.select_nth_unstable(MAX_OPEN / 8);
                    let cut = *cut;
                    open.retain(|_, call| call.started_ms > cut);
                }
                {
                    open.insert(
                        call_id.clone(),
                        OpenCall {
                            tool: tool.clone(),
                            started_ms: event.ts_ms,
                            traceparent: traceparent.clone(),
                            args: self.export_arguments.then(|| cut(args.to_string())),
                            gate_wait_ms: None,
                        },
                    );
                }
                None
            }
            EventKind::ToolRunning { call_id, .. } => {
                if let Some(call) = open.get_mut(call_id) {
                    call.gate_wait_ms = Some(event.ts_ms.saturating_sub(call.started_ms));
                }
                None
            }
            EventKind::ToolExecutionEnd {
                call_id,
                outcome,
                output,
                duration_ms,
                served_by,
                principal,
                decision,
                ..
            } => {
                let call = open.remove(call_id)?;
                // What served the call as it was when it ran (the event says so): spans built
                // after the host is gone are as true as those built at once.
                let origin = served_by.as_ref().map(Origin::of);
                let result = self.export_arguments.then(|| cut(output.text.clone()));
                let mut span =
                    self.call_span(call_id, call, *outcome, *duration_ms, origin, result);
                if let Some(principal) = principal {
                    enduser(&mut span.attributes, principal);
                }
                if let Some(decision) = decision {
                    span.attributes
                        .push(KeyValue::new("rho.decision", decision.as_str()));
                    if !decision.policies().is_empty() {
                        let ids = decision.policies().join(",");
                        span.attributes.push(KeyValue::new("rho.policy.ids", ids));
                    }
                }
                Some(span)
            }
            _ => None,
        }
    }

    /// The `execute_tool` span of a call that ended, and its duration recorded.
    fn call_span(
        &self,
        call_id: &str,
        call: OpenCall,
        outcome: Outcome,
        duration_ms: f64,
        origin: Option<Origin>,
        result: Option<String>,
    ) -> SpanData {
        let outcome_name = outcome_name(outcome);
        let error_type = match outcome {
            Outcome::Ok => None,
            Outcome::Error => Some("tool_error"),
            _ => Some(outcome_name),
        };
        let mut metric = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", call.tool.clone()),
        ];
        if let Some(error) = error_type {
            metric.push(KeyValue::new("error.type", error));
        }
        self.tool_duration.record(duration_ms / 1000.0, &metric);
        let mut attributes = metric;
        attributes.extend([
            KeyValue::new("gen_ai.tool.call.id", call_id.to_owned()),
            KeyValue::new("gen_ai.tool.type", "function"),
            KeyValue::new("rho.outcome", outcome_name),
        ]);
        // A call no tool served (an unknown tool) says nothing of a source.
        if let Some(origin) = origin {
            attributes.push(KeyValue::new("rho.source", origin.source));
            attributes.push(KeyValue::new("rho.isolation", origin.isolation));
            if let Some((name, version)) = origin.plugin {
                attributes.push(KeyValue::new("rho.plugin.name", name));
                attributes.push(KeyValue::new("rho.plugin.version", version));
            }
        }
        if let Some(wait) = call.gate_wait_ms {
            attributes.push(KeyValue::new("rho.gate.wait_ms", wait as i64));
        }
        if let Some(args) = call.args {
            attributes.push(KeyValue::new("gen_ai.tool.call.arguments", args));
        }
        if let Some(result) = result {
            attributes.push(KeyValue::new("gen_ai.tool.call.result", result));
        }
        let start = UNIX_EPOCH + Duration::from_millis(call.started_ms);
        let end = start + Duration::from_secs_f64(duration_ms.max(0.0) / 1000.0);
        let status = match error_type {
            None => Status::Unset,
            Some(error) => Status::error(error.to_owned()),
        };
        span_data(
            format!("execute_tool {}", call.tool),
            SpanKind::Internal,
            call.traceparent.as_deref(),
            new_span_id(),
            (start, end),
            attributes,
            status,
        )
    }

    /// Exports what gathered; a failure drops it, counted.
    async fn flush(&mut self, batch: &mut Vec<SpanData>, standing: &mut Standing) {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        let n = spans.len() as u64;
        match self.exporter.export(spans).await {
            Ok(()) => {
                standing.exported += n;
                standing.connected = Some(true);
                standing.reason = None;
            }
            Err(e) => {
                self.dropped.fetch_add(n, Ordering::Relaxed);
                standing.connected = Some(false);
                standing.reason = Some(e.to_string());
                tracing::debug!(destination = %self.destination, "spans not exported: {e}");
            }
        }
    }

    /// An `export_status` event when the link went down or came back, or more was dropped
    /// (once a second at most: a change meanwhile is reported at the next chance).
    fn report(&self, standing: &mut Standing) {
        let dropped = self.dropped.load(Ordering::Relaxed);
        // The first report is of a link lost (a working one needs no word).
        let changed_link = match (standing.reported_connected, standing.connected) {
            (None, Some(false)) => true,
            (Some(before), Some(now)) => before != now,
            _ => false,
        };
        let due = standing.reported_at.is_none_or(|at| at.elapsed() >= EVERY);
        if !(dropped > standing.reported_dropped || changed_link) || !due {
            return;
        }
        standing.reported_dropped = dropped;
        standing.reported_connected = standing.connected;
        standing.reported_at = Some(Instant::now());
        self.host.bus().publish(
            None,
            EventKind::ExportStatus {
                exporter: self.destination.clone(),
                connected: standing.connected.unwrap_or(false),
                confirmed: standing.exported,
                behind: self.received.len() as u64,
                reason: standing.reason.clone(),
                dropped,
            },
        );
    }
}

/// A span of an MCP server (kind SERVER): `{method} {target}`, with the conventions' attributes
/// (`mcp.method.name`, `jsonrpc.request.id`, `mcp.protocol.version`, `mcp.session.id`,
/// `network.transport`, `error.type`), parented by the request's `_meta.traceparent`.
#[derive(Debug, Clone)]
pub struct ServerSpan {
    /// The MCP method (`tools/call`, `tools/list`).
    pub method: String,
    /// What it acts on (the tool's name), if anything.
    pub target: Option<String>,
    /// The request's id.
    pub request_id: String,
    /// The protocol revision of the request.
    pub protocol_version: Option<String>,
    /// The MCP session, if any.
    pub session_id: Option<String>,
    /// `pipe` (stdio) or `tcp` (HTTP).
    pub transport: &'static str,
    /// Who sent it (`enduser.id`, `enduser.scope`), if known.
    pub principal: Option<std::sync::Arc<rho_runtime::Principal>>,
    /// The request's trace context, if it carried one.
    pub parent: Option<String>,
    /// This span's id ([`ServerSpan::begin`] makes one): calls made for the request are its
    /// children ([`ServerSpan::traceparent`]).
    pub span_id: [u8; 8],
    /// The trace it belongs to (the parent's, else a new one).
    pub trace_id: [u8; 16],
    /// The trace flags it passes on (the parent's: its sampling decision; sampled without one).
    pub flags: u8,
    /// When the request came.
    pub started: SystemTime,
    /// When the answer went, once it did.
    pub ended: Option<SystemTime>,
    /// `tool_error` for a result with `isError`, a JSON-RPC error's code, else nothing.
    pub error_type: Option<String>,
}

impl ServerSpan {
    /// The span of a request of `method` on `target` that arrives now, parented by `parent`
    /// (a W3C `traceparent`, taken only when valid).
    pub fn begin(method: &str, target: Option<&str>, parent: Option<&str>) -> ServerSpan {
        let parsed = parent.and_then(parse_traceparent);
        let parent = parent.filter(|_| parsed.is_some()).map(str::to_owned);
        let trace_id = parsed.map_or_else(new_trace_id, |(trace, _, _)| trace.to_bytes());
        let flags = parsed.map_or(TraceFlags::SAMPLED, |(_, _, flags)| flags);
        ServerSpan {
            method: method.to_owned(),
            target: target.map(str::to_owned),
            request_id: String::new(),
            protocol_version: None,
            session_id: None,
            transport: "pipe",
            principal: None,
            parent,
            span_id: new_span_id().to_bytes(),
            trace_id,
            flags: flags.to_u8(),
            started: SystemTime::now(),
            ended: None,
            error_type: None,
        }
    }

    /// The span, its request answered now, with `error_type` (see [`ServerSpan::error_type`]).
    pub fn ended(mut self, error_type: Option<String>) -> ServerSpan {
        self.ended = Some(SystemTime::now());
        self.error_type = error_type;
        self
    }

    /// The trace context of this span, for what the request calls (a W3C `traceparent`).
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            TraceId::from_bytes(self.trace_id),
            SpanId::from_bytes(self.span_id),
            self.flags
        )
    }

    /// The span's data, its duration in seconds and the metric's attributes.
    pub(crate) fn into_data(self) -> (SpanData, f64, Vec<KeyValue>) {
        let end = self.ended.unwrap_or_else(SystemTime::now);
        let seconds = end
            .duration_since(self.started)
            .unwrap_or_default()
            .as_secs_f64();
        let mut metric = vec![
            KeyValue::new("mcp.method.name", self.method.clone()),
            KeyValue::new("network.transport", self.transport),
        ];
        if let Some(version) = &self.protocol_version {
            metric.push(KeyValue::new("mcp.protocol.version", version.clone()));
        }
        if let Some(target) = &self.target {
            metric.push(KeyValue::new("gen_ai.tool.name", target.clone()));
        }
        if let Some(error) = &self.error_type {
            metric.push(KeyValue::new("error.type", error.clone()));
        }
        let mut attributes = metric.clone();
        attributes.push(KeyValue::new("jsonrpc.request.id", self.request_id.clone()));
        if let Some(session) = &self.session_id {
            attributes.push(KeyValue::new("mcp.session.id", session.clone()));
        }
        if let Some(principal) = &self.principal {
            enduser(&mut attributes, principal);
        }
        let name = match &self.target {
            Some(target) => format!("{} {target}", self.method),
            None => self.method.clone(),
        };
        let status = match &self.error_type {
            Some(error) => Status::error(error.clone()),
            None => Status::Unset,
        };
        let mut data = span_data(
            name,
            SpanKind::Server,
            self.parent.as_deref(),
            SpanId::from_bytes(self.span_id),
            (self.started, end),
            attributes,
            status,
        );
        // A request without a parent starts the trace its calls join.
        if self.parent.is_none() {
            data.span_context = SpanContext::new(
                TraceId::from_bytes(self.trace_id),
                SpanId::from_bytes(self.span_id),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            );
        }
        (data, seconds, metric)
    }
}

/// `enduser.id` and, when it has any, `enduser.scope` (space-separated) of `principal`.
fn enduser(attributes: &mut Vec<KeyValue>, principal: &rho_runtime::Principal) {
    attributes.push(KeyValue::new("enduser.id", principal.id.clone()));
    if !principal.scopes.is_empty() {
        attributes.push(KeyValue::new("enduser.scope", principal.scopes.join(" ")));
    }
}

/// A span's data.
fn span_data(
    name: String,
    kind: SpanKind,
    parent: Option<&str>,
    span_id: SpanId,
    (start, end): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    status: Status,
) -> SpanData {
    let parsed = parent.and_then(parse_traceparent);
    let (trace_id, parent_span_id, flags) = match parsed {
        Some((trace, parent, flags)) => (trace, parent, flags),
        None => (
            TraceId::from_bytes(new_trace_id()),
            SpanId::INVALID,
            TraceFlags::SAMPLED,
        ),
    };
    SpanData {
        span_context: SpanContext::new(trace_id, span_id, flags, false, TraceState::default()),
        parent_span_id,
        parent_span_is_remote: parsed.is_some(),
        span_kind: kind,
        name: Cow::Owned(name),
        start_time: start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope().clone(),
    }
}

/// The instrumentation scope of every span: `rho` and its version.
fn scope() -> &'static InstrumentationScope {
    static SCOPE: std::sync::OnceLock<InstrumentationScope> = std::sync::OnceLock::new();
    SCOPE.get_or_init(|| {
        InstrumentationScope::builder("rho")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build()
    })
}

/// The trace id, parent span id and flags of a W3C `traceparent`.
fn parse_traceparent(text: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    // As the runner checks it: lowercase hex, version `00` to `fe`, ids not all zero.
    if !rho_runtime::is_valid_traceparent(text) {
        return None;
    }
    let parts: Vec<&str> = text.split('-').collect();
    let [_, trace, parent, flags] = parts.as_slice() else {
        return None;
    };
    let trace = TraceId::from_hex(trace)
        .ok()
        .filter(|t| *t != TraceId::INVALID)?;
    let parent = SpanId::from_hex(parent)
        .ok()
        .filter(|s| *s != SpanId::INVALID)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace, parent, TraceFlags::new(flags)))
}

/// `N` random bytes, never all zero.
///
/// Ids identify, they guard nothing: a SplitMix64 stream per thread, seeded once from the
/// system's randomness (the time and thread without it), not a system call per span.
fn random<const N: usize>() -> [u8; N] {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let mut seed = [0u8; 8];
            if getrandom::fill(&mut seed).is_err() {
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                static THREADS: AtomicU64 = AtomicU64::new(0);
                let thread = THREADS.fetch_add(1, Ordering::Relaxed);
                seed = (nanos ^ thread.rotate_left(32)).to_le_bytes();
            }
            u64::from_le_bytes(seed)
        });
    }
    let mut bytes = [0u8; N];
    STATE.with(|state| {
        for chunk in bytes.chunks_mut(8) {
            // SplitMix64.
            let next = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
            state.set(next);
            let mut z = next;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
    });
    // An all-zero id is invalid.
    if bytes.iter().all(|b| *b == 0) {
        bytes[N - 1] = 1;
    }
    bytes
}

fn new_trace_id() -> [u8; 16] {
    random::<16>()
}

fn new_span_id() -> SpanId {
    SpanId::from_bytes(random::<8>())
}

/// `text` cut at [`MAX_TEXT`] bytes (on a character boundary).
fn cut(mut text: String) -> String {
    if text.len() > MAX_TEXT {
        let mut at = MAX_TEXT;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    }
    text
}

/// An outcome's name as rho writes it (`timed_out`).
fn outcome_name(outcome: Outcome) -> &'static str {
    outcome.as_str()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_server_span_parents_its_calls_in_its_trace() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let span = ServerSpan::begin("tools/call", Some("echo"), Some(parent));
        let child = span.traceparent();
        assert!(
            child.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{child}"
        );
        let (data, _, _) = span.into_data();
        assert_eq!(data.name, "tools/call echo");
        assert_eq!(data.span_kind, SpanKind::Server);
        assert_eq!(
            data.parent_span_id,
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        assert!(child.contains(&data.span_context.span_id().to_string()));
        // The parent's sampling decision goes on; a traceparent W3C forbids is no parent.
        let unsampled = ServerSpan::begin(
            "tools/call",
            None,
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
        );
        assert!(unsampled.traceparent().ends_with("-00"));
        let forbidden = ServerSpan::begin(
            "tools/call",
            None,
            Some("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        assert!(forbidden.parent.is_none());
        // Without a parent: a trace of its own, which its calls join.
        let root = ServerSpan::begin("tools/list", None, Some("not a traceparent"));
        let child = root.traceparent();
        let (data, _, _) = root.into_data();
        assert_eq!(data.parent_span_id, SpanId::INVALID);
        assert!(child.contains(&data.span_context.trace_id().to_string()));
    }
}
