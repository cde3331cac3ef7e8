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
use rho_core::{
    Bus, BusItem, EventKind, Filter, Outcome, RunOptions, ToolCall, ToolResult, ToolRunner, Verdict,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as Content,
    Implementation, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

use crate::config::{Action, Config, GateRule};
use crate::gates::{Asker, RuleGate};
use crate::host::{self, PluginFlags, RunFlags};

/// `rho serve` flags.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Write every event to this JSON-lines journal, for `rho watch --attach`.
    #[arg(long, value_name = "PATH")]
    journal: Option<PathBuf>,
}

/// The MCP server.
#[derive(Clone)]
pub struct RhoServer {
    runner: ToolRunner,
    rules: Arc<Vec<GateRule>>,
    fallback: Action,
    peer: Arc<Mutex<Option<Peer<RoleServer>>>>,
    calls: Arc<std::sync::atomic::AtomicU64>,
}

/// Asks the MCP client's user through elicitation when the client supports it; otherwise applies
/// the configured fallback.
struct ElicitAsker {
    peer: Peer<RoleServer>,
    fallback: Action,
}

#[derive(serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Approval {
    /// Allow the call?
    approve: bool,
}

rmcp::elicit_safe!(Approval);

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
        let supported = self
            .peer
            .peer_info()
            .is_some_and(|info| info.capabilities.elicitation.is_some());
        if !supported {
            return self.fallback(call, "the client cannot ask its user");
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
fn mcp_tool(spec: &rho_core::ToolSpec) -> Tool {
    let schema = match &spec.parameters {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(schema),
    )
}

/// A rho result as MCP returns it: text -> text content, images -> image content (base64),
/// details -> `structuredContent`, every outcome but ok -> `isError: true`; the outcome itself
/// in `_meta["rho/outcome"]`.
pub fn mcp_result(result: &ToolResult) -> CallToolResult {
    let mut content = Vec::new();
    if !result.text().is_empty() || result.output.images().is_empty() {
        content.push(Content::text(result.text()));
    }
    for image in result.output.images() {
        let data = base64::engine::general_purpose::STANDARD.encode(&image.bytes);
        content.push(Content::image(data, image.mime_type.clone()));
    }
    let mut out = if result.is_error() {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    out.structured_content = result.details.clone();
    let mut meta = serde_json::Map::new();
    meta.insert("rho/outcome".into(), json!(result.outcome));
    meta.insert(
        "rho/duration_ms".into(),
        json!(result.duration.as_secs_f64() * 1000.0),
    );
    out.meta = Some(rmcp::model::MetaObject(meta));
    out
}

impl RhoServer {
    fn quarantined(&self) -> Vec<String> {
        self.runner
            .registry()
            .stats()
            .into_iter()
            .filter(|s| s.quarantine.is_some())
            .map(|s| s.tool)
            .collect()
    }

    /// Runs the call in a task of its own: whatever happens, the request gets an answer.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        // The server's own counter: request ids `1` and `"1"` are different requests.
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let call_id = format!("mcp-{n}-{}", request_id(&context));
        let call = ToolCall::new(
            call_id.clone(),
            request.name.to_string(),
            Value::Object(request.arguments.unwrap_or_default()),
        );
        let progress = context.meta.get_progress_token().map(|token| {
            let mut updates = self
                .runner
                .bus()
                .subscribe_filtered(Filter::default().types(["tool_execution_update"]));
            let peer = context.peer.clone();
            let id = call_id.clone();
            tokio::spawn(async move {
                let mut n = 0u32;
                while let Some(item) = updates.next().await {
                    if let BusItem::Event(e) = item
                        && let EventKind::ToolExecutionUpdate {
                            call_id, partial, ..
                        } = &e.kind
                        && *call_id == id
                    {
                        n += 1;
                        let note = ProgressNotificationParam::new(token.clone(), f64::from(n))
                            .with_message(partial.clone());
                        let _ = peer.notify_progress(note).await;
                    }
                }
            })
        });
        let gate = Arc::new(RuleGate::new(
            (*self.rules).clone(),
            Arc::new(ElicitAsker {
                peer: context.peer.clone(),
                fallback: self.fallback,
            }),
        ));
        let runner = self.runner.clone();
        let options = RunOptions {
            session_id: None,
            cancel: Some(context.ct.clone()),
        };
        let task_call = call.clone();
        let gate: Arc<dyn rho_core::Gate> = gate;
        let joined =
            tokio::spawn(async move { runner.run(&task_call, &gate, &options).await }).await;
        if let Some(forwarder) = progress {
            forwarder.abort();
        }
        match joined {
            Ok(result) => mcp_result(&result),
            Err(_) => mcp_result(&ToolResult::failed(
                &call.id,
                &call.name,
                Outcome::Crashed,
                "rho: the call's task failed inside the server",
            )),
        }
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
        let hidden = self.quarantined();
        let tools = self
            .runner
            .registry()
            .tools()
            .iter()
            .filter(|t| !hidden.contains(&t.name))
            .map(mcp_tool)
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        Ok(CallToolResponse::Complete(
            self.call(request, context).await,
        ))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        *self.peer.lock().unwrap_or_else(PoisonError::into_inner) = Some(context.peer);
    }
}

/// Tells the client the tool list changed after every reload, removal and quarantine change.
fn announce_changes(bus: &Bus, peer: Arc<Mutex<Option<Peer<RoleServer>>>>) {
    let mut events = bus.subscribe_filtered(Filter::default().types([
        "plugin_loaded",
        "plugin_reloaded",
        "plugin_removed",
        "tool_quarantined",
        "tool_restored",
    ]));
    tokio::spawn(async move {
        while let Some(item) = events.next().await {
            if matches!(item, BusItem::Event(_) | BusItem::Lagged { .. }) {
                let peer = peer.lock().unwrap_or_else(PoisonError::into_inner).clone();
                if let Some(peer) = peer {
                    let _ = peer.notify_tool_list_changed().await;
                }
            }
        }
    });
}

/// Keeps fd 1 for the protocol only: returns a private duplicate for the transport and points fd 1
/// at stderr.
fn protocol_stdout() -> std::io::Result<tokio::fs::File> {
    // SAFETY: dup/dup2 on the standard descriptors; the duplicate is owned by the File below.
    unsafe {
        let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::dup2(2, 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(tokio::fs::File::from_std(std::fs::File::from(
            OwnedFd::from_raw_fd(fd),
        )))
    }
}

pub async fn main(args: Args, config: Config) -> ExitCode {
    let bus = Bus::default();
    let journal_path = args.journal.clone().or(config.serve.journal.clone());
    let _journal = match &journal_path {
        Some(path) => match rho_core::Journal::attach(&bus, path) {
            Ok(journal) => Some(journal),
            Err(e) => {
                eprintln!("rho: {e}");
                return ExitCode::from(1);
            }
        },
        None => None,
    };
    let (registry, dirs) = match host::registry(&bus, &config, &args.plugins).await {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let _watchers = host::watch(&dirs);
    let rules = match &args.run.gate {
        Some(spec) => match crate::gates::parse_flag(spec) {
            Ok(rules) => rules,
            Err(message) => return host::usage(&message),
        },
        None => config.gate.clone(),
    };
    let server = RhoServer {
        runner: host::runner(registry, &config, &args.run),
        rules: Arc::new(rules),
        fallback: config.serve.ask_fallback,
        peer: Arc::new(Mutex::new(None)),
        calls: Arc::new(std::sync::atomic::AtomicU64::new(0)),
    };
    announce_changes(&bus, server.peer.clone());
    let stdout = match protocol_stdout() {
        Ok(stdout) => stdout,
        Err(e) => {
            eprintln!("rho: cannot set up stdout for the protocol: {e}");
            return ExitCode::from(1);
        }
    };
    let service = match server.serve((tokio::io::stdin(), stdout)).await {
        Ok(service) => service,
        Err(e) => {
            eprintln!("rho: the MCP session did not start: {e}");
            return ExitCode::from(1);
        }
    };
    match service.waiting().await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rho: the MCP session ended with an error: {e}");
            ExitCode::from(1)
        }
    }
}
