//! [`McpSource`]: one MCP server over stdio as a supervised tool source.
//!
//! The source starts the server in the sandbox of isolated plugins
//! ([`SandboxedCommand`]: its whole process tree in a PID namespace of its own, a cleared
//! environment but for the keys its grants list, `HOME` a private directory kept across its
//! restarts and removed with the source, its stderr kept, bounded), initializes it within
//! [`McpServer::start_timeout_ms`], lists its tools and offers them to the host's registry. It then
//! watches the process: an exit (or a broken connection) takes the server down, its calls in
//! flight end `crashed` naming the server and how it ended, and calls made while it is down end
//! at once `unavailable`, saying when it comes back; it is restarted after a backoff that doubles
//! from 0.5 s to 30 s and starts over only once a server has stayed up for a minute. Its tools
//! stay listed while it is down (their calls fail fast), and its `tools/list_changed` makes the
//! source list them again.
//!
//! A call whose timeout passed (or that was cancelled) sends the server `notifications/cancelled`
//! (the call's request future is dropped); a second later the source pings the server with a
//! 5 s deadline: a server that does not answer is hung, and is killed and restarted, its other
//! calls ending `crashed` with a text naming the tool that hung. A server busy with a long call
//! still answers pings, and is not declared hung. Its calls that were in flight are charged to
//! the tool that hung ([`Failure::crashed_by`]), not to their own tools.
//!
//! With [`McpServer::stateless`] each call starts a server process of its own (`crate::call`),
//! ended with the call: a crash or a hang touches that call alone, and needs no restart. The
//! process the source keeps lists the tools.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rho_runtime::{
    Failure, Question, RemoteSource, RemoteToolEntry, Reply, SandboxedChild, SandboxedCommand,
    SourceState, ToolCtx, ToolSource, WorkerOptions,
};
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, Implementation, PingRequest, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData as McpError, Peer, RoleClient, ServiceExt};
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::config::McpServer;
use crate::convert;
use crate::stdout::Notice;

/// The first wait before a restart; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a server must stay up for the backoff to start over.
const SUSTAINED: Duration = Duration::from_secs(60);
/// How long after a call was given up the server is pinged, and how long it has to answer.
const PING_AFTER: Duration = Duration::from_secs(1);
const PING_DEADLINE: Duration = Duration::from_secs(5);
/// How often a remote (HTTP) server is pinged while it serves.
const HEALTH_EVERY: Duration = Duration::from_secs(5);
/// How long a server that closed its connection gets to exit on its own before it is killed.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How many progress notes of calls not yet registered are kept.
const EARLY_PROGRESS: usize = 64;
/// How many of the server's last stderr lines are kept, and how long each may be.
const STDERR_LINES: usize = 64;
const STDERR_LINE_BYTES: usize = 1024;

/// An MCP server as a tool source of a host: `HostBuilder::source(name, McpSource::new(server))`.
pub struct McpSource {
    server: McpServer,
    workers: WorkerOptions,
}

impl McpSource {
    /// The source of `server`, its sandbox started by the default worker executable.
    pub fn new(server: McpServer) -> McpSource {
        McpSource {
            server,
            workers: WorkerOptions::default(),
        }
    }

    /// The host's worker options the server's sandbox takes its worker executable and identity
    /// from (its grants, limits and start bound are the server entry's).
    pub fn workers(mut self, workers: WorkerOptions) -> McpSource {
        self.workers = workers;
        self
    }
}

impl ToolSource for McpSource {
    fn run(self: Box<Self>, source: RemoteSource) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(supervise(self.server, self.workers, source))
    }
}

/// One running server process: its peer, and how it ended once it has.
pub(crate) struct Process {
    pub peer: Peer<RoleClient>,
    /// `Some(how it ended)` once it has.
    pub ended: watch::Receiver<Option<Down>>,
}

/// How a server process went down.
#[derive(Clone)]
pub(crate) struct Down {
    /// Why, in words (`exited (exit status: 7)`, `hung: ...`), with its last stderr line.
    pub why: String,
    /// The tool whose call it hung in, when it was killed as hung.
    pub hung: Option<String>,
}

impl Down {
    fn because(why: impl Into<String>) -> Down {
        Down {
            why: why.into(),
            hung: None,
        }
    }
}

/// What the source's calls, its client handler and its supervisor share.
pub(crate) struct Shared {
    pub name: String,
    /// The process serving now; `None` while down, with why and when it comes back.
    up: Mutex<Result<Arc<Process>, String>>,
    /// The calls in flight, by the progress token rmcp gave their request.
    pub calls: Mutex<BTreeMap<String, ToolCtx>>,
    /// Progress that came before its call was registered (rmcp names a request's token only once
    /// it is sent): a few, briefly.
    early: Mutex<std::collections::VecDeque<(String, String)>>,
    /// The server said its tool list changed.
    relist: Notify,
    /// A call was given up (its tool's name): check the server is not hung.
    pub abandoned: mpsc::UnboundedSender<String>,
    /// The server's last stderr lines.
    stderr: Mutex<std::collections::VecDeque<String>>,
    /// How the running server broke the protocol on its stdout, once it has.
    broke: Arc<Mutex<Option<String>>>,
    /// `stateless = true`: how each call starts a server process of its own.
    pub per_call: Option<Arc<PerCall>>,
    /// A Streamable HTTP server: pinged while it serves; its notifications come through rmcp.
    pub remote: bool,
}

impl Shared {
    fn new(
        name: &str,
        abandoned: mpsc::UnboundedSender<String>,
        per_call: Option<Arc<PerCall>>,
        remote: bool,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            name: name.to_owned(),
            up: Mutex::new(Err(format!("mcp server `{name}` is starting"))),
            calls: Mutex::default(),
            early: Mutex::default(),
            relist: Notify::new(),
            abandoned,
            stderr: Mutex::default(),
            broke: Arc::default(),
            per_call,
            remote,
        })
    }

    pub fn up(&self) -> Result<Arc<Process>, String> {
        self.up
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_up(&self, up: Result<Arc<Process>, String>) {
        *self.up.lock().unwrap_or_else(PoisonError::into_inner) = up;
    }

    /// The one call in flight, if exactly one is (a log line or a question the server sends
    /// belongs to it); else the newest, for questions.
    fn current(&self, only: bool) -> Option<ToolCtx> {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if only && calls.len() != 1 {
            return None;
        }
        calls.values().next_back().cloned()
    }

    /// Registers the call of `token`, handing it the progress that came before.
    pub fn register(&self, token: &str, ctx: &ToolCtx) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.to_owned(), ctx.clone());
        let early: Vec<String> = {
            let mut early = self.early.lock().unwrap_or_else(PoisonError::into_inner);
            let (mine, others) = early.drain(..).partition(|(t, _)| t == token);
            *early = others;
            mine.into_iter().map(|(_, text)| text).collect()
        };
        for text in early {
            ctx.update(&text);
        }
    }

    /// Hands a progress notification to the call of its token as an update, or keeps it for a
    /// call about to be registered (the last [`EARLY_PROGRESS`]).
    pub fn progress(&self, params: &ProgressNotificationParam) {
        let text = match (&params.message, params.total) {
            (Some(message), _) => message.clone(),
            (None, Some(total)) => format!("{}/{total}", params.progress),
            (None, None) => params.progress.to_string(),
        };
        let token = crate::call::token_key(&params.progress_token);
        let ctx = self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&token)
            .cloned();
        match ctx {
            Some(ctx) => ctx.update(&text),
            None => {
                let mut early = self.early.lock().unwrap_or_else(PoisonError::into_inner);
                if early.len() == EARLY_PROGRESS {
                    early.pop_front();
                }
                early.push_back((token, text));
            }
        }
    }

    /// How the running server broke the protocol on its stdout, taken, if it has.
    fn take_broke(&self) -> Option<String> {
        self.broke
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Hands a log line of the server's to the one call in flight, if exactly one is (it is that
    /// call's), else to the host's log.
    pub fn log(&self, level: rho_runtime::LogLevel, text: &str) {
        match self.current(true) {
            Some(ctx) => ctx.log(level, text),
            None => tracing::info!(server = %self.name, "log: {text}"),
        }
    }

    /// The server's last stderr line, for texts that say how it ended.
    fn last_words(&self) -> String {
        let stderr = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        match stderr.back() {
            Some(line) => format!(" (its last words: {line})"),
            None => String::new(),
        }
    }
}

/// Starts, watches and restarts `server`, offering its tools through `source`, until the host
/// drops this future.
async fn supervise(server: McpServer, workers: WorkerOptions, source: RemoteSource) {
    let (abandoned, mut given_up) = mpsc::unbounded_channel();
    // The server's private home, kept across its restarts (its caches stay warm) and removed
    // with the source.
    let home = rho_runtime::secure_temp_dir().and_then(|dir| {
        tempfile::Builder::new()
            .prefix(&format!("rho-mcp-{}-", server.name))
            .tempdir_in(dir)
    });
    let home = match home {
        Ok(home) => home,
        Err(e) => {
            let why = format!("mcp server `{}`: no private home for it: {e}", server.name);
            tracing::error!(server = %server.name, "{why}");
            source.set_state("mcp", SourceState::Down, None, why);
            return;
        }
    };
    let per_call = server.stateless.then(|| {
        Arc::new(PerCall {
            server: server.clone(),
            workers: workers.clone(),
            home: home.path().to_owned(),
        })
    });
    let shared = Shared::new(&server.name, abandoned, per_call, server.url.is_some());
    let kind = if server.url.is_some() {
        "mcp http"
    } else {
        "mcp stdio"
    };
    let mut backoff = FIRST_BACKOFF;
    loop {
        let started = Instant::now();
        source.set_state(kind, SourceState::Starting, None, "");
        let link = match &server.url {
            Some(url) => crate::http::connect(&server, url, &shared)
                .await
                .map(|running| (running, None, watch::channel(None).0)),
            None => start(&server, &workers, home.path(), &shared)
                .await
                .map(|(running, child, exited)| (running, Some(child), exited)),
        };
        let why = match link {
            Ok((running, mut child, exited)) => {
                if let Some(child) = &child {
                    say_sandbox(&server, child, &source);
                }
                let peer = running.peer().clone();
                let process = Arc::new(Process {
                    peer: peer.clone(),
                    ended: exited.subscribe(),
                });
                // Up before its tools are offered: a caller that saw them can call them.
                shared.set_up(Ok(process));
                offer(&peer, &shared, &source, &server).await;
                source.set_state(kind, SourceState::Serving, None, "");
                let why = serve(
                    &running,
                    &mut child,
                    &shared,
                    &source,
                    &server,
                    &mut given_up,
                )
                .await;
                // Down first: calls from now on fail fast; then the sandbox goes.
                shared.set_up(Err(why.why.clone()));
                if let Some(child) = &mut child {
                    child.kill();
                    let _ = child.wait().await;
                }
                let said = why.why.clone();
                let _ = exited.send(Some(Down {
                    why: format!("{said}{}", shared.last_words()),
                    hung: why.hung,
                }));
                drop(running);
                said
            }
            Err(why) => why,
        };
        if started.elapsed() >= SUSTAINED {
            backoff = FIRST_BACKOFF;
        }
        let down = format!("mcp server `{}` is down ({why})", server.name);
        tracing::warn!(server = %server.name, "{down}; restarting in {} ms", backoff.as_millis());
        source.set_state(kind, SourceState::Restarting, Some(backoff), &down);
        shared.set_up(Err(format!(
            "{down}; restarting in {} ms",
            backoff.as_millis()
        )));
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Starts the server and initializes it within the entry's bound: the running client, the
/// process, and where to say how it ended.
async fn start(
    server: &McpServer,
    workers: &WorkerOptions,
    home: &std::path::Path,
    shared: &Arc<Shared>,
) -> Result<
    (
        RunningService<RoleClient, Handler>,
        SandboxedChild,
        watch::Sender<Option<Down>>,
    ),
    String,
> {
    let mut command = SandboxedCommand::new(&server.command)
        .args(server.args.iter().cloned())
        .home(home)
        .options(server.sandbox_options(workers));
    if let Some(cwd) = &server.cwd {
        command = command.cwd(cwd);
    }
    let mut child = command
        .spawn()
        .await
        .map_err(|e| format!("`{}` could not be started: {e}", server.command))?;
    let (Some(stdout), Some(stdin), Some(stderr)) =
        (child.stdout.take(), child.stdin.take(), child.stderr.take())
    else {
        return Err("its standard streams could not be opened".into());
    };
    keep_stderr(stderr, shared.clone());
    *shared.broke.lock().unwrap_or_else(PoisonError::into_inner) = None;
    let notices = shared.clone();
    let stdout = crate::stdout::checked(stdout, shared.broke.clone(), move |notice| match notice {
        Notice::Progress(params) => notices.progress(&params),
        Notice::Log(level, text) => notices.log(level, &text),
    });
    let handler = Handler {
        shared: shared.clone(),
    };
    let (exited, _) = watch::channel(None);
    let serving = tokio::time::timeout(server.start_timeout(), handler.serve((stdout, stdin)));
    match serving.await {
        Ok(Ok(running)) => Ok((running, child, exited)),
        Ok(Err(e)) => {
            // A server that closed its side is ending: its own status says how, if it comes soon.
            let status = match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    child.kill();
                    child.wait().await
                }
            };
            let status = status.map(|s| s.to_string()).unwrap_or_default();
            Err(format!(
                "it did not initialize ({e}; {status}){}",
                shared.last_words()
            ))
        }
        Err(_) => {
            child.kill();
            Err(format!(
                "it did not initialize within {} ms",
                server.start_timeout_ms
            ))
        }
    }
}

/// Logs what of the server's sandbox is in force, and warns (an event) of what is missing.
fn say_sandbox(server: &McpServer, child: &SandboxedChild, source: &RemoteSource) {
    let report = child.report();
    tracing::info!(server = %server.name, "sandbox: {report}");
    if server.sandbox && !report.missing.is_empty() {
        source.bus().publish(
            None,
            rho_runtime::EventKind::Warning {
                subject: format!("mcp:{}", server.name),
                message: format!(
                    "mcp server `{}` runs with part of its sandbox missing: {}",
                    server.name,
                    report.missing.join("; ")
                ),
            },
        );
    }
}

/// Reads the server's stderr into the last [`STDERR_LINES`] lines, each cut at
/// [`STDERR_LINE_BYTES`]; a flood costs that much and no more.
fn keep_stderr(mut stderr: mpsc::Receiver<String>, shared: Arc<Shared>) {
    tokio::spawn(async move {
        while let Some(mut line) = stderr.recv().await {
            if line.len() > STDERR_LINE_BYTES {
                let mut cut = STDERR_LINE_BYTES;
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                line.truncate(cut);
            }
            tracing::debug!(server = %shared.name, "stderr: {line}");
            let mut kept = shared.stderr.lock().unwrap_or_else(PoisonError::into_inner);
            if kept.len() == STDERR_LINES {
                kept.pop_front();
            }
            kept.push_back(line);
        }
    });
}

/// Lists the server's tools and offers them.
async fn offer(
    peer: &Peer<RoleClient>,
    shared: &Arc<Shared>,
    source: &RemoteSource,
    server: &McpServer,
) {
    let tools = match peer.list_all_tools().await {
        Ok(tools) => tools,
        Err(e) => {
            tracing::warn!(server = %server.name, "listing its tools failed: {e}");
            return;
        }
    };
    let entries = tools
        .iter()
        .map(|tool| RemoteToolEntry {
            spec: convert::spec(&server.name, tool, server.tools.get(tool.name.as_ref())),
            origin: format!("mcp:{}", server.name),
            tool: Arc::new(crate::call::McpTool {
                shared: shared.clone(),
                name: tool.name.to_string(),
            }),
        })
        .collect();
    for refused in source.set_tools(entries) {
        tracing::warn!(server = %server.name, "{refused}");
        source.bus().publish(
            None,
            rho_runtime::EventKind::Warning {
                subject: format!("mcp:{}", server.name),
                message: refused,
            },
        );
    }
}

/// Serves until the server goes: its exit, its connection closing, or a hang found after a
/// call was given up. Returns why.
async fn serve(
    running: &RunningService<RoleClient, Handler>,
    child: &mut Option<SandboxedChild>,
    shared: &Arc<Shared>,
    source: &RemoteSource,
    server: &McpServer,
    given_up: &mut mpsc::UnboundedReceiver<String>,
) -> Down {
    let peer = running.peer().clone();
    let mut health = tokio::time::interval(HEALTH_EVERY);
    health.tick().await;
    loop {
        tokio::select! {
            status = wait_for(child) => {
                // A server whose stdout broke the protocol exits once its input is closed: the
                // broken line is why it went.
                return Down::because(exit_why(shared, status));
            }
            () = closed(&peer) => {
                let broke = shared.broke.lock().unwrap_or_else(PoisonError::into_inner).take();
                return Down::because(broke.unwrap_or_else(|| "closed its connection".into()));
            }
            () = shared.relist.notified() => offer(&peer, shared, source, server).await,
            _ = health.tick(), if shared.remote => {
                if !answers_ping(&peer).await {
                    return Down::because(unreachable());
                }
            }
            Some(tool) = given_up.recv() => {
                // A call given up (or, for a remote server, failed to reach it): is the server
                // still there? A local one gets a moment to take the cancellation first.
                if !shared.remote {
                    tokio::time::sleep(PING_AFTER).await;
                }
                if answers_ping(&peer).await {
                    continue;
                }
                if shared.remote {
                    return Down::because(unreachable());
                }
                return Down {
                    why: format!(
                        "hung: tool `{tool}` was given up and the server did not answer a \
                         ping within {} ms; killed and restarted",
                        PING_DEADLINE.as_millis()
                    ),
                    hung: Some(tool),
                };
            }
        }
    }
}

/// Whether the server answers a ping within [`PING_DEADLINE`].
async fn answers_ping(peer: &Peer<RoleClient>) -> bool {
    let ping = ClientRequest::PingRequest(PingRequest {
        method: Default::default(),
        extensions: Default::default(),
    });
    let answered = tokio::time::timeout(PING_DEADLINE, peer.send_request(ping)).await;
    matches!(answered, Ok(Ok(_)))
}

/// Why a remote server is down.
fn unreachable() -> String {
    format!(
        "unreachable: it did not answer a ping within {} ms; reconnecting",
        PING_DEADLINE.as_millis()
    )
}

/// The exit of `child`, if there is one (never, for a remote server).
async fn wait_for(child: &mut Option<SandboxedChild>) -> std::io::Result<std::process::ExitStatus> {
    match child {
        Some(child) => child.wait().await,
        None => std::future::pending().await,
    }
}

/// Why a server process that exited went: the protocol it broke on its stdout, else its status.
/// A server whose stdout broke the protocol exits once its input is closed: the broken line is
/// why it went.
fn exit_why(shared: &Shared, status: std::io::Result<std::process::ExitStatus>) -> String {
    if let Some(broke) = shared.take_broke() {
        return broke;
    }
    match status {
        Ok(status) => format!("exited ({status})"),
        Err(e) => format!("could not be waited for: {e}"),
    }
}

/// `stateless = true`: what a call needs to start a server process of its own.
pub(crate) struct PerCall {
    server: McpServer,
    workers: WorkerOptions,
    home: std::path::PathBuf,
}

impl PerCall {
    /// Starts and initializes a server process for one call: it, the calls and progress of its
    /// own, and the sender that ends it (dropped, it ends too: a call given up ends its process).
    pub async fn start(
        &self,
        source: &Shared,
    ) -> Result<(Process, Arc<Shared>, oneshot::Sender<()>), Failure> {
        let name = &self.server.name;
        // No hang check: the process ends with its call.
        let (abandoned, _) = mpsc::unbounded_channel();
        let own = Shared::new(name, abandoned, None, false);
        let (running, mut child, exited) = start(&self.server, &self.workers, &self.home, &own)
            .await
            .map_err(|why| {
                let text = format!("mcp server `{name}` could not start for the call: {why}");
                tracing::warn!(server = %source.name, "{text}");
                Failure::Unavailable(text)
            })?;
        let process = Process {
            peer: running.peer().clone(),
            ended: exited.subscribe(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let watched = own.clone();
        tokio::spawn(async move {
            let exit = tokio::select! {
                status = child.wait() => Some(exit_why(&watched, status)),
                _ = stopped => None,
            };
            child.kill();
            let _ = child.wait().await;
            if let Some(why) = exit {
                let _ = exited.send(Some(Down::because(format!(
                    "{why}{}",
                    watched.last_words()
                ))));
            }
            drop(running);
        });
        Ok((process, own, stop))
    }
}

/// Resolves once the peer's connection is closed.
async fn closed(peer: &Peer<RoleClient>) {
    loop {
        if peer.is_transport_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The client side of the connection: log lines and questions to the calls they belong to, list
/// changes to the supervisor (a stdio server's progress and log lines are read on the way in:
/// `crate::stdout`; a remote server's come here).
#[derive(Clone)]
pub(crate) struct Handler {
    pub shared: Arc<Shared>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(Default::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("rho", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if self.shared.remote {
            self.shared.progress(&params);
        }
    }

    #[allow(deprecated)] // MCP logging: see `crate::logs`.
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if self.shared.remote {
            crate::logs::deliver(&self.shared, params);
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.shared.relist.notify_one();
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return Ok(declined());
        };
        let Some(ctx) = self.shared.current(false) else {
            return Ok(declined());
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or_default();
        let (action, content) = match ctx.ask(Question::new(message, schema)).await {
            Reply::Accepted(answer) => (ElicitationAction::Accept, Some(answer)),
            Reply::Declined(_) => (ElicitationAction::Decline, None),
            Reply::Cancelled(_) => (ElicitationAction::Cancel, None),
        };
        let mut result = declined();
        result.action = action;
        result.content = content;
        Ok(result)
    }
}

fn declined() -> ElicitResult {
    ElicitResult::new(ElicitationAction::Decline)
}
