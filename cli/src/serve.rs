//! `rho serve`: every rho plugin as an MCP server over stdio, with rho's guarantees: gates,
//! timeouts that really kill, crash accounting, hot reload.
//!
//! Nothing but protocol frames reaches stdout: the protocol gets a private duplicate of fd 1 and
//! fd 1 itself is pointed at stderr, so a plugin that prints (in process) cannot corrupt the stream.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine;
use rho_runtime::{
    BusItem, CallOptions, EventType, Filter, Host, Outcome, ToolCall, ToolResult, UpdateHook,
    Verdict,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as Content,
    Implementation, InitializeResult, InputRequiredResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerNotification, SubscriptionFilter, Tool,
    ToolAnnotations, ToolListChangedNotification,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

use crate::host::{self, PluginFlags, RunFlags};
use rho_runtime::{Action, Asker, GateRule, HostConfig, RuleGate};

/// `rho serve` flags.
#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 when the client ends the session (or on SIGTERM/SIGINT), 1 when the session fails or a plugin directory is unusable, 2 for a usage error."
)]
pub struct Args {
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Append every event to this JSON-lines journal, for `rho watch --attach PATH` (default: a
    /// file of this server's own under ~/.local/state/rho, printed at start; `rho watch --attach`
    /// finds the newest).
    #[arg(long, value_name = "PATH")]
    journal: Option<PathBuf>,
    /// Serve MCP Streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8750; port
    /// 0 picks a free one, printed at start). Any address but a loopback one requires a token.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// The bearer token HTTP clients must send, first line of this owner-only file (default on a
    /// non-loopback address: one made at start and printed once).
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// A browser origin allowed to call over HTTP (repeatable; default: the loopback origins).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// With --http: serve a live page at http://ADDR/ (calls, images, per-tool health, reloads
    /// and quarantines; with a token, open it as http://ADDR/?token=TOKEN).
    #[arg(long)]
    web: bool,
    /// List two meta-tools besides the tools, for clients that never reread the list:
    /// rho_find_tools (search the tools as they are now) and rho_call_tool (call one by name).
    #[arg(long)]
    meta_tools: bool,
    #[command(flatten)]
    nats: crate::nats::ExportFlags,
}

/// The MCP server.
#[derive(Clone)]
pub struct RhoServer {
    host: Host,
    max_result_bytes: usize,
    /// Calls running at once at most; more wait for a turn (a client cannot start a thread per
    /// request without bound).
    turns: Arc<tokio::sync::Semaphore>,
    rules: Arc<Vec<GateRule>>,
    fallback: Action,
    /// Who is told when the tool list changes.
    audience: Arc<Mutex<Audience>>,
    calls: Arc<std::sync::atomic::AtomicU64>,
    /// Calls in flight over HTTP sessions, cancelled when their client disconnects.
    http_calls: crate::http::HttpCalls,
    /// List and answer the meta-tools ([`crate::meta_tools`]).
    meta_tools: bool,
}

/// Who hears of tool list changes: the peers of initialized sessions (2025-era: one over stdio,
/// any number over HTTP) and the `subscriptions/listen` streams (2026-07-28, where no session
/// sends `notifications/initialized`). Closed ones are dropped when next told.
#[derive(Default)]
struct Audience {
    peers: Vec<Peer<RoleServer>>,
    listeners: Vec<SubscriptionSink>,
}

/// Asks the MCP client's user through elicitation when the client supports it; otherwise applies
/// the configured fallback.
struct ElicitAsker {
    peer: Peer<RoleServer>,
    fallback: Action,
    /// How this request's client can be asked.
    asking: Asking,
}

/// How the user of a request's client can be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asking {
    /// By an `elicitation/create` request to the client (2025-era sessions that declared
    /// elicitation).
    Request,
    /// Already asked, by an `InputRequiredResult` round trip (2026-07-28); the user's answer.
    Answered(bool),
    /// Not at all: the fallback decides.
    Cannot,
}

#[derive(serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Approval {
    /// Allow the call?
    approve: bool,
}

rmcp::elicit_safe!(Approval);

/// The key of the approval question in an `InputRequiredResult` (2026-07-28).
const APPROVAL_KEY: &str = "rho/approve";

impl ElicitAsker {
    fn fallback(&self, call: &ToolCall, why: &str) -> Verdict {
        match self.fallback {
            Action::Allow => Verdict::Allow,
            _ => Verdict::Block(format!(
                "tool `{}` needs approval and {why}; the host's fallback denies it",
                call.name
            )),
        }
    }
}

#[async_trait::async_trait]
impl Asker for ElicitAsker {
    async fn ask(&self, call: &ToolCall) -> Verdict {
        match self.asking {
            Asking::Request => {}
            Asking::Answered(true) => return Verdict::Allow,
            Asking::Answered(false) => {
                return Verdict::Block(format!("the user declined the call of `{}`", call.name));
            }
            Asking::Cannot => return self.fallback(call, "the client cannot ask its user"),
        }
        let question = format!("Allow rho to run `{}` with {}?", call.name, call.arguments);
        match self.peer.elicit::<Approval>(question).await {
            Ok(Some(Approval { approve: true })) => Verdict::Allow,
            Ok(_) => Verdict::Block(format!("the user declined the call of `{}`", call.name)),
            Err(
                rmcp::service::ElicitationError::UserDeclined
                | rmcp::service::ElicitationError::UserCancelled,
            ) => Verdict::Block(format!("the user declined the call of `{}`", call.name)),
            Err(e) => self.fallback(call, &format!("asking the user failed ({e})")),
        }
    }
}

/// A tool as MCP lists it.
/// A tool as MCP lists it: every hint stated (a tool that declares none gets MCP's cautious
/// defaults, stated too: clients treat a missing annotation as unknown), its title and, for a tool
/// that answers structured data, its output schema.
fn mcp_tool(spec: &rho_runtime::ToolSpec) -> Tool {
    let object = |schema: &Value| match schema {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    let hints = spec.hints;
    let mut annotations = ToolAnnotations::new()
        .read_only(hints.read_only)
        .destructive(hints.destructive)
        .idempotent(hints.idempotent)
        .open_world(hints.open_world);
    annotations.title = spec.title.clone();
    let mut tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(object(&spec.parameters)),
    )
    .with_annotations(annotations);
    if let Some(title) = &spec.title {
        tool = tool.with_title(title.clone());
    }
    if let Some(schema) = &spec.output_schema {
        tool = tool.with_raw_output_schema(Arc::new(object(schema)));
    }
    tool
}

/// A rho result as MCP returns it: text -> text content (a structured answer's JSON text when it
/// has no text of its own: content is never empty), images -> image content (base64), structured
/// data -> `structuredContent`, details -> `_meta["rho/details"]`, every outcome but ok ->
/// `isError: true`; the outcome itself in `_meta["rho/outcome"]`. At most `max_bytes` of text,
/// base64 images, structured content and details together: past it what does not fit is left out
/// (images, details, then structured content) and the text is cut, with a note saying so and
/// `_meta["rho/truncated"]` (the whole result is in the host's journal).
pub fn mcp_result(result: &ToolResult, max_bytes: usize) -> CallToolResult {
    let mut content = Vec::new();
    let mut left = max_bytes;
    let mut dropped = Vec::new();
    let mut images = Vec::new();
    for image in result.output.images() {
        let encoded = image.bytes.len().div_ceil(3) * 4;
        if encoded <= left {
            left -= encoded;
            let data = base64::engine::general_purpose::STANDARD.encode(&image.bytes);
            images.push(Content::image(data, image.mime_type.clone()));
        } else {
            dropped.push(format!("an image of {} bytes", image.bytes.len()));
        }
    }
    let mut fits = |value: Option<&Value>, what: &str| {
        let value = value?;
        let size = value.to_string().len();
        if size <= left {
            left -= size;
            Some(value.clone())
        } else {
            dropped.push(format!("{what} of {size} bytes"));
            None
        }
    };
    let structured = fits(result.structured.as_ref(), "structured content");
    let details = fits(result.details.as_ref(), "details");
    let rendered;
    let text = match (&result.structured, result.text()) {
        (Some(data), "") => {
            rendered = data.to_string();
            rendered.as_str()
        }
        (_, text) => text,
    };
    if text.len() > left {
        let at = (0..=left.saturating_sub(256))
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        dropped.insert(
            0,
            format!("{} of {} bytes of text", text.len() - at, text.len()),
        );
        left = at;
    }
    let cut = !dropped.is_empty();
    if !text.is_empty() || images.is_empty() || cut {
        let mut shown = text[..left.min(text.len())].to_owned();
        if cut {
            shown.push_str(&format!(
                "\n[rho: the answer is larger than this client is sent ({max_bytes} bytes, \
                 serve.max_result_bytes); left out: {}]",
                dropped.join(", ")
            ));
        }
        content.push(Content::text(shown));
    }
    content.extend(images);
    // A tool with an output schema must send structured content with a success: without it
    // (left out above), the result is an error, as MCP clients would otherwise reject it.
    let structured_lost = result.structured.is_some() && structured.is_none();
    let mut out = if result.is_error() || structured_lost {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    out.structured_content = structured;
    let mut meta = serde_json::Map::new();
    if cut {
        meta.insert("rho/truncated".into(), json!(true));
    }
    if let Some(details) = details {
        meta.insert("rho/details".into(), details);
    }
    meta.insert("rho/outcome".into(), json!(result.outcome));
    meta.insert(
        "rho/duration_ms".into(),
        json!(result.duration.as_secs_f64() * 1000.0),
    );
    out.meta = Some(rmcp::model::MetaObject(meta));
    out
}

impl RhoServer {
    /// The tools as `tools/list` shows them now: quarantined ones left out; with meta-tools on,
    /// those two first (a plugin's tool of the same name hidden).
    fn listed(&self) -> Vec<Tool> {
        let hidden = self.quarantined();
        let meta = self.meta_tools.then(crate::meta_tools::tools);
        let plugin_tools = self
            .host
            .tools()
            .iter()
            .filter(|t| !hidden.contains(&t.name))
            .filter(|t| !(self.meta_tools && crate::meta_tools::is_meta(&t.name)))
            .map(mcp_tool)
            .collect::<Vec<_>>();
        meta.into_iter().flatten().chain(plugin_tools).collect()
    }

    fn quarantined(&self) -> Vec<String> {
        self.host
            .stats()
            .into_iter()
            .filter(|s| s.quarantine.is_some())
            .map(|s| s.tool)
            .collect()
    }

    /// How the user of this request's client can be asked, should the gate ask. A 2026-07-28
    /// request cannot carry a server-to-client request: when a rule asks about this call, its
    /// first round ends with an `InputRequiredResult` (`Err`) holding the question, and the
    /// client's retry carries the answer (no call starts until then).
    fn asking(
        &self,
        call: &ToolCall,
        context: &RequestContext<RoleServer>,
        answers: Option<&rmcp::model::InputResponses>,
    ) -> Result<Asking, InputRequiredResult> {
        let modern = context
            .meta
            .protocol_version()
            .is_some_and(|v| v.to_string().as_str() >= "2026-07-28");
        if !modern {
            let can = context
                .peer
                .peer_info()
                .is_some_and(|info| info.capabilities.elicitation.is_some());
            return Ok(if can { Asking::Request } else { Asking::Cannot });
        }
        if let Some(answer) = answers.and_then(|a| a.get(APPROVAL_KEY)) {
            let approved = answer["action"] == "accept" && answer["content"]["approve"] == true;
            return Ok(Asking::Answered(approved));
        }
        let can = context
            .meta
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some());
        let hints = self
            .host
            .tools()
            .into_iter()
            .find(|t| t.name == call.name)
            .map(|t| t.hints)
            .unwrap_or_default();
        let asks = self
            .rules
            .iter()
            .find(|rule| rule.matches(&call.name, &hints))
            .is_some_and(|rule| rule.action == Action::Ask);
        if !asks {
            // No rule asks about this call now; should one by the time it runs (a reload in
            // between), the answer is no.
            return Ok(Asking::Answered(false));
        }
        if !can {
            return Ok(Asking::Cannot);
        }
        let question = format!("Allow rho to run `{}` with {}?", call.name, call.arguments);
        let schema = match rmcp::model::ElicitationSchema::from_type::<Approval>() {
            Ok(schema) => schema,
            Err(_) => return Ok(Asking::Cannot),
        };
        let elicit = rmcp::model::ElicitRequest::new(
            rmcp::model::ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: question,
                requested_schema: schema,
            },
        );
        let requests = std::collections::BTreeMap::from([(
            APPROVAL_KEY.to_owned(),
            rmcp::model::InputRequest::Elicitation(elicit),
        )]);
        Err(InputRequiredResult::new(
            Some(requests),
            Some("rho-approval".into()),
        ))
    }

    /// Runs the call in a task of its own: whatever happens, the request gets an answer.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        // The server's own counter: request ids `1` and `"1"` are different requests.
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let call_id = format!("mcp-{n}-{}", request_id(&context));
        // Over an HTTP session: cancelled when the client drops the response.
        let _registered = self.http_calls.register(
            context.extensions.get::<axum::http::request::Parts>(),
            &serde_json::to_value(&context.id).unwrap_or_default(),
            context.ct.clone(),
        );
        let call = ToolCall::new(
            call_id.clone(),
            request.name.to_string(),
            Value::Object(request.arguments.unwrap_or_default()),
        );
        // Progress: every update of this call, in order, sent before the response (the hook is
        // never called after the call's end). Bounded: past 1024 unsent updates, the newest
        // are dropped, as a lagging subscriber's would be.
        let (on_update, progress) = match context.meta.get_progress_token() {
            None => (None, None),
            Some(token) => {
                let (updates, mut pending) = tokio::sync::mpsc::channel::<String>(1024);
                let (ended, mut end) = tokio::sync::oneshot::channel::<()>();
                let peer = context.peer.clone();
                let forwarder = tokio::spawn(async move {
                    let mut n = 0u32;
                    let mut send = async |partial: String| {
                        n += 1;
                        let note = ProgressNotificationParam::new(token.clone(), f64::from(n))
                            .with_message(partial);
                        let _ = peer.notify_progress(note).await;
                    };
                    loop {
                        tokio::select! {
                            biased;
                            Some(partial) = pending.recv() => send(partial).await,
                            _ = &mut end => break,
                        }
                    }
                    while let Ok(partial) = pending.try_recv() {
                        send(partial).await;
                    }
                });
                let hook: UpdateHook = Arc::new(move |partial: &str| {
                    let _ = updates.try_send(partial.to_owned());
                });
                (Some(hook), Some((ended, forwarder)))
            }
        };
        let asking = match self.asking(&call, &context, request.input_responses.as_ref()) {
            Ok(asking) => asking,
            Err(input_required) => {
                if let Some((ended, _)) = progress {
                    let _ = ended.send(());
                }
                return CallToolResponse::InputRequired(input_required);
            }
        };
        let gate = Arc::new(RuleGate::new(
            (*self.rules).clone(),
            Arc::new(ElicitAsker {
                peer: context.peer.clone(),
                fallback: self.fallback,
                asking,
            }),
        ));
        // W3C trace context from the request's `_meta.traceparent` (checked by the runner).
        let traceparent = context
            .meta
            .get("traceparent")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let options = CallOptions {
            cancel: Some(context.ct.clone()),
            traceparent,
            gate: Some(gate),
            on_update,
            ..CallOptions::default()
        };
        let turn = tokio::select! {
            turn = self.turns.clone().acquire_owned() => turn.ok(),
            () = context.ct.cancelled() => None,
        };
        let Some(_turn) = turn else {
            return CallToolResponse::Complete(mcp_result(
                &ToolResult::failed(
                    &call.id,
                    &call.name,
                    Outcome::Error,
                    "rho: the call was cancelled before it started",
                ),
                self.max_result_bytes,
            ));
        };
        let result = self.host.call_with(&call, &options).await;
        if let Some((ended, forwarder)) = progress {
            let _ = ended.send(());
            // Bounded: a client that does not read cannot hold the answer forever.
            let drained = tokio::time::timeout(std::time::Duration::from_secs(5), forwarder).await;
            if drained.is_err() {
                tracing::warn!(call = %call_id, "progress notifications still pending at the answer");
            }
        }
        CallToolResponse::Complete(mcp_result(&result, self.max_result_bytes))
    }
}

fn request_id(context: &RequestContext<RoleServer>) -> String {
    match serde_json::to_value(&context.id) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

impl ServerHandler for RhoServer {
    fn get_info(&self) -> InitializeResult {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("rho", env!("CARGO_PKG_VERSION")))
            .with_instructions("Compiled tools from rho plugins. Every call ends with one outcome; see _meta[\"rho/outcome\"].")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.listed();
        // Fresh only now: a client that caches lists (2026-07-28) sees a reload at its next look.
        Ok(ListToolsResult::with_all_items(tools).with_ttl_ms(0))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if self.meta_tools {
            if request.name == crate::meta_tools::FIND {
                let arguments = request.arguments.unwrap_or_default();
                return Ok(CallToolResponse::Complete(crate::meta_tools::find(
                    &self.listed(),
                    &arguments,
                )));
            }
            if request.name == crate::meta_tools::CALL {
                return Ok(match crate::meta_tools::unwrap_call(request) {
                    Ok(inner) => self.call(inner, context).await,
                    Err(refused) => CallToolResponse::Complete(refused),
                });
            }
        }
        Ok(self.call(request, context).await)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.audience
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .peers
            .push(context.peer);
    }

    /// `subscriptions/listen` (2026-07-28): tool list changes only (rho has no prompts or
    /// resources).
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        self.audience
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .listeners
            .push(subscription.sink().clone());
        subscription.cancelled().await;
        Ok(())
    }
}

/// Tells every client the tool list changed after every reload, removal and quarantine change.
fn announce_changes(host: &Host, audience: Arc<Mutex<Audience>>) {
    let mut events = host.subscribe_filtered(Filter::default().types([
        EventType::PluginLoaded,
        EventType::PluginReloaded,
        EventType::PluginRemoved,
        EventType::RemoteToolsChanged,
        EventType::ToolQuarantined,
        EventType::ToolRestored,
    ]));
    tokio::spawn(async move {
        while let Some(item) = events.next().await {
            if matches!(item, BusItem::Event(_) | BusItem::Lagged { .. }) {
                let (peers, listeners) = {
                    let mut audience = audience.lock().unwrap_or_else(PoisonError::into_inner);
                    audience.peers.retain(|p| !p.is_transport_closed());
                    (audience.peers.clone(), audience.listeners.clone())
                };
                for peer in peers {
                    let _ = peer.notify_tool_list_changed().await;
                }
                let mut closed = Vec::new();
                for sink in listeners {
                    let changed = ServerNotification::ToolListChangedNotification(
                        ToolListChangedNotification::default(),
                    );
                    if sink.send(changed).await.is_err() {
                        closed.push(sink.id().clone());
                    }
                }
                if !closed.is_empty() {
                    let mut audience = audience.lock().unwrap_or_else(PoisonError::into_inner);
                    audience.listeners.retain(|s| !closed.contains(s.id()));
                }
            }
        }
    });
}

/// Keeps fd 1 for the protocol only: returns a private duplicate for the transport and points fd 1
/// at stderr.
fn protocol_stdout() -> std::io::Result<std::fs::File> {
    // SAFETY: dup/dup2 on the standard descriptors; the duplicate is owned by the File below.
    unsafe {
        let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::dup2(2, 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(std::fs::File::from(OwnedFd::from_raw_fd(fd)))
    }
}

pub async fn main(args: Args, config: HostConfig) -> ExitCode {
    let wanted = args
        .journal
        .clone()
        .or_else(|| config.serve.journal.clone());
    let journal = match crate::journals::for_server(wanted.as_deref()) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("rho: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!("rho: journal {} (rho watch --attach)", journal.display());
    let built = host::build(&config, &args.plugins, Some(&args.run), |b| {
        b.watch(true).journal(journal)
    });
    let (host, config) = match built.await {
        Ok(built) => built,
        Err(code) => return code,
    };
    let server = RhoServer {
        host: host.clone(),
        max_result_bytes: config.serve.max_result_bytes,
        turns: Arc::new(tokio::sync::Semaphore::new(config.serve.max_calls)),
        rules: Arc::new(config.gate.clone()),
        fallback: config.serve.ask_fallback,
        audience: Arc::default(),
        calls: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        http_calls: crate::http::HttpCalls::default(),
        meta_tools: args.meta_tools || config.serve.meta_tools,
    };
    announce_changes(&host, server.audience.clone());
    let nats = crate::nats::config_with(
        &config,
        args.nats.nats.as_deref(),
        args.nats.nats_host.as_deref(),
    );
    if let Err(line) = crate::nats::start_export(&host, &nats).await {
        eprintln!("rho: {}", crate::render::terminal_safe(&line));
        shut_down(&host, "the NATS export could not start").await;
        return ExitCode::from(1);
    }
    // `rho call --host` runs calls here, where this server's journal and views see them.
    let _control = crate::control::listen(&host);
    if args.web && args.http.or(config.serve.http).is_none() {
        eprintln!("rho: --web serves its page over HTTP: give --http ADDR (or [serve] http)");
        shut_down(&host, "a usage error").await;
        return ExitCode::from(2);
    }
    if let Some(addr) = args.http.or(config.serve.http) {
        let token_file = args.token_file.clone().or(config.serve.token_file.clone());
        let origins = if args.allow_origins.is_empty() {
            config.serve.allowed_origins.clone()
        } else {
            args.allow_origins.clone()
        };
        let web = args.web || config.serve.web;
        return serve_http(
            server,
            &host,
            addr,
            token_file.as_deref(),
            &origins,
            web,
            &config,
        )
        .await;
    }
    let stdout = match protocol_stdout() {
        Ok(stdout) => stdout,
        Err(e) => {
            eprintln!("rho: cannot set up stdout for the protocol: {e}");
            return ExitCode::from(1);
        }
    };
    let mut terminate = match host::sigterm() {
        Ok(signal) => signal,
        Err(line) => {
            eprintln!("rho: {line}");
            return ExitCode::from(1);
        }
    };
    let guard = crate::stdio::start(stdout);
    let mut closed = guard.closed;
    let drain = guard.drain;
    let serving = server.serve((guard.to_rmcp, guard.from_rmcp));
    tokio::pin!(serving);
    // The session starts with the client's `initialize`; a client may go before it does.
    let early = tokio::select! {
        started = &mut serving => match started {
            Ok(service) => Ok(service),
            Err(e) => Err((format!("the MCP session did not start: {e}"), ExitCode::from(1))),
        },
        closed = closed.recv() => Err((
            match closed {
                Some(crate::stdio::Closed::Output) => "the client closed its output before the MCP session started",
                _ => "the client closed its input before the MCP session started",
            }.to_owned(),
            ExitCode::from(1),
        )),
        _ = terminate.recv() => Err(("SIGTERM before the MCP session started".into(), ExitCode::SUCCESS)),
        _ = tokio::signal::ctrl_c() => Err(("SIGINT before the MCP session started".into(), ExitCode::SUCCESS)),
    };
    let service = match early {
        Ok(service) => service,
        Err((reason, code)) => {
            if code != ExitCode::SUCCESS {
                eprintln!("rho: {reason}");
            }
            shut_down(&host, &reason).await;
            return code;
        }
    };
    let session = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let (reason, code) = tokio::select! {
        ended = &mut waiting => match ended {
            Ok(_) => ("the MCP session ended", ExitCode::SUCCESS),
            Err(e) => {
                eprintln!("rho: the MCP session ended with an error: {e}");
                ("the MCP session failed", ExitCode::from(1))
            }
        },
        closed = closed.recv() => match closed {
            Some(crate::stdio::Closed::Output) => ("the client closed its output", ExitCode::SUCCESS),
            _ => ("the client closed its input", ExitCode::SUCCESS),
        },
        _ = terminate.recv() => ("SIGTERM", ExitCode::SUCCESS),
        _ = tokio::signal::ctrl_c() => ("SIGINT", ExitCode::SUCCESS),
    };
    shut_down(&host, reason).await;
    // The stopped calls' answers reach a client that still reads (bounded: one that does not
    // cannot hold the exit).
    let reading = reason != "the client closed its output";
    if reading && !drain.flushed(std::time::Duration::from_secs(1)).await {
        tracing::warn!("answers still owed to the client at exit");
    }
    session.cancel();
    code
}

/// `rho serve --http`: serves until SIGTERM or SIGINT, then stops as over stdio.
async fn serve_http(
    server: RhoServer,
    host: &Host,
    addr: std::net::SocketAddr,
    token_file: Option<&std::path::Path>,
    origins: &[String],
    web: bool,
    config: &HostConfig,
) -> ExitCode {
    let refused = async |line: String| {
        eprintln!("rho: {line}");
        shut_down(host, "the HTTP endpoint could not start").await;
        ExitCode::from(1)
    };
    let (guard, made) = match crate::http::Guard::new(
        addr,
        token_file,
        origins,
        config.serve.max_body_bytes,
        config.serve.max_requests,
        crate::http::SessionLimits::of(&config.serve),
        web,
    ) {
        Ok(guard) => guard,
        Err(e) => return refused(e.to_string()).await,
    };
    if made && let Some(token) = &guard.token {
        eprintln!("rho: token (send `Authorization: Bearer TOKEN`; shown once): {token}");
    }
    let mut terminate = match host::sigterm() {
        Ok(signal) => signal,
        Err(line) => return refused(line).await,
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let calls = server.http_calls.clone();
    let started = crate::http::start(Some(server), host.clone(), calls, addr, guard, stop.clone());
    let (bound, task) = match started.await {
        Ok(started) => started,
        Err(e) => return refused(e.to_string()).await,
    };
    eprintln!("rho: serving MCP at http://{bound}/mcp");
    if web {
        eprintln!("rho: live page at http://{bound}/");
    }
    let reason = tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    };
    shut_down(host, reason).await;
    stop.cancel();
    // Bounded: a client holding a stream open cannot hold the exit.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), task).await;
    ExitCode::SUCCESS
}

/// The one way `rho serve` ends, whatever ended it: calls in flight end at once with a text
/// saying the host is stopping (their answers still go out while the client reads), each end
/// event reaches the journal, workers stop and the private copies are removed. Bounded: about
/// a second when no tool ignores cancellation, three at most.
async fn shut_down(host: &Host, reason: &str) {
    tracing::info!(reason, "rho serve is stopping");
    host.shutdown_because(reason).await;
    crate::nats::flush(host).await;
}
