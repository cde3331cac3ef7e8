//! How a tool call ends: [`Outcome`], [`ToolResult`], and the seed's text functions
//! ([`normalize`], [`timeout_text`], [`crash_text`]).

use std::time::Duration;

use rho_plugin_api::{Answer, Block, Output, ToolError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decision::Decision;

/// How a call ended. Every call ends with exactly one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// The tool answered.
    Ok,
    /// The tool answered with an error.
    Error,
    /// The gate blocked the call; the text is the gate's reason.
    Blocked,
    /// The tool ran past its timeout and was ended.
    TimedOut,
    /// The tool, the gate or the process running the tool crashed.
    Crashed,
    /// No tool of that name exists.
    UnknownTool,
    /// The arguments do not match the tool's JSON Schema.
    InvalidArguments,
    /// The tool failed too often recently and is not run.
    Quarantined,
    /// The tool is served from elsewhere and nothing there can run it now (no node answers).
    Unavailable,
    /// The caller called the tool more often than a limit allows; it did not run
    /// ([`Decision::RateLimited`] says which limit and when to retry).
    RateLimited,
}

impl Outcome {
    /// Every outcome, in a stable order.
    pub const ALL: [Outcome; 10] = [
        Outcome::Ok,
        Outcome::Error,
        Outcome::Blocked,
        Outcome::TimedOut,
        Outcome::Crashed,
        Outcome::UnknownTool,
        Outcome::InvalidArguments,
        Outcome::Quarantined,
        Outcome::Unavailable,
        Outcome::RateLimited,
    ];

    /// The outcome's name as it appears in JSON (`timed_out`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Blocked => "blocked",
            Outcome::TimedOut => "timed_out",
            Outcome::Crashed => "crashed",
            Outcome::UnknownTool => "unknown_tool",
            Outcome::InvalidArguments => "invalid_arguments",
            Outcome::Quarantined => "quarantined",
            Outcome::Unavailable => "unavailable",
            Outcome::RateLimited => "rate_limited",
        }
    }

    /// Whether the model should read the result as an error (every outcome but `ok`).
    pub fn is_error(self) -> bool {
        self != Outcome::Ok
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The end of one call: what the model and the session get (`output`), what screens get
/// (`details`), and how it ended. For every outcome but `ok`, `output` is text saying why.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The call's id, as the model gave it.
    pub call_id: String,
    /// The tool's name, as the model asked for it.
    pub tool: String,
    /// How the call ended.
    pub outcome: Outcome,
    /// What the model reads.
    pub output: Output,
    /// Structured content: an `ok` answer of a tool that declares an output schema, checked
    /// against it (a tool without one has its structured content dropped). The output's text is
    /// the tool's own beside it, or this content's JSON when the tool wrote none.
    pub structured: Option<Value>,
    /// Details for screens, if the tool gave any.
    pub details: Option<Value>,
    /// The whole text when the output's was cut at the tool's result limit (the output's text
    /// then ends with a note saying so); `None` when nothing was cut. The call's end event
    /// carries it too.
    pub full_text: Option<String>,
    /// From the start of the call (before the gate) to its end.
    pub duration: Duration,
    /// What the host's policy and limits decided of the call, when any are in force (`None`:
    /// none are, or the call ended before they were asked).
    pub decision: Option<Decision>,
}

impl ToolResult {
    /// A result of `outcome` with `text` as its output and no details.
    pub fn failed(call_id: &str, tool: &str, outcome: Outcome, text: impl Into<String>) -> Self {
        ToolResult {
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            outcome,
            output: Output::Text(text.into()),
            structured: None,
            details: None,
            full_text: None,
            duration: Duration::ZERO,
            decision: None,
        }
    }

    /// Whether the model should read this as an error.
    pub fn is_error(&self) -> bool {
        self.outcome.is_error()
    }

    /// The text of the output (of blocks, their text blocks joined by a newline).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        self.output.text()
    }
}

/// A tool's answer as the loop takes it, normalised ([`normalize`]): the output (or the error
/// text), the structured content and the details.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    /// `Ok(output)` for an answer, `Err(text)` for a failure.
    pub result: Result<Output, String>,
    /// Structured content of an answer.
    pub structured: Option<Value>,
    /// Details for screens, from either.
    pub details: Option<Value>,
}

/// Normalizes what a tool answered (`Ok(Answer)` or `Err(ToolError)`) into a [`Normalized`]:
/// `Images` with exactly one image becomes `Image`, `Images` with none becomes `Text`, and a
/// `null` details value counts as no details.
pub fn normalize(answer: Result<Answer, ToolError>) -> Normalized {
    let (result, structured, details) = match answer {
        Ok(Answer {
            output,
            structured,
            details,
        }) => (Ok(normalize_output(output)), structured, details),
        Err(ToolError { message, details }) => (Err(message), None, details),
    };
    Normalized {
        result,
        structured,
        details: details.filter(|d| !d.is_null()),
    }
}

fn normalize_output(output: Output) -> Output {
    match output {
        Output::Images { mut images, text } if images.len() == 1 => match images.pop() {
            Some(image) => Output::Image { image, text },
            None => Output::Text(text),
        },
        Output::Images { images, text } if images.is_empty() => Output::Text(text),
        other => other,
    }
}

/// `output` with its text replaced by `text` (images kept; of blocks, the first text block
/// holds `text` and the other text blocks go, or `text` comes first when there was none).
pub fn with_text(output: Output, text: String) -> Output {
    match output {
        Output::Text(_) => Output::Text(text),
        Output::Image { image, .. } => Output::Image { image, text },
        Output::Images { images, .. } => Output::Images { images, text },
        Output::Blocks(blocks) => {
            let mut text = Some(text);
            let mut kept: Vec<Block> = blocks
                .into_iter()
                .filter_map(|block| match block {
                    Block::Text(_) => text.take().map(Block::Text),
                    other => Some(other),
                })
                .collect();
            if let Some(text) = text {
                kept.insert(0, Block::Text(text));
            }
            Output::Blocks(kept)
        }
    }
}

/// `output` with its text cut at `limit` bytes (at a character boundary) and a note saying so,
/// and the whole text when it was cut.
pub fn cut_output(tool: &str, output: Output, limit: usize) -> (Output, Option<String>) {
    let text = output.text();
    if text.len() <= limit {
        return (output, None);
    }
    let at = (0..=limit)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let shown = format!(
        "{}\n[rho: the result was cut at {at} of {} bytes (the result limit of tool \
         `{tool}`); the host keeps the whole]",
        &text[..at],
        text.len()
    );
    let whole = text.into_owned();
    (with_text(output, shown), Some(whole))
}

/// The error text of a call ended at its timeout: ``tool `spin` timed out after 2000 ms``.
pub fn timeout_text(tool: &str, timeout: Duration) -> String {
    format!("tool `{tool}` timed out after {} ms", timeout.as_millis())
}

/// The error text of a call ended by its idle limit:
/// ``tool `crawl` timed out: no update for 500 ms (its idle limit), after running 3200 ms``.
pub fn idle_timeout_text(tool: &str, idle: Duration, ran: Duration) -> String {
    format!(
        "tool `{tool}` timed out: no update for {} ms (its idle limit), after running {} ms",
        idle.as_millis(),
        ran.as_millis()
    )
}

/// Why a tool produced no answer, before it is turned into a [`ToolResult`].
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The tool answered with an error (outcome `error`).
    Tool(ToolError),
    /// The tool crashed (outcome `crashed`).
    Crash(CrashReason),
    /// The tool refused its arguments (outcome `invalid_arguments`).
    InvalidArguments(String),
    /// The tool is not there (outcome `unknown_tool`).
    UnknownTool(String),
    /// Nothing can run the tool now (outcome `unavailable`): a remote tool no node answers for.
    Unavailable(String),
}

impl Failure {
    /// A crash whose text says what died or broke (`the node stopped answering`): outcome
    /// `crashed`, the text as the call's error.
    pub fn crashed(text: impl Into<String>) -> Failure {
        Failure::Crash(CrashReason::Formatted(text.into()))
    }

    /// A crash another tool of the same origin caused (`by`: it hung, and the process serving
    /// both was restarted): outcome `crashed`, the text as the call's error, and the crash
    /// counted against `by` in the host's health, not against the tool of this call.
    pub fn crashed_by(by: impl Into<String>, text: impl Into<String>) -> Failure {
        Failure::Crash(CrashReason::CausedBy {
            by: by.into(),
            text: text.into(),
        })
    }
}

/// Why a call's task ended abnormally, as the loop knows it. Built from host data only: nothing
/// of a foreign panic payload is run to make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrashReason {
    /// The task (or the plugin) formatted the crash itself: the text says what panicked and why.
    Formatted(String),
    /// The task panicked with a payload that is not a string.
    NonStringPanic,
    /// The task was aborted or cancelled before it answered.
    Aborted,
    /// The process running the tool died: the text names the signal or exit status.
    ProcessDied(String),
    /// The process running the tool broke the protocol: the text says how.
    Protocol(String),
    /// Another tool of the same origin caused it (see [`Failure::crashed_by`]).
    CausedBy {
        /// The tool that caused it, counted against.
        by: String,
        /// What happened, the call's error.
        text: String,
    },
}

/// The error text of a call whose task ended abnormally. A crash the task formatted itself reads
/// as that text.
pub fn crash_text(reason: &CrashReason) -> String {
    match reason {
        CrashReason::Formatted(text) | CrashReason::CausedBy { text, .. } => text.clone(),
        CrashReason::NonStringPanic => "the tool's task panicked with a non-string payload".into(),
        CrashReason::Aborted => "the tool's task was aborted before it answered".into(),
        CrashReason::ProcessDied(how) => format!("the plugin's worker process died: {how}"),
        CrashReason::Protocol(what) => format!("the plugin's worker broke the protocol: {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_plugin_api::Image;
    use serde_json::json;

    #[test]
    fn texts() {
        assert_eq!(
            timeout_text("spin", Duration::from_millis(2000)),
            "tool `spin` timed out after 2000 ms"
        );
        assert_eq!(crash_text(&CrashReason::Formatted("boom".into())), "boom");
        assert_eq!(
            crash_text(&CrashReason::NonStringPanic),
            "the tool's task panicked with a non-string payload"
        );
        assert_eq!(
            crash_text(&CrashReason::Aborted),
            "the tool's task was aborted before it answered"
        );
        assert_eq!(
            crash_text(&CrashReason::ProcessDied(
                "killed by signal 11 (SIGSEGV)".into()
            )),
            "the plugin's worker process died: killed by signal 11 (SIGSEGV)"
        );
        assert_eq!(
            crash_text(&CrashReason::Protocol(
                "frame of 70 MiB exceeds the 64 MiB limit".into()
            )),
            "the plugin's worker broke the protocol: frame of 70 MiB exceeds the 64 MiB limit"
        );
    }

    #[test]
    fn normalize_normalizes_images_and_null_details() {
        let one = Image::new("image/png", vec![1]);
        let reply = normalize(Ok(Answer::images(vec![one.clone()], "t")));
        assert_eq!(
            reply.result,
            Ok(Output::Image {
                image: one,
                text: "t".into()
            })
        );
        let reply = normalize(Ok(Answer::images(vec![], "t")));
        assert_eq!(reply.result, Ok(Output::Text("t".into())));
        let reply = normalize(Ok(Answer::text("a").with_details(json!({"k": 1}))));
        assert_eq!(reply.details, Some(json!({"k": 1})));
        let reply = normalize(Ok(Answer::text("a").with_details(Value::Null)));
        assert_eq!(reply.details, None);
        let reply = normalize(Err(ToolError::new("no").with_details(json!([1]))));
        assert_eq!(reply.result, Err("no".into()));
        assert_eq!(reply.details, Some(json!([1])));
    }
}
