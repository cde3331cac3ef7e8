//! Gate rules: allow, deny or ask by tool-name pattern (`*` matches any run of characters), the
//! first matching rule deciding; "ask" goes to a person through an [`Asker`] (a terminal, an MCP
//! client's user, a host's own approval screen).
//!
//! ```
//! use std::sync::Arc;
//! use rho_core::{Action, GateRule, RuleGate, ToolCall, Verdict};
//!
//! // Any async closure from the call to a verdict is an `Asker`.
//! let asker = |call: ToolCall| async move {
//!     Verdict::Block(format!("nobody approves `{}`", call.name))
//! };
//! let gate = RuleGate::new(
//!     vec![
//!         GateRule { tool: "exit_*".into(), action: Action::Deny },
//!         GateRule { tool: "write_*".into(), action: Action::Ask },
//!     ],
//!     Arc::new(asker),
//! );
//! # let _ = gate;
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::call::gate::{Gate, GateCtx, ToolCall, Verdict};

/// What a gate rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Run the call.
    Allow,
    /// Block it.
    Deny,
    /// Ask a person.
    Ask,
}

/// One gate rule: a tool name pattern (`*` matches any run of characters) and an action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateRule {
    /// The pattern.
    pub tool: String,
    /// The action.
    pub action: Action,
}

/// Whether `name` matches `pattern` (`*` matches any run of characters, including none).
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Asks a person whether a call may run. Implemented by every async closure
/// `Fn(ToolCall) -> impl Future<Output = Verdict>`; implement it on a type (with `async_trait`)
/// when the asker has state of its own.
#[async_trait::async_trait]
pub trait Asker: Send + Sync {
    /// The person's answer.
    async fn ask(&self, call: &ToolCall) -> Verdict;
}

#[async_trait::async_trait]
impl<F, Fut> Asker for F
where
    F: Fn(ToolCall) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Verdict> + Send,
{
    async fn ask(&self, call: &ToolCall) -> Verdict {
        self(call.clone()).await
    }
}

/// A gate of rules: the first rule whose pattern matches decides; no match allows.
pub struct RuleGate {
    rules: Vec<GateRule>,
    asker: Arc<dyn Asker>,
}

impl RuleGate {
    /// A gate of `rules` asking through `asker`.
    pub fn new(rules: Vec<GateRule>, asker: Arc<dyn Asker>) -> Self {
        RuleGate { rules, asker }
    }
}

#[async_trait::async_trait]
impl Gate for RuleGate {
    async fn check(&self, call: &ToolCall, _ctx: &GateCtx) -> Verdict {
        match self
            .rules
            .iter()
            .find(|r| pattern_matches(&r.tool, &call.name))
        {
            None => Verdict::Allow,
            Some(rule) => match rule.action {
                Action::Allow => Verdict::Allow,
                Action::Deny => Verdict::Block(if rule.tool == call.name {
                    format!("tool `{}` is denied by the host's gate", call.name)
                } else {
                    format!(
                        "tool `{}` is denied by the host's gate (rule `{}`)",
                        call.name, rule.tool
                    )
                }),
                Action::Ask => self.asker.ask(call).await,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(pattern_matches("exit_*", "exit_process"));
        assert!(pattern_matches("*", "anything"));
        assert!(pattern_matches("*_image", "raw_image"));
        assert!(pattern_matches("a*b*c", "aXXbYYc"));
        assert!(!pattern_matches("a*b*c", "aXXcYYb"));
        assert!(pattern_matches("echo", "echo"));
        assert!(!pattern_matches("echo", "echo2"));
    }
}
