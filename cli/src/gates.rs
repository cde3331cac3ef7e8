//! The gates the CLI builds: rules by tool-name pattern (allow, deny, ask), where "ask" goes to a
//! person through an [`Asker`]: the terminal for `rho call`/`rho run`, the MCP client's user for
//! `rho serve`.

use std::io::{BufRead, Write};
use std::sync::Arc;

use rho_core::{Gate, GateCtx, ToolCall, Verdict};
use tokio::sync::Mutex;

use crate::config::{Action, GateRule, matches};

/// Asks a person whether a call may run.
#[async_trait::async_trait]
pub trait Asker: Send + Sync {
    /// The person's answer.
    async fn ask(&self, call: &ToolCall) -> Verdict;
}

/// Applies the first matching rule; no match allows.
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
        match self.rules.iter().find(|r| matches(&r.tool, &call.name)) {
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

/// Parses `--gate`: `allow`, `ask`, or `deny:TOOL,TOOL...` into rules.
pub fn parse_flag(spec: &str) -> Result<Vec<GateRule>, String> {
    match spec {
        "allow" | "allow_all" => Ok(Vec::new()),
        "ask" => Ok(vec![GateRule {
            tool: "*".into(),
            action: Action::Ask,
        }]),
        other => match other.strip_prefix("deny:") {
            Some(list) if !list.trim().is_empty() => Ok(list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|tool| GateRule {
                    tool: tool.into(),
                    action: Action::Deny,
                })
                .collect()),
            _ => Err(format!(
                "unknown gate `{other}`: use `allow`, `ask` or `deny:TOOL,TOOL...`"
            )),
        },
    }
}

/// Asks on stderr and reads y/n from stdin, one question at a time; other calls go on meanwhile.
#[derive(Default)]
pub struct TerminalAsker {
    terminal: Mutex<()>,
}

#[async_trait::async_trait]
impl Asker for TerminalAsker {
    async fn ask(&self, call: &ToolCall) -> Verdict {
        let _turn = self.terminal.lock().await;
        let question = format!(
            "rho: allow `{}` {} (call {})? [y/N] ",
            call.name, call.arguments, call.id
        );
        let answer = tokio::task::spawn_blocking(move || {
            let mut err = std::io::stderr();
            let _ = err.write_all(question.as_bytes());
            let _ = err.flush();
            let mut line = String::new();
            match std::io::stdin().lock().read_line(&mut line) {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(line),
            }
        })
        .await
        .ok()
        .flatten();
        match answer.as_deref().map(str::trim) {
            Some("y" | "Y" | "yes" | "Yes") => Verdict::Allow,
            Some(_) => Verdict::Block(format!("the user declined the call of `{}`", call.name)),
            None => Verdict::Block(format!(
                "nobody answered the approval of `{}` (the terminal's input is closed)",
                call.name
            )),
        }
    }
}
