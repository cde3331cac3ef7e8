//! [`StopReason`]: why an agent loop stopped, as [`RunSummary`](crate::RunSummary) and the
//! `agent_end` event carry it. On the wire it is one string (`done`, `max_turns`,
//! `model_error: ...`), as journals have always held it.
//!
//! ```
//! use rho_runtime::StopReason;
//!
//! assert_eq!(StopReason::MaxTurns.to_string(), "max_turns");
//! let error: StopReason = "model_error: rate limited".parse().unwrap();
//! assert_eq!(error, StopReason::ModelError("rate limited".into()));
//! assert!("finished".parse::<StopReason>().is_err());
//! ```

use serde::{Deserialize, Serialize};

/// Why an agent loop stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum StopReason {
    /// The model answered without tool calls, or had nothing more to say.
    Done,
    /// The loop reached its `max_turns`.
    MaxTurns,
    /// The model failed (its error's line).
    ModelError(String),
}

/// Text that is no stop reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no stop reason `{0}` (done, max_turns or model_error: ...)")]
pub struct UnknownStopReason(pub String);

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Done => f.write_str("done"),
            StopReason::MaxTurns => f.write_str("max_turns"),
            StopReason::ModelError(error) => write!(f, "model_error: {error}"),
        }
    }
}

impl std::str::FromStr for StopReason {
    type Err = UnknownStopReason;

    fn from_str(text: &str) -> Result<StopReason, UnknownStopReason> {
        match text {
            "done" => Ok(StopReason::Done),
            "max_turns" => Ok(StopReason::MaxTurns),
            _ => text
                .strip_prefix("model_error: ")
                .map(|error| StopReason::ModelError(error.to_owned()))
                .ok_or_else(|| UnknownStopReason(text.to_owned())),
        }
    }
}

impl From<StopReason> for String {
    fn from(reason: StopReason) -> String {
        reason.to_string()
    }
}

impl TryFrom<String> for StopReason {
    type Error = UnknownStopReason;

    fn try_from(text: String) -> Result<StopReason, UnknownStopReason> {
        text.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::StopReason;

    #[test]
    fn each_reason_is_the_string_journals_hold() {
        for (reason, text) in [
            (StopReason::Done, "done"),
            (StopReason::MaxTurns, "max_turns"),
            (StopReason::ModelError("a: b".into()), "model_error: a: b"),
        ] {
            assert_eq!(
                serde_json::to_value(&reason).ok(),
                Some(serde_json::Value::from(text))
            );
            let back: Option<StopReason> = serde_json::from_value(text.into()).ok();
            assert_eq!(back, Some(reason));
        }
        assert!(serde_json::from_value::<StopReason>("stopped".into()).is_err());
    }
}
