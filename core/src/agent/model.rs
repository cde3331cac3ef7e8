//! The [`Model`] a loop asks for turns, and [`ScriptedModel`], which replays a JSON script.

use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::call::gate::ToolCall;
use rho_plugin_api::Output;
use rho_protocol::Outcome;
use rho_protocol::ToolSpec;
use serde_json::Value;

/// One assistant turn: text, and the tool calls it asks for (none ends the session).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantTurn {
    /// What the assistant says.
    #[serde(default)]
    pub text: String,
    /// The tools it calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
}

/// Why the model gave no turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ModelError(pub String);

/// A host's LLM: messages and tool specs in, the next assistant turn out.
#[async_trait::async_trait]
pub trait Model: Send + Sync {
    /// The next turn, or `None` when the model has nothing more to say.
    async fn next_turn(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
    ) -> Result<Option<AssistantTurn>, ModelError>;
}

/// Replays a script of assistant turns in order, whatever the messages say; `None` after the
/// last. For tests and demos.
#[derive(Debug, Default)]
pub struct ScriptedModel {
    turns: Mutex<std::collections::VecDeque<AssistantTurn>>,
}

impl ScriptedModel {
    /// A model that replays `turns`.
    pub fn new(turns: Vec<AssistantTurn>) -> Self {
        ScriptedModel {
            turns: Mutex::new(turns.into()),
        }
    }

    /// Parses a script: a JSON array of `{"text", "tool_calls": [{"id", "name", "arguments"}]}`.
    pub fn from_json(json: &str) -> Result<Self, ModelError> {
        serde_json::from_str::<Vec<AssistantTurn>>(json)
            .map(ScriptedModel::new)
            .map_err(|e| ModelError(format!("not a script of assistant turns: {e}")))
    }

    /// Reads and parses a script file.
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let json = std::fs::read_to_string(path)
            .map_err(|e| ModelError(format!("{}: cannot read the script: {e}", path.display())))?;
        Self::from_json(&json).map_err(|e| ModelError(format!("{}: {e}", path.display())))
    }
}

#[async_trait::async_trait]
impl Model for ScriptedModel {
    async fn next_turn(
        &self,
        _messages: &[Message],
        _tools: &[ToolSpec],
    ) -> Result<Option<AssistantTurn>, ModelError> {
        Ok(self
            .turns
            .lock()
            .map_err(|_| ModelError("script lock poisoned".into()))?
            .pop_front())
    }
}

/// The details a session kept of one result.
#[derive(Debug, Clone, PartialEq)]
pub enum KeptDetails {
    /// The tool gave none, or `KeepDetails::None` keeps none.
    None,
    /// Kept whole.
    Kept(Value),
    /// Dropped for size: they were this many bytes of JSON.
    Dropped {
        /// Their size.
        bytes: usize,
    },
}

/// A message of the session.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Message {
    /// What the user said.
    User {
        /// Its text.
        text: String,
    },
    /// An assistant turn.
    Assistant {
        /// Its text.
        text: String,
        /// The calls it asked for.
        tool_calls: Vec<ToolCall>,
    },
    /// A tool call's result.
    Tool {
        /// The call's id.
        call_id: String,
        /// The tool.
        tool: String,
        /// How it ended.
        outcome: Outcome,
        /// What the model reads.
        output: Output,
        /// What the session keeps of the details.
        details: KeptDetails,
    },
}
