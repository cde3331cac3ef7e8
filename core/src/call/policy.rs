//! [`Policy`]: who may list and call which tool, asked by the host for every call (in the call's
//! own task, before the gate) and for every tool list it shows a principal
//! ([`Host::tools_for`](crate::Host::tools_for)). rho-runtime asks; the answer comes from an
//! implementation: `rho-policy`'s Cedar policy sets, or an embedder's own.
//!
//! A host without a policy allows everything, as it always did. A policy is swapped whole
//! ([`Host::set_policy`](crate::Host::set_policy)): every decision is made by one set, the old or
//! the new, never by none; each swap publishes `policy_changed`, so servers tell the sessions
//! whose tool list it changed.
//!
//! ```
//! use rho_runtime::{Decision, Policy, PolicyAction, PolicyQuery};
//!
//! /// Only `ci` may call tools whose names start with `write_`; everyone may list them.
//! struct WritersOnly;
//!
//! impl Policy for WritersOnly {
//!     fn decide(&self, query: &PolicyQuery<'_>) -> Decision {
//!         let writes = query.tool.name.starts_with("write_");
//!         let ci = query.principal.is_some_and(|p| p.id == "ci");
//!         if query.action == PolicyAction::Call && writes && !ci {
//!             Decision::Forbidden { policies: vec!["writers-only".into()] }
//!         } else {
//!             Decision::Allowed { policies: vec!["writers-only".into()] }
//!         }
//!     }
//! }
//! # let _ = WritersOnly;
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::call::principal::Principal;
use crate::registry::origin::Origin;
use rho_protocol::{Decision, ToolSpec};

/// What a principal asks to do with a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyAction {
    /// See it in a tool list (`tools/list`, the meta tools, `rho tools`).
    List,
    /// Call it.
    Call,
}

impl PolicyAction {
    /// `list`, `call`.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyAction::List => "list",
            PolicyAction::Call => "call",
        }
    }
}

/// How a call or a list request reached the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The host's own code: an embedder's call, a command (`rho call`), the agent loop.
    #[default]
    Embedded,
    /// An MCP client over stdio.
    Stdio,
    /// An MCP client over Streamable HTTP.
    Http,
    /// Another host over NATS.
    Nats,
}

impl Via {
    /// `embedded`, `stdio`, `http`, `nats`.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Embedded => "embedded",
            Via::Stdio => "stdio",
            Via::Http => "http",
            Via::Nats => "nats",
        }
    }
}

/// One question to a [`Policy`]: may `principal` do `action` with `tool`?
#[derive(Debug, Clone, Copy)]
pub struct PolicyQuery<'a> {
    /// What it asks to do.
    pub action: PolicyAction,
    /// Who asks; `None`: the host itself (an embedder's own call).
    pub principal: Option<&'a Principal>,
    /// The tool.
    pub tool: &'a ToolSpec,
    /// Where the tool comes from.
    pub origin: &'a Origin,
    /// The call's arguments, checked against the tool's schema already (`None` for a list).
    pub arguments: Option<&'a Value>,
    /// How the request reached the host.
    pub via: Via,
}

/// Decides who may list and call what. Asked for every call in the call's own task, before the
/// gate (a [`Decision::Forbidden`] ends the call `blocked`, a [`Decision::RateLimited`] ends it
/// `rate_limited`, neither reaching the gate or the tool), and for every tool of a list shown to
/// a principal (only [`Decision::Allowed`] tools are listed). A panic in it forbids.
pub trait Policy: Send + Sync + 'static {
    /// The decision on `query`.
    fn decide(&self, query: &PolicyQuery<'_>) -> Decision;

    /// `true` (the default) when [`Policy::decide`] is quick enough to run on the call's task
    /// (microseconds); `false` runs each call's decision on the blocking pool, so that a large
    /// policy set delays no other call.
    fn never_blocks(&self) -> bool {
        true
    }

    /// What the policy is, for people: `policy.cedar (12 policies)`.
    fn describe(&self) -> String {
        "a policy of the host's".into()
    }
}

/// Runs `policy` on `query`, a panic in it forbidding (named in the log).
pub(crate) fn decide_caught(policy: &dyn Policy, query: &PolicyQuery<'_>) -> Decision {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| policy.decide(query))) {
        Ok(decision) => decision,
        Err(payload) => {
            let message = crate::call::panic::payload_message(payload);
            tracing::error!(tool = %query.tool.name, ?message, "the host's policy panicked: forbidden");
            Decision::Forbidden {
                policies: Vec::new(),
            }
        }
    }
}

/// How a call `decision` forbade or limited ends: `blocked` or `rate_limited`, with a text
/// naming the tool, who asked and the decision, for the model and the person reading.
pub(crate) fn refused(
    tool: &str,
    principal: Option<&Principal>,
    decision: Decision,
) -> (rho_protocol::Outcome, String, Option<Decision>) {
    let who = match principal {
        Some(principal) => principal.to_string(),
        None => "the host".into(),
    };
    let outcome = match decision {
        Decision::RateLimited { .. } => rho_protocol::Outcome::RateLimited,
        _ => rho_protocol::Outcome::Blocked,
    };
    let text = format!("call of tool `{tool}` by {who}: {decision}");
    (outcome, text, Some(decision))
}

/// The tool a call is of: its spec and where it comes from.
pub(crate) type CalledTool<'a> = (&'a Arc<ToolSpec>, &'a Arc<Origin>);

/// `policy`'s decision on `call` of `tool` with `args`: asked at once when the policy is quick,
/// else on the blocking pool, `abandoned` (the host stopping, the client cancelling) ending the
/// wait with the call's outcome and text.
pub(crate) async fn decide_call(
    policy: Arc<dyn Policy>,
    call: &Arc<crate::ToolCall>,
    (spec, origin): CalledTool<'_>,
    args: &Arc<Value>,
    via: Via,
    abandoned: impl std::future::Future<Output = (rho_protocol::Outcome, String)>,
) -> Result<Decision, (rho_protocol::Outcome, String)> {
    if policy.never_blocks() {
        return Ok(decide_caught(
            &*policy,
            &PolicyQuery {
                action: PolicyAction::Call,
                principal: call.principal.as_deref(),
                tool: spec,
                origin,
                arguments: Some(args),
                via,
            },
        ));
    }
    let (call, spec, origin, args) = (call.clone(), spec.clone(), origin.clone(), args.clone());
    let asked = tokio::task::spawn_blocking(move || {
        decide_caught(
            &*policy,
            &PolicyQuery {
                action: PolicyAction::Call,
                principal: call.principal.as_deref(),
                tool: &spec,
                origin: &origin,
                arguments: Some(&args),
                via,
            },
        )
    });
    tokio::select! {
        decided = asked => Ok(decided.unwrap_or(Decision::Forbidden { policies: Vec::new() })),
        ended = abandoned => Err(ended),
    }
}

/// Whether `policy` lets `principal` list the tool of `spec` from `origin`, reached by `via`.
pub(crate) fn may_list(
    policy: &dyn Policy,
    spec: &ToolSpec,
    origin: &Origin,
    principal: Option<&Principal>,
    via: Via,
) -> bool {
    let query = PolicyQuery {
        action: PolicyAction::List,
        principal,
        tool: spec,
        origin,
        arguments: None,
        via,
    };
    decide_caught(policy, &query).allows()
}
