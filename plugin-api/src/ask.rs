//! [`Question`] and [`Reply`]: a tool asks the user something in the middle of its work
//! ([`crate::Ctx::ask`]) and reads what came back.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool's question to the user: a message, the JSON Schema of the answer it wants, and
/// optionally the name it goes by.
///
/// MCP clients ask with a form: the schema is an object whose properties are strings, numbers,
/// integers, booleans or enums of strings (the "elicitation" schema subset), with `default`s
/// and `required` as JSON Schema has them. A host that cannot put a schema to its user declines
/// with a reason saying so.
///
/// A question's [`key`](Question::key) is the name a client sees it under (MCP's
/// `inputRequests`, 2026-07-28): a client that already holds the answer (it retries a call
/// with `inputResponses` under that name) has it handed to the tool at once. Without a key the
/// host names the question; the keys of the questions asked together must differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// What the user is asked, in words for a person.
    pub message: String,
    /// The JSON Schema of the answer (an object schema).
    pub schema: Value,
    /// The name it goes by (`^[A-Za-z0-9_.-]{1,64}$`), or `None` for one the host chooses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The longest [`Question::key`].
pub const MAX_KEY_LEN: usize = 64;

/// Whether `key` is a question key a host accepts: 1 to [`MAX_KEY_LEN`] ASCII letters, digits,
/// `_`, `.` or `-`.
pub fn is_valid_key(key: &str) -> bool {
    (1..=MAX_KEY_LEN).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl Question {
    /// `message`, answered by a value of `schema`; the host names it.
    pub fn new(message: impl Into<String>, schema: Value) -> Self {
        Question {
            message: message.into(),
            schema,
            key: None,
        }
    }

    /// The same question under the name `key` (see [`Question::key`]).
    ///
    /// ```
    /// use rho_plugin_api::{Question, json};
    /// let q = Question::new("What is your name?", json!({"type": "object"})).with_key("user_name");
    /// assert_eq!(q.key.as_deref(), Some("user_name"));
    /// ```
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
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
