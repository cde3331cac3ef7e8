//! What a source's supervisor, its calls and its client handler share: the server process up
//! now ([`Process`], [`Down`]) and the calls in flight with their progress ([`Shared`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use rho_runtime::{Failure, ToolCtx};
use rmcp::model::{NumberOrString, ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleClient};
use tokio::sync::{Notify, mpsc, oneshot, watch};

/// A call in flight on a server.
pub(crate) struct InFlightCall {
    pub ctx: ToolCtx,
    /// Its tool.
    pub tool: String,
    /// When it was sent.
    pub since: Instant,
}

/// A call given up before its answer (its timeout, a cancellation): its tool and when it was
/// sent, to find the call a hung server is stuck in (the oldest).
pub(crate) struct GivenUp {
    pub tool: String,
    pub since: Instant,
}

/// How many progress notes of calls not yet registered are kept.
const EARLY_PROGRESS: usize = 64;

/// A server process started for one call (`stateless = true`): it, the calls and progress of its
/// own, and the sender that ends it (dropped, it ends too).
pub(crate) type CallProcess = (Process, Arc<Shared>, oneshot::Sender<()>);

/// How a stateless server's call gets a server process of its own (the supervisor knows how to
/// start one).
pub(crate) trait PerCall: Send + Sync {
    /// Starts and initializes a server process for one call of `source`'s.
    fn start<'a>(
        &'a self,
        source: &'a Shared,
    ) -> Pin<Box<dyn Future<Output = Result<CallProcess, Failure>> + Send + 'a>>;
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
    pub fn because(why: impl Into<String>) -> Down {
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
    pub up: Mutex<Result<Arc<Process>, String>>,
    /// The calls in flight, by the progress token rmcp gave their request.
    pub calls: Mutex<BTreeMap<String, InFlightCall>>,
    /// Progress that came before its call was registered (rmcp names a request's token only once
    /// it is sent): a few, briefly.
    pub early: Mutex<std::collections::VecDeque<(String, String)>>,
    /// The server said its tool list changed.
    pub relist: Notify,
    /// A call was given up: check the server is not hung.
    pub abandoned: mpsc::UnboundedSender<GivenUp>,
    /// The server's last stderr lines.
    pub stderr: Mutex<std::collections::VecDeque<String>>,
    /// How the running server broke the protocol on its stdout, once it has.
    pub broke: Arc<Mutex<Option<String>>>,
    /// `stateless = true`: how each call starts a server process of its own.
    pub per_call: Option<Arc<dyn PerCall>>,
    /// A Streamable HTTP server: pinged while it serves; its notifications come through rmcp.
    pub remote: bool,
}

impl Shared {
    pub fn new(
        name: &str,
        abandoned: mpsc::UnboundedSender<GivenUp>,
        per_call: Option<Arc<dyn PerCall>>,
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

    pub fn set_up(&self, up: Result<Arc<Process>, String>) {
        *self.up.lock().unwrap_or_else(PoisonError::into_inner) = up;
    }

    /// The one call in flight, if exactly one is: a log line or a question the server sends
    /// belongs to it (with several, a question could reach another caller than the one it is
    /// for, so none does).
    pub fn current(&self) -> Option<ToolCtx> {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if calls.len() != 1 {
            return None;
        }
        calls.values().next().map(|call| call.ctx.clone())
    }

    /// The tool of the oldest call in flight, and since when, if any.
    pub fn oldest(&self) -> Option<(String, Instant)> {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls
            .values()
            .min_by_key(|call| call.since)
            .map(|call| (call.tool.clone(), call.since))
    }

    /// Registers the call of `token` (of `tool`, sent at `since`), handing it the progress that
    /// came before.
    pub fn register(&self, token: &str, tool: &str, since: Instant, ctx: &ToolCtx) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                token.to_owned(),
                InFlightCall {
                    ctx: ctx.clone(),
                    tool: tool.to_owned(),
                    since,
                },
            );
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
        let token = token_key(&params.progress_token);
        let ctx = self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&token)
            .map(|call| call.ctx.clone());
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
    pub fn take_broke(&self) -> Option<String> {
        self.broke
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Hands a log line of the server's to the one call in flight, if exactly one is (it is that
    /// call's), else to the host's log.
    pub fn log(&self, level: rho_runtime::LogLevel, text: &str) {
        match self.current() {
            Some(ctx) => ctx.log(level, text),
            None => tracing::info!(server = %self.name, "log: {text}"),
        }
    }

    /// The server's last stderr line, for texts that say how it ended.
    pub fn last_words(&self) -> String {
        let stderr = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        match stderr.back() {
            Some(line) => format!(" (its last words: {line})"),
            None => String::new(),
        }
    }
}

/// A progress token as the calls' map keys it.
pub(crate) fn token_key(token: &ProgressToken) -> String {
    match &token.0 {
        NumberOrString::Number(n) => n.to_string(),
        NumberOrString::String(s) => format!("s:{s}"),
    }
}
