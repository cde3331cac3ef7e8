//! Calling a loaded plugin on the current thread: synchronous FFI, the answer copied into host
//! data (checked: UTF-8, the answer codec's limits) before it leaves the call. Its JSON parts are
//! parsed where they are used: in process at once ([`call_module`]); isolated, by the host, from
//! the text the worker forwards ([`call_module`]), so they are parsed once on their way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use abi_stable::std_types::{ROption, RResult, RStr, RString};
use rho_plugin_api::Answer;
use rho_plugin_api::LogLevel;
use rho_plugin_api::ffi::{
    CheckedQuestion, FfiAnswer2, FfiAnswer3, FfiCallInfo, FfiCtx, FfiHost, FfiOutcome3, FfiReply,
    FfiReplyKind, HostServices, PluginModRef,
};
use rho_plugin_api::{BlockHead, Image, Output, Question, Reply};
use rho_protocol::answer::{self, FailureKind};
use rho_protocol::{CrashReason, Failure};

use crate::loader::abi::{plain_text, uses_interface};

/// A plugin's answer copied into host data with its JSON parts (details, structured content) as
/// the plugin wrote them: UTF-8, not parsed. A worker forwards them so; the host parses each once,
/// held to the answer codec's limits ([`RawAnswer::parse`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RawAnswer {
    /// The output, its text and images checked.
    pub output: Output,
    /// Structured content, JSON text.
    pub structured: Option<String>,
    /// Details, JSON text.
    pub details: Option<String>,
}

/// Why a plugin gave no answer, its details (if any) still JSON text.
#[derive(Debug, Clone, PartialEq)]
pub enum RawFailure {
    /// The plugin said why: its kind, its message, and for an error its details.
    Failed {
        /// What kind of failure the plugin reported.
        kind: FailureKind,
        /// Its message (a panic's names the tool).
        message: String,
        /// An error's details, JSON text.
        details: Option<String>,
    },
    /// The answer broke the plugin's contract or the codec's limits.
    Broken(Failure),
}

impl RawAnswer {
    /// The answer with its JSON parts parsed: over
    /// [`MAX_DETAILS_BYTES`](rho_protocol::answer::MAX_DETAILS_BYTES) a part is the tool's error,
    /// text that is not JSON (or nests too deep) makes the call crash, naming the part.
    pub fn parse(self, tool: &str) -> Result<Answer, Failure> {
        let part = |what: &str, json: Option<String>| {
            json.map(|json| answer::json_part(tool, what, &json))
                .transpose()
        };
        let structured = part("structured content", self.structured)?;
        let details = part("details", self.details)?;
        Ok(Answer {
            output: self.output,
            structured,
            details,
        })
    }
}

impl RawFailure {
    /// The failure with an error's details parsed (see [`RawAnswer::parse`]).
    pub fn parse(self, tool: &str) -> Failure {
        match self {
            RawFailure::Failed {
                kind,
                message,
                details,
            } => answer::failure(kind, message, || {
                details
                    .map(|json| answer::json_part(tool, "details", &json))
                    .transpose()
            }),
            RawFailure::Broken(failure) => failure,
        }
    }
}

/// Copies a plugin's answer into host-owned data, its JSON parts as text ([`RawAnswer`]). Text,
/// mime types, messages or details that are not UTF-8 make the call crash with a text naming the
/// field: the plugin broke its contract. More than [`MAX_IMAGES`](rho_protocol::answer::MAX_IMAGES)
/// images is the tool's error, and what lies past the limit is not copied.
pub fn raw_answer_from_ffi(tool: &str, outcome: FfiOutcome3) -> Result<RawAnswer, RawFailure> {
    let broken = |what: &str| {
        RawFailure::Broken(Failure::Crash(CrashReason::Formatted(format!(
            "tool `{tool}` answered with {what} not UTF-8"
        ))))
    };
    let json = |what: &str, json: ROption<RString>| match json.into_option() {
        None => Ok(None),
        Some(json) => plain_text(json)
            .map(Some)
            .ok_or_else(|| broken(&format!("{what} that are"))),
    };
    match outcome {
        RResult::ROk(FfiAnswer3 {
            answer:
                FfiAnswer2 {
                    answer,
                    structured_json,
                },
            blocks,
        }) => {
            if !blocks.is_empty() {
                let structured = json("structured content", structured_json)?;
                let details = json("details", answer.details_json)?;
                let count = blocks.len();
                if count > answer::MAX_BLOCKS {
                    return Err(RawFailure::Broken(answer::too_many_blocks(tool, count)));
                }
                let mut parts = Vec::with_capacity(count);
                for block in blocks {
                    let head =
                        plain_text(block.head_json).ok_or_else(|| broken("a block that is"))?;
                    let head = serde_json::from_str::<BlockHead>(&head).map_err(|e| {
                        RawFailure::Broken(Failure::Crash(CrashReason::Formatted(format!(
                            "tool `{tool}` answered with a block head that is not one: {e}"
                        ))))
                    })?;
                    parts.push((head, block.payload.into_vec()));
                }
                let output = answer::blocks(tool, count, parts).map_err(RawFailure::Broken)?;
                return Ok(RawAnswer {
                    output,
                    structured,
                    details,
                });
            }
            if answer.images.len() > answer::MAX_IMAGES {
                return Err(RawFailure::Broken(answer::too_many_images(
                    tool,
                    answer.images.len(),
                )));
            }
            let structured = json("structured content", structured_json)?;
            let details = json("details", answer.details_json)?;
            let text = plain_text(answer.text).ok_or_else(|| broken("a text that is"))?;
            let mut images = Vec::with_capacity(answer.images.len());
            for image in answer.images {
                let mime =
                    plain_text(image.mime_type).ok_or_else(|| broken("a mime type that is"))?;
                images.push(Image::new(mime, image.bytes.as_slice()));
            }
            let output = answer::output(tool, answer.kind.into(), text, images)
                .map_err(RawFailure::Broken)?;
            Ok(RawAnswer {
                output,
                structured,
                details,
            })
        }
        RResult::RErr(failure) => {
            let message =
                plain_text(failure.message).ok_or_else(|| broken("an error message that is"))?;
            let kind = FailureKind::from(failure.kind);
            // A panic's message from the plugin's glue does not name the tool; the host does.
            let message = match kind {
                FailureKind::Panic => format!("tool `{tool}` {message}"),
                _ => message,
            };
            let details = match kind {
                FailureKind::Error => json("details", failure.details_json)?,
                _ => None,
            };
            Err(RawFailure::Failed {
                kind,
                message,
                details,
            })
        }
    }
}

/// What a plugin is told about a call besides its arguments (interface 2; a plugin of interface
/// 1 is told nothing of it), and where its log lines and questions go (interface 3; older
/// plugins write and ask none).
#[derive(Clone, Copy, Default)]
pub struct CallInfo<'a> {
    /// Time left until the host ends the call, as of now.
    pub time_left: Option<Duration>,
    /// The call's W3C `traceparent`; empty when none.
    pub traceparent: &'a str,
    /// Receives each log line of the call, checked.
    pub on_log: Option<OnLog<'a>>,
    /// Answers each question of the call, checked; without it every question is declined.
    pub on_ask: Option<OnAsk<'a>>,
}

/// Where a call's log lines go, checked: their level and their text.
pub type OnLog<'a> = &'a (dyn Fn(LogLevel, &str) + Sync);

/// Who answers a call's questions, asked together: one reply per question, in order, and the
/// call's time left once they came (the wait moved the deadline). Blocks the plugin's thread
/// until then.
pub type OnAsk<'a> = &'a (dyn Fn(Vec<Question>) -> (Vec<Reply>, Option<Duration>) + Sync);

/// A call's services as the plugin reaches them ([`HostServices`]): each line and question
/// checked; what breaks the contract is remembered and crashes the call when it ends.
struct CallServices<'a> {
    info: CallInfo<'a>,
    bad_log: AtomicBool,
    bad_question: AtomicBool,
}

impl CallServices<'_> {
    /// One of the questions asked together, checked: text, its key (valid, not taken by an
    /// earlier one of them), the size of all of them so far (`total`), its schema. What breaks
    /// the contract (text that is not UTF-8, a schema that is not JSON) is remembered and
    /// crashes the call when it ends; a question too large or a bad key is declined.
    fn checked(
        &self,
        q: &CheckedQuestion<'_>,
        total: &mut usize,
        keys: &mut std::collections::HashSet<String>,
    ) -> Result<Question, Reply> {
        let (Some(key), Some(message), Some(schema)) = (q.key, q.message, q.schema_json) else {
            self.bad_question.store(true, Ordering::Relaxed);
            return Err(Reply::Cancelled("the question is not UTF-8 text".into()));
        };
        let too_large = |total: usize| {
            Reply::Declined(format!(
                "the questions are {total} bytes or more; the questions asked together may be at \
                 most {} bytes",
                answer::MAX_QUESTION_BYTES
            ))
        };
        *total = total
            .saturating_add(key.len())
            .saturating_add(message.len())
            .saturating_add(schema.len());
        if *total > answer::MAX_QUESTION_BYTES {
            return Err(too_large(*total));
        }
        if !key.is_empty() && !rho_plugin_api::is_valid_key(key) {
            return Err(Reply::Declined(format!(
                "the question's key is not 1 to {} letters, digits, `_`, `.` or `-`",
                rho_plugin_api::MAX_KEY_LEN
            )));
        }
        if !key.is_empty() && !keys.insert(key.to_owned()) {
            return Err(Reply::Declined(format!(
                "another question asked with it has the key `{key}`"
            )));
        }
        let raw_len = schema.len();
        let schema = match rho_protocol::details::parse(schema) {
            Ok(schema) => schema,
            Err(e) => {
                self.bad_question.store(true, Ordering::Relaxed);
                return Err(Reply::Cancelled(format!("the question's schema {e}")));
            }
        };
        // What crosses to the host is the schema written again, which may be longer (`1e15`
        // becomes `1000000000000000.0`): the bound holds for that.
        let written_len = schema.to_string().len();
        *total = total.saturating_add(written_len.saturating_sub(raw_len));
        if *total > answer::MAX_QUESTION_BYTES {
            return Err(too_large(*total));
        }
        let question = Question::new(message, schema);
        Ok(if key.is_empty() {
            question
        } else {
            question.with_key(key)
        })
    }
}

impl HostServices for CallServices<'_> {
    fn log(&self, level: Option<LogLevel>, line: Option<&str>) {
        match (level, line) {
            (Some(level), Some(line)) if !self.bad_log.load(Ordering::Relaxed) => {
                if let Some(on_log) = self.info.on_log {
                    on_log(level, line);
                }
            }
            (Some(_), Some(_)) => {}
            _ => self.bad_log.store(true, Ordering::Relaxed),
        }
    }

    fn ask(&self, asked: &[CheckedQuestion<'_>]) -> Vec<FfiReply> {
        let reply = |reply: Reply, left: Option<Duration>| {
            let (kind, text) = match reply {
                Reply::Accepted(value) => (FfiReplyKind::Accepted, value.to_string()),
                Reply::Declined(why) => (FfiReplyKind::Declined, why),
                Reply::Cancelled(why) => (FfiReplyKind::Cancelled, why),
            };
            FfiReply {
                kind,
                text: text.into(),
                time_left_ms: left
                    .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
                    .into(),
            }
        };
        // Each question checked; those that fail get their reply here, the others are asked
        // together.
        let mut replies: Vec<Option<Reply>> = Vec::with_capacity(asked.len());
        let mut questions = Vec::new();
        let mut total = 0usize;
        let mut keys = std::collections::HashSet::new();
        for (n, q) in asked.iter().enumerate() {
            if n >= answer::MAX_QUESTIONS_AT_ONCE {
                replies.push(Some(Reply::Declined(format!(
                    "a tool may ask at most {} questions together",
                    answer::MAX_QUESTIONS_AT_ONCE
                ))));
                continue;
            }
            match self.checked(q, &mut total, &mut keys) {
                Ok(question) => {
                    questions.push(question);
                    replies.push(None);
                }
                Err(refused) => replies.push(Some(refused)),
            }
        }
        let (mut answers, left) = match (self.info.on_ask, questions.is_empty()) {
            (_, true) => (Vec::new(), self.info.time_left),
            (Some(on_ask), false) => {
                let n = questions.len();
                let (mut answers, left) = on_ask(questions);
                answers.resize_with(n, || {
                    Reply::Cancelled("the call ended before the question was answered".into())
                });
                (answers, left)
            }
            (None, false) => (
                questions
                    .iter()
                    .map(|_| Reply::Declined("no one can be asked here".into()))
                    .collect(),
                self.info.time_left,
            ),
        };
        answers.reverse();
        replies
            .into_iter()
            .map(|r| {
                let r = r
                    .or_else(|| answers.pop())
                    .unwrap_or_else(|| Reply::Cancelled("no reply came".into()));
                reply(r, left)
            })
            .collect()
    }
}

/// The answer of a call with its JSON parts parsed and checked (what an in-process host hands
/// on): [`RawAnswer::parse`] or [`RawFailure::parse`].
pub fn parse_outcome(tool: &str, raw: Result<RawAnswer, RawFailure>) -> Result<Answer, Failure> {
    match raw {
        Ok(raw) => raw.parse(tool),
        Err(raw) => Err(raw.parse(tool)),
    }
}

/// Calls `tool` of `module` on the current thread and copies the answer, its JSON parts as the
/// plugin wrote them ([`raw_answer_from_ffi`]). A partial update or a log line that is not UTF-8,
/// or a log line of a level that is none, is not forwarded and makes the call crash when it ends.
pub fn call_module(
    module: PluginModRef,
    tool: &str,
    args_json: &str,
    call_id: &str,
    cancelled: &AtomicBool,
    on_update: &(dyn Fn(&str) + Sync),
    info: CallInfo<'_>,
) -> Result<RawAnswer, RawFailure> {
    let bad_update = AtomicBool::new(false);
    let checked = |update: Option<&str>| match update {
        Some(text) if !bad_update.load(Ordering::Relaxed) => on_update(text),
        Some(_) => {}
        None => bad_update.store(true, Ordering::Relaxed),
    };
    let checked: &(dyn Fn(Option<&str>) + Sync) = &checked;
    let services = CallServices {
        info,
        bad_log: AtomicBool::new(false),
        bad_question: AtomicBool::new(false),
    };
    let host: &dyn HostServices = &services;
    let ctx = FfiCtx::new(call_id, cancelled, &checked);
    let (tool_name, args) = (RStr::from_str(tool), RStr::from_str(args_json));
    let ffi_info = || FfiCallInfo {
        time_left_ms: info
            .time_left
            .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
            .into(),
        traceparent: RStr::from_str(info.traceparent),
    };
    let call_host = uses_interface(module, 3)
        .then(|| module.call_host())
        .flatten();
    let call_with = uses_interface(module, 2)
        .then(|| module.call_with())
        .flatten();
    let plain = |answer| FfiAnswer3 {
        answer,
        blocks: Default::default(),
    };
    let outcome = match (call_host, call_with) {
        (Some(call_host), _) => call_host(tool_name, args, ctx, ffi_info(), FfiHost::new(&host)),
        (None, Some(call_with)) => match call_with(tool_name, args, ctx, ffi_info()) {
            RResult::ROk(answer) => RResult::ROk(plain(answer)),
            RResult::RErr(failure) => RResult::RErr(failure),
        },
        (None, None) => match (module.call())(tool_name, args, ctx) {
            RResult::ROk(answer) => RResult::ROk(plain(FfiAnswer2 {
                answer,
                structured_json: ROption::RNone,
            })),
            RResult::RErr(failure) => RResult::RErr(failure),
        },
    };
    let answer = raw_answer_from_ffi(tool, outcome);
    if bad_update.load(Ordering::Relaxed) {
        return Err(RawFailure::Broken(Failure::Crash(CrashReason::Formatted(
            format!("tool `{tool}` sent a partial update that is not UTF-8"),
        ))));
    }
    if services.bad_log.load(Ordering::Relaxed) {
        return Err(RawFailure::Broken(Failure::Crash(CrashReason::Formatted(
            format!("tool `{tool}` wrote a log line that is not UTF-8 or of no level"),
        ))));
    }
    if services.bad_question.load(Ordering::Relaxed) {
        return Err(RawFailure::Broken(Failure::Crash(CrashReason::Formatted(
            format!("tool `{tool}` asked a question that is not UTF-8 or whose schema is not JSON"),
        ))));
    }
    answer
}
