//! The approval gate: asked first, inside each call's task, whether the call may run.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use rho_protocol::ToolSpec;

/// A tool call as the model asked for it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    /// The call's id (unique within a turn).
    pub id: String,
    /// The tool asked for.
    pub name: String,
    /// Its arguments (a JSON object; missing means `{}`), shared and never changed: the gate,
    /// the tool, the start event and every clone of the call read one copy.
    #[serde(default = "empty_object")]
    pub arguments: Arc<Value>,
    /// Who asks for it, when the host knows ([`Principal`](crate::Principal)): the caller of
    /// a server's request, this machine's user for a command. `None`: the host itself (an
    /// embedder's own call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Arc<crate::Principal>>,
}

fn empty_object() -> Arc<Value> {
    Arc::new(Value::Object(Default::default()))
}

impl ToolCall {
    /// A call of `name` with `arguments`.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: Arc::new(arguments),
            principal: None,
        }
    }

    /// The same call, asked for by `principal`.
    pub fn by(mut self, principal: Arc<crate::Principal>) -> Self {
        self.principal = Some(principal);
        self
    }
}

/// What a gate knows besides the call.
#[derive(Debug, Clone)]
pub struct GateCtx {
    /// The session the call belongs to, if any.
    pub session_id: Option<String>,
    /// The tool's spec.
    pub tool: Arc<ToolSpec>,
}

/// A gate's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run the call.
    Allow,
    /// Do not run it; the reason becomes the call's text (outcome `blocked`).
    Block(String),
}

/// Decides whether a call may run. It runs inside the call's work, so a gate that waits
/// (a human approval of minutes) blocks neither the loop nor sibling calls, and the time it takes
/// never counts against the tool's timeout. A panic in it ends the call `crashed`.
///
/// A gate that may block its thread (a synchronous wait inside `check`) is run in a task of its
/// own, so that it holds back neither the call's cancellation nor the host's stop; that is the
/// default. A gate whose `check` only awaits (or decides at once) says so with
/// [`Gate::never_blocks`], and the call saves that task.
#[async_trait::async_trait]
pub trait Gate: Send + Sync + 'static {
    /// Allows or blocks `call`.
    async fn check(&self, call: &ToolCall, ctx: &GateCtx) -> Verdict;

    /// `true` when polling [`Gate::check`] never blocks the polling thread: it decides at once or
    /// awaits. The runner then drives the check inside the call's own task. `false` (the
    /// default) runs it in a task of its own.
    fn never_blocks(&self) -> bool {
        false
    }
}

/// The default gate: everything is allowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

#[async_trait::async_trait]
impl Gate for AllowAll {
    async fn check(&self, _call: &ToolCall, _ctx: &GateCtx) -> Verdict {
        Verdict::Allow
    }

    fn never_blocks(&self) -> bool {
        true
    }
}

/// The default gate as a shareable handle.
pub fn allow_all() -> Arc<dyn Gate> {
    Arc::new(AllowAll)
}

/// Blocks the listed tools, allows the rest.
#[derive(Debug, Clone, Default)]
pub struct DenyList {
    denied: HashSet<String>,
}

impl DenyList {
    /// Denies the tools named in `names`.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        DenyList {
            denied: names.into_iter().map(Into::into).collect(),
        }
    }
}

#[async_trait::async_trait]
impl Gate for DenyList {
    async fn check(&self, call: &ToolCall, _ctx: &GateCtx) -> Verdict {
        if self.denied.contains(&call.name) {
            Verdict::Block(format!("tool `{}` is denied by the host's gate", call.name))
        } else {
            Verdict::Allow
        }
    }

    fn never_blocks(&self) -> bool {
        true
    }
}
