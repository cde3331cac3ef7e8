//! [`Question`] and [`Reply`]: a tool asks the user something in the middle of its work
//! ([`crate::Ctx::ask`]) and reads what came back.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool's question to the user: a message, and the JSON Schema of the answer it wants.
///
/// MCP clients ask with a form: the schema is an object whose properties are strings, numbers,
/// integers, booleans or enums of strings (the "elicitation" schema subset), with `default`s
/// and `required` as JSON Schema has them. A host that cannot put a schema to its user declines
/// with a reason saying so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// What the user is asked, in words for a person.
    pub message: String,
    /// The JSON Schema of the answer (an object schema).
    pub schema: Value,
}

impl Question {
    /// `message`, answered by a value of `schema`.
    pub fn new(message: impl Into<String>, schema: Value) -> Self {
        Question {
            message: message.into(),
            schema,
        }
    }

    /// A yes-or-no question: its answer is `{"confirm": true}` or `{"confirm": false}`.
    ///
    /// ```
    /// use rho_plugin_api::Question;
    /// let q = Question::confirm("Delete 3 files?");
    /// assert_eq!(q.schema["properties"]["confirm"]["type"], "boolean");
    /// ```
    pub fn confirm(message: impl Into<String>) -> Self {
        Question::new(
            message,
            serde_json::json!({
                "type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
                "required": ["confirm"],
            }),
        )
    }
}

/// What came back from a [`Question`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The user answered: the answer, a value of the question's schema (the host checked it).
    Accepted(Value),
    /// The user said no, or no one could be asked: why, in words a tool can pass on (`the user
    /// declined`, `this client cannot ask its user`, `no one can be asked here`).
    Declined(String),
    /// The question was dismissed or given up on (the user closed it, the host's bound on
    /// asking passed, the call was cancelled): why.
    Cancelled(String),
}

impl Reply {
    /// The answer, if the user gave one.
    pub fn accepted(&self) -> Option<&Value> {
        match self {
            Reply::Accepted(value) => Some(value),
            _ => None,
        }
    }

    /// Whether this is the "yes" of a [`Question::confirm`].
    ///
    /// ```
    /// use rho_plugin_api::{Reply, json};
    /// assert!(Reply::Accepted(json!({"confirm": true})).confirmed());
    /// assert!(!Reply::Accepted(json!({"confirm": false})).confirmed());
    /// assert!(!Reply::Declined("no".into()).confirmed());
    /// ```
    pub fn confirmed(&self) -> bool {
        self.accepted()
            .is_some_and(|answer| answer["confirm"] == Value::Bool(true))
    }
}
