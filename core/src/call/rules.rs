//! Gate rules: allow, deny or ask by tool-name pattern (`*` matches any run of characters) and by
//! the hints the tool declares ([`ToolHints`]), the first matching rule deciding; "ask" goes to a
//! person through an [`Asker`] (a terminal, an MCP client's user, a host's own approval screen).
//!
//! ```
//! use std::sync::Arc;
//! use rho_runtime::{Action, GateRule, RuleGate, ToolCall, Verdict};
//!
//! // Any async closure from the call to a verdict is an `Asker`.
//! let asker = |call: ToolCall| async move {
//!     Verdict::Block(format!("nobody approves `{}`", call.name))
//! };
//! let gate = RuleGate::new(
//!     vec![
//!         GateRule::new("exit_*", Action::Deny),
//!         // Read-only tools run; destructive ones are asked about; the rest run.
//!         GateRule::new("*", Action::Allow).read_only(true),
//!         GateRule::new("*", Action::Ask).destructive(true),
//!     ],
//!     Arc::new(asker),
//! );
//! # let _ = gate;
//! ```
//!
//! In `rho.toml` the same rules read:
//!
//! ```toml
//! [[gate]]
//! tool = "exit_*"
//! action = "deny"
//!
//! [[gate]]
//! read_only = true
//! action = "allow"
//!
//! [[gate]]
//! destructive = true
//! action = "ask"
//! ```
//!
//! Hints are the tool's word (a plugin of interface 1 has MCP's cautious defaults: not read-only,
//! destructive, not idempotent, open world). A rule on hints decides what to ask a person about;
//! it is no security boundary: that is the sandbox's job.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use rho_plugin_api::ToolHints;

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

/// One gate rule: a tool name pattern (`*` matches any run of characters), optionally the hints
/// the tool must declare, and an action. A rule matches a call when the pattern matches the
/// tool's name and every hint it names has that value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateRule {
    /// The pattern (`*`, every tool, when left out).
    #[serde(default = "any_tool")]
    pub tool: String,
    /// Matches only tools whose `read_only` hint is this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// Matches only tools whose `destructive` hint is this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Matches only tools whose `idempotent` hint is this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// Matches only tools whose `open_world` hint is this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
    /// The action.
    pub action: Action,
}

fn any_tool() -> String {
    "*".into()
}

impl GateRule {
    /// A rule for the tools whose names match `tool`, whatever their hints.
    pub fn new(tool: impl Into<String>, action: Action) -> Self {
        GateRule {
            tool: tool.into(),
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
            action,
        }
    }

    /// The same rule, only for tools whose `read_only` hint is `value`.
    pub fn read_only(mut self, value: bool) -> Self {
        self.read_only = Some(value);
        self
    }

    /// The same rule, only for tools whose `destructive` hint is `value`.
    pub fn destructive(mut self, value: bool) -> Self {
        self.destructive = Some(value);
        self
    }

    /// The same rule, only for tools whose `idempotent` hint is `value`.
    pub fn idempotent(mut self, value: bool) -> Self {
        self.idempotent = Some(value);
        self
    }

    /// The same rule, only for tools whose `open_world` hint is `value`.
    pub fn open_world(mut self, value: bool) -> Self {
        self.open_world = Some(value);
        self
    }

    /// Whether the rule applies to a call of `tool`, which declares `hints`.
    pub fn matches(&self, tool: &str, hints: &ToolHints) -> bool {
        let hint = |want: Option<bool>, has: bool| want.is_none_or(|want| want == has);
        pattern_matches(&self.tool, tool)
            && hint(self.read_only, hints.read_only)
            && hint(self.destructive, hints.destructive)
            && hint(self.idempotent, hints.idempotent)
            && hint(self.open_world, hints.open_world)
    }

    /// The rule for people: ``rule `exit_*` ``, ``rule `*` (destructive)``.
    fn describe(&self) -> String {
        let hints: Vec<String> = [
            ("read-only", self.read_only),
            ("destructive", self.destructive),
            ("idempotent", self.idempotent),
            ("open-world", self.open_world),
        ]
        .into_iter()
        .filter_map(|(name, want)| {
            want.map(|w| {
                if w {
                    name.to_owned()
                } else {
                    format!("not {name}")
                }
            })
        })
        .collect();
        if hints.is_empty() {
            format!("rule `{}`", self.tool)
        } else {
            format!("rule `{}` ({})", self.tool, hints.join(", "))
        }
    }
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

/// A gate of rules: the first rule that matches the call's tool (name and hints) decides; no match
/// allows.
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
    async fn check(&self, call: &ToolCall, ctx: &GateCtx) -> Verdict {
        match self
            .rules
            .iter()
            .find(|r| r.matches(&call.name, &ctx.tool.hints))
        {
            None => Verdict::Allow,
            Some(rule) => match rule.action {
                Action::Allow => Verdict::Allow,
                Action::Deny => {
                    Verdict::Block(if *rule == GateRule::new(&call.name, Action::Deny) {
                        format!("tool `{}` is denied by the host's gate", call.name)
                    } else {
                        format!(
                            "tool `{}` is denied by the host's gate ({})",
                            call.name,
                            rule.describe()
                        )
                    })
                }
                Action::Ask => self.asker.ask(call).await,
            },
        }
    }

    /// Rules alone decide at once; an asker is the host's and may block its thread.
    fn never_blocks(&self) -> bool {
        !self.rules.iter().any(|rule| rule.action == Action::Ask)
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

    #[test]
    fn hints_narrow_a_rule() {
        let read_only = ToolHints {
            read_only: true,
            destructive: false,
            ..ToolHints::default()
        };
        let writes = ToolHints::default();
        let rule = GateRule::new("*", Action::Ask).destructive(true);
        assert!(rule.matches("rm", &writes));
        assert!(!rule.matches("ls", &read_only));
        let rule = GateRule::new("l*", Action::Allow).read_only(true);
        assert!(rule.matches("ls", &read_only));
        assert!(!rule.matches("rm", &read_only));
        assert!(!rule.matches("ls", &writes));
        assert_eq!(rule.describe(), "rule `l*` (read-only)");
        let rule: GateRule = serde_json::from_str(r#"{"destructive": false, "action": "deny"}"#)
            .expect("a rule without a pattern");
        assert_eq!(rule, GateRule::new("*", Action::Deny).destructive(false));
        assert_eq!(rule.describe(), "rule `*` (not destructive)");
    }
}
