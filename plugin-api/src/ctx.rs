//! [`Ctx`]: what a tool knows about the call it serves.

use std::borrow::Cow;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[cfg(not(target_arch = "wasm32"))]
use abi_stable::std_types::{RSlice, RStr};

#[cfg(not(target_arch = "wasm32"))]
use crate::ffi::{FfiCallInfo, FfiCtx, FfiHost, FfiQuestion, FfiReplyKind};
use crate::{LogLevel, Question, Reply};

/// The context of one call, handed to a tool function by reference for the duration of the call.
///
/// Through it a tool reads its call id, polls whether the host has given up on the call
/// ([`Ctx::is_cancelled`]), sends partial updates ([`Ctx::update`]) and log lines ([`Ctx::log`]),
/// asks the user ([`Ctx::ask`]), reads how long it has left ([`Ctx::time_left`]) and the call's
/// trace context ([`Ctx::traceparent`]). For unit tests, [`Ctx::detached`] builds one without a
/// host.
///
/// ```
/// use std::time::Duration;
/// use rho_plugin_api::Ctx;
/// let ctx = Ctx::detached("call-1")
///     .with_time_left(Duration::from_secs(5))
///     .with_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// assert!(ctx.time_left().is_some_and(|left| left <= Duration::from_secs(5)));
/// assert!(ctx.traceparent().starts_with("00-4bf9"));
/// ```
pub struct Ctx {
    inner: Inner,
    /// Moved later by each question's wait.
    deadline: Mutex<Option<Instant>>,
    traceparent: Cow<'static, str>,
}

enum Inner {
    /// A context from a host; valid only while the call runs (tools only ever see `&Ctx`). A
    /// host of interface 3 or later offers its functions too.
    #[cfg(not(target_arch = "wasm32"))]
    Host(FfiCtx<'static>, Option<FfiHost<'static>>),
    /// A component's call: the host's functions are the world's `host` imports.
    #[cfg(target_arch = "wasm32")]
    Component { call_id: String },
    /// A context without a host, for tests.
    Detached {
        call_id: String,
        cancelled: AtomicBool,
        updates: Mutex<Vec<String>>,
        logs: Mutex<Vec<(LogLevel, String)>>,
        /// Replies still to give, first first.
        replies: Mutex<std::collections::VecDeque<Reply>>,
        asked: Mutex<Vec<Question>>,
    },
}

impl Ctx {
    /// A component's context for the duration of `f`. Not for plugin authors.
    #[cfg(target_arch = "wasm32")]
    #[doc(hidden)]
    pub fn with_component<R>(
        info: crate::wasm::bindings::exports::rho::plugin::tools::CallInfo,
        f: impl FnOnce(&Ctx) -> R,
    ) -> R {
        let deadline = info
            .time_left_ms
            .and_then(|ms| Instant::now().checked_add(Duration::from_millis(ms)));
        let ctx = Ctx {
            inner: Inner::Component {
                call_id: info.call_id,
            },
            deadline: Mutex::new(deadline),
            traceparent: Cow::Owned(info.traceparent),
        };
        f(&ctx)
    }

    /// Wraps a host's context for the duration of `f`. Not for plugin authors.
    #[cfg(not(target_arch = "wasm32"))]
    #[doc(hidden)]
    pub fn with_host<R>(
        ffi: FfiCtx<'_>,
        info: Option<FfiCallInfo<'_>>,
        host: Option<FfiHost<'_>>,
        f: impl FnOnce(&Ctx) -> R,
    ) -> R {
        let deadline = info
            .and_then(|i| i.time_left_ms.into_option())
            .and_then(|ms| Instant::now().checked_add(Duration::from_millis(ms)));
        // SAFETY: the 'static is never observable: `f` only gets `&Ctx`, whose lifetime ends before
        // this function returns, and `Ctx` hands out nothing that outlives `&self`.
        let ffi: FfiCtx<'static> =
            unsafe { std::mem::transmute::<FfiCtx<'_>, FfiCtx<'static>>(ffi) };
        // SAFETY: as above.
        let host: Option<FfiHost<'static>> =
            unsafe { std::mem::transmute::<Option<FfiHost<'_>>, Option<FfiHost<'static>>>(host) };
        // SAFETY: as above; the host's text is valid for the call and checked to be UTF-8 here.
        let traceparent: &'static str = match info {
            Some(info) => unsafe {
                let bytes =
                    std::slice::from_raw_parts(info.traceparent.as_ptr(), info.traceparent.len());
                std::mem::transmute::<&str, &'static str>(
                    std::str::from_utf8(bytes).unwrap_or_default(),
                )
            },
            None => "",
        };
        let ctx = Ctx {
            inner: Inner::Host(ffi, host),
            deadline: Mutex::new(deadline),
            traceparent: Cow::Borrowed(traceparent),
        };
        f(&ctx)
    }

    /// A context without a host, for calling tool functions directly in tests. It records the
    /// updates and log lines sent through it ([`Ctx::sent_updates`], [`Ctx::sent_logs`]) and can
    /// be cancelled ([`Ctx::cancel`]).
    pub fn detached(call_id: impl Into<String>) -> Self {
        Ctx {
            inner: Inner::Detached {
                call_id: call_id.into(),
                cancelled: AtomicBool::new(false),
                updates: Mutex::new(Vec::new()),
                logs: Mutex::new(Vec::new()),
                replies: Mutex::default(),
                asked: Mutex::default(),
            },
            deadline: Mutex::new(None),
            traceparent: Cow::Borrowed(""),
        }
    }

    /// The same context with `left` until its deadline, as a host's timeout gives (tests).
    pub fn with_time_left(self, left: Duration) -> Self {
        self.set_deadline(Instant::now().checked_add(left));
        self
    }

    /// The same context answering its questions ([`Ctx::ask`]) with `replies`, in order (tests);
    /// once they are used up, it declines.
    pub fn with_replies(self, replies: impl IntoIterator<Item = Reply>) -> Self {
        if let Inner::Detached { replies: queue, .. } = &self.inner
            && let Ok(mut queue) = queue.lock()
        {
            queue.extend(replies);
        }
        self
    }

    fn set_deadline(&self, deadline: Option<Instant>) {
        if let Ok(mut at) = self.deadline.lock() {
            *at = deadline;
        }
    }

    /// The same context with a W3C `traceparent` (tests).
    pub fn with_traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Cow::Owned(traceparent.into());
        self
    }

    /// When the host will give up on this call (its timeout), if the host said: the clock starts
    /// when the host's gate allows the call. `None` from a host of interface 1 or without a
    /// timeout.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline.lock().ok().and_then(|at| *at)
    }

    /// How long until [`Ctx::deadline`], zero once it has passed; `None` without a deadline.
    /// A tool that can do less work in less time (fewer results, a coarser search) reads this.
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline()
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// The call's W3C trace context (`traceparent` header value: `00-<trace id>-<parent id>-<flags>`)
    /// to hand on to services the tool calls; empty when the call has none.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The call's id, as the model gave it.
    pub fn call_id(&self) -> &str {
        match &self.inner {
            #[cfg(not(target_arch = "wasm32"))]
            Inner::Host(ffi, _) => ffi.call_id.as_str(),
            #[cfg(target_arch = "wasm32")]
            Inner::Component { call_id } => call_id,
            Inner::Detached { call_id, .. } => call_id,
        }
    }

    /// Whether the host has given up on this call (its timeout expired or it was cancelled).
    /// A long-running tool should poll this and return early; one that does not keeps its thread
    /// busy after the host has moved on.
    pub fn is_cancelled(&self) -> bool {
        match &self.inner {
            #[cfg(not(target_arch = "wasm32"))]
            Inner::Host(ffi, _) => ffi.is_cancelled(),
            #[cfg(target_arch = "wasm32")]
            Inner::Component { .. } => crate::wasm::host::is_cancelled(),
            Inner::Detached { cancelled, .. } => cancelled.load(Ordering::Relaxed),
        }
    }

    /// Sends a partial update (text) to the host while the tool runs. Screens show it as
    /// `tool_execution_update`; it is not part of the answer.
    pub fn update(&self, partial: impl AsRef<str>) {
        match &self.inner {
            #[cfg(not(target_arch = "wasm32"))]
            Inner::Host(ffi, _) => (ffi.send_update)(ffi.sink, RStr::from_str(partial.as_ref())),
            #[cfg(target_arch = "wasm32")]
            Inner::Component { .. } => crate::wasm::host::update(partial.as_ref()),
            Inner::Detached { updates, .. } => {
                if let Ok(mut updates) = updates.lock() {
                    updates.push(partial.as_ref().to_owned());
                }
            }
        }
    }

    /// Writes a log line of the call at `level`. A host shows it in its journal and views and
    /// sends it to an MCP client that asked for that level (`logging/setLevel`); it is not part
    /// of the answer. A host of interface 2 or older drops it.
    ///
    /// ```
    /// use rho_plugin_api::{Ctx, LogLevel};
    /// let ctx = Ctx::detached("call-1");
    /// ctx.log(LogLevel::Warning, "the cache is cold");
    /// assert_eq!(ctx.sent_logs(), [(LogLevel::Warning, "the cache is cold".to_owned())]);
    /// ```
    pub fn log(&self, level: LogLevel, line: impl AsRef<str>) {
        match &self.inner {
            #[cfg(not(target_arch = "wasm32"))]
            Inner::Host(_, Some(host)) => {
                (host.fns.log())(host.sink, level as u8, RStr::from_str(line.as_ref()))
            }
            #[cfg(not(target_arch = "wasm32"))]
            Inner::Host(_, None) => {}
            #[cfg(target_arch = "wasm32")]
            Inner::Component { .. } => crate::wasm::host::log(level, line.as_ref()),
            Inner::Detached { logs, .. } => {
                if let Ok(mut logs) = logs.lock() {
                    logs.push((level, line.as_ref().to_owned()));
                }
            }
        }
    }

    /// Asks the user `question` and waits for the reply: the tool's thread blocks until it comes.
    ///
    /// The wait is the user's time, not the tool's: the host moves the call's deadline later by
    /// exactly the time the question was open, and [`Ctx::time_left`] reads the moved deadline
    /// once the reply is in. The host bounds the wait (a reply of [`Reply::Cancelled`] when the
    /// bound passes, or when the call is cancelled meanwhile). A host with no one to ask (no
    /// client that can, a host built before interface 3) declines with a reason the tool can
    /// pass on.
    ///
    /// ```
    /// use rho_plugin_api::{Ctx, Question, Reply, json};
    /// let ctx = Ctx::detached("call-1").with_replies([Reply::Accepted(json!({"confirm": true}))]);
    /// assert!(ctx.ask(Question::confirm("Delete 3 files?")).confirmed());
    /// // Used up: a detached context declines.
    /// assert!(matches!(ctx.ask(Question::confirm("And 3 more?")), Reply::Declined(_)));
    /// assert_eq!(ctx.asked().len(), 2);
    /// ```
    pub fn ask(&self, question: Question) -> Reply {
        self.ask_all(vec![question])
            .pop()
            .unwrap_or_else(|| Reply::Cancelled("the host gave no reply".into()))
    }

    /// Asks the user several questions at once and waits until every reply is in: one reply
    /// per question, in their order. A client that can shows them together (an MCP client gets
    /// them in one `inputRequests`, each under its [`Question::key`], and may answer them one at
    /// a time); a host that cannot asks them one after another. The wait is the user's time, as
    /// with [`Ctx::ask`].
    ///
    /// ```
    /// use rho_plugin_api::{Ctx, Question, Reply, json};
    /// let ctx = Ctx::detached("call-1").with_replies([
    ///     Reply::Accepted(json!({"name": "Ada"})),
    ///     Reply::Declined("no".into()),
    /// ]);
    /// let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    /// let replies = ctx.ask_all(vec![
    ///     Question::new("Your name?", schema.clone()).with_key("name"),
    ///     Question::confirm("Proceed?").with_key("proceed"),
    /// ]);
    /// assert_eq!(replies[0].accepted().unwrap()["name"], "Ada");
    /// assert!(!replies[1].confirmed());
    /// ```
    pub fn ask_all(&self, questions: Vec<Question>) -> Vec<Reply> {
        match &self.inner {
            #[cfg(target_arch = "wasm32")]
            Inner::Component { .. } => questions
                .iter()
                .map(|question| {
                    let (reply, left) = crate::wasm::host::ask(question);
                    self.set_time_left(left);
                    reply
                })
                .collect(),
            #[cfg(not(target_arch = "wasm32"))]
            Inner::Host(_, Some(host)) => {
                let schemas: Vec<String> = questions.iter().map(|q| q.schema.to_string()).collect();
                if let Some(ask_all) = host.fns.ask_all() {
                    let ffi: Vec<FfiQuestion<'_>> = questions
                        .iter()
                        .zip(&schemas)
                        .map(|(q, schema)| FfiQuestion {
                            key: RStr::from_str(q.key.as_deref().unwrap_or_default()),
                            message: RStr::from_str(&q.message),
                            schema_json: RStr::from_str(schema),
                        })
                        .collect();
                    let replies = ask_all(host.sink, RSlice::from_slice(&ffi));
                    let mut replies: Vec<Reply> =
                        replies.into_iter().map(|r| self.reply_of(r)).collect();
                    replies.resize_with(questions.len(), || {
                        Reply::Cancelled("the host gave no reply".into())
                    });
                    return replies;
                }
                let Some(ask) = host.fns.ask() else {
                    return questions
                        .iter()
                        .map(|_| {
                            Reply::Declined(
                                "this host cannot ask its user (it is older than interface 3's \
                                 questions)"
                                    .into(),
                            )
                        })
                        .collect();
                };
                // A host of interface 3: one after another, named by the host.
                questions
                    .iter()
                    .zip(&schemas)
                    .map(|(q, schema)| {
                        self.reply_of(ask(
                            host.sink,
                            RStr::from_str(&q.message),
                            RStr::from_str(schema),
                        ))
                    })
                    .collect()
            }
            #[cfg(not(target_arch = "wasm32"))]
            Inner::Host(_, None) => questions
                .iter()
                .map(|_| {
                    Reply::Declined(
                        "this host cannot ask its user (it is older than interface 3)".into(),
                    )
                })
                .collect(),
            Inner::Detached { replies, asked, .. } => {
                let n = questions.len();
                if let Ok(mut asked) = asked.lock() {
                    asked.extend(questions);
                }
                (0..n)
                    .map(|_| {
                        replies
                            .lock()
                            .ok()
                            .and_then(|mut r| r.pop_front())
                            .unwrap_or_else(|| {
                                Reply::Declined("no one to ask: a detached context".into())
                            })
                    })
                    .collect()
            }
        }
    }

    /// The deadline after a reply that says `left` milliseconds remain.
    fn set_time_left(&self, left: Option<u64>) {
        self.set_deadline(
            left.and_then(|ms| Instant::now().checked_add(Duration::from_millis(ms))),
        );
    }

    /// A host's reply as the tool reads it; the deadline moved as it says.
    #[cfg(not(target_arch = "wasm32"))]
    fn reply_of(&self, reply: crate::ffi::FfiReply) -> Reply {
        self.set_time_left(reply.time_left_ms.into_option());
        let text = reply.text.into_string();
        match reply.kind {
            FfiReplyKind::Accepted => match serde_json::from_str(&text) {
                Ok(value) => Reply::Accepted(value),
                Err(e) => Reply::Cancelled(format!("the host's answer is not JSON: {e}")),
            },
            FfiReplyKind::Declined => Reply::Declined(text),
            FfiReplyKind::Cancelled => Reply::Cancelled(text),
        }
    }

    /// The questions asked through a detached context so far (empty for a host's context).
    pub fn asked(&self) -> Vec<Question> {
        match &self.inner {
            Inner::Detached { asked, .. } => asked.lock().map(|a| a.clone()).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The log lines written through a detached context so far (empty for a host's context).
    pub fn sent_logs(&self) -> Vec<(LogLevel, String)> {
        match &self.inner {
            Inner::Detached { logs, .. } => logs.lock().map(|l| l.clone()).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Marks a detached context cancelled (no effect on a host's context).
    pub fn cancel(&self) {
        if let Inner::Detached { cancelled, .. } = &self.inner {
            cancelled.store(true, Ordering::Relaxed);
        }
    }

    /// The updates sent through a detached context so far (empty for a host's context).
    pub fn sent_updates(&self) -> Vec<String> {
        match &self.inner {
            Inner::Detached { updates, .. } => {
                updates.lock().map(|u| u.clone()).unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }
}
