//! The CLI's side of gates: the `--gate` flag, and the terminal as the person "ask" rules ask
//! (`rho call`, `rho run`); the rules themselves are core's ([`rho_runtime::RuleGate`]).

use std::io::{BufRead, Write};

use rho_runtime::{Action, Asker, GateRule, ToolCall, Verdict};
use tokio::sync::Mutex;

/// Parses `--gate`: `allow`, `ask`, or `deny:TOOL,TOOL...` into rules.
pub fn parse_flag(spec: &str) -> Result<Vec<GateRule>, String> {
    match spec {
        "allow" | "allow_all" => Ok(Vec::new()),
        "ask" => Ok(vec![GateRule::new("*", Action::Ask)]),
        other => match other.strip_prefix("deny:") {
            Some(list) if !list.trim().is_empty() => Ok(list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|tool| GateRule::new(tool, Action::Deny))
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
