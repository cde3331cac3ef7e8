//! The `ask` gate: asks the person at the terminal, y/n, while other calls go on. Questions are
//! asked one at a time; calls waiting for their turn to be asked keep waiting in their own tasks.

use std::io::{BufRead, Write};

use rho_core::{Gate, GateCtx, ToolCall, Verdict};
use tokio::sync::Mutex;

/// Asks on stderr, reads the answer from stdin.
#[derive(Default)]
pub struct AskGate {
    terminal: Mutex<()>,
}

#[async_trait::async_trait]
impl Gate for AskGate {
    async fn check(&self, call: &ToolCall, _ctx: &GateCtx) -> Verdict {
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
