//! [`Loop`]: one session's agent loop. It owns the session's messages, asks the model for turns,
//! runs each turn's tool calls (see [`CallOrder`] for which run side by side), records each result
//! the moment its call ends, and hands results back in the order the model asked for.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Semaphore;

use crate::agent::model::{Message, Model, ModelError};
use crate::agent::settings::{CallOrder, LoopConfig};
use crate::agent::stop::StopReason;
use crate::bus::events::{CallRef, EventKind};
use crate::call::gate::ToolCall;
use crate::call::options::CallOptions;
use crate::host::Host;
use rho_protocol::ToolResult;

/// How a loop run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// Turns the model took.
    pub turns: u32,
    /// Why it stopped: [`StopReason::Done`] or [`StopReason::MaxTurns`] (a model's error is
    /// the run's `Err`).
    pub reason: StopReason,
}

/// One session's loop.
pub struct Loop {
    session_id: String,
    host: Host,
    config: LoopConfig,
    messages: Vec<Message>,
    /// Who the loop's calls are made for (a call that names no principal of its own).
    principal: Option<Arc<crate::Principal>>,
}

impl Host {
    /// An agent loop for session `session_id` over this host's tools and gate, with the loop
    /// settings of the builder's configuration.
    pub fn agent_loop(&self, session_id: impl Into<String>) -> Loop {
        Loop::new(session_id, self.clone(), self.loop_config())
    }
}

impl Loop {
    /// A loop for session `session_id` that runs calls on `host` (behind its gate).
    pub fn new(session_id: impl Into<String>, host: Host, config: LoopConfig) -> Self {
        Loop {
            session_id: session_id.into(),
            host,
            config,
            messages: Vec::new(),
            principal: None,
        }
    }

    /// The same loop, its calls made for `principal` (the gate, the events and the journal
    /// name them; a call that names its own keeps it).
    pub fn on_behalf_of(mut self, principal: Arc<crate::Principal>) -> Self {
        self.principal = Some(principal);
        self
    }

    /// The session's id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The session's messages so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Adds a user message.
    pub fn push_user(&mut self, text: impl Into<String>) {
        self.messages.push(Message::User { text: text.into() });
    }

    /// Runs turns until the model answers without tool calls, has nothing more to say, or
    /// `max_turns` is reached. Publishes `agent_start`, per turn `turn_start`, `message_end`,
    /// the calls' events and `turn_end`, then `agent_end`.
    pub async fn run(&mut self, model: &dyn Model) -> Result<RunSummary, ModelError> {
        let bus = self.host.bus().clone();
        let session_id = self.session_id.clone();
        let session = Some(session_id.as_str());
        bus.emit(session, EventKind::AgentStart {}).await;
        let mut turns = 0;
        let reason = loop {
            if turns >= self.config.max_turns {
                break Ok(StopReason::MaxTurns);
            }
            let specs = self.host.tools();
            let turn = match model.next_turn(&self.messages, &specs).await {
                Ok(Some(turn)) => turn,
                Ok(None) => break Ok(StopReason::Done),
                Err(error) => break Err(error),
            };
            turns += 1;
            bus.emit(session, EventKind::TurnStart { turn: turns })
                .await;
            self.messages.push(Message::Assistant {
                text: turn.text.clone(),
                tool_calls: turn.tool_calls.clone(),
            });
            bus.emit(
                session,
                EventKind::MessageEnd {
                    role: "assistant".into(),
                    text: turn.text.clone(),
                    tool_calls: turn
                        .tool_calls
                        .iter()
                        .map(|c| CallRef {
                            id: c.id.clone(),
                            name: c.name.clone(),
                        })
                        .collect(),
                },
            )
            .await;
            let calls = turn.tool_calls.len();
            if calls > 0 {
                self.run_batch(&turn.tool_calls).await;
            }
            bus.emit(
                session,
                EventKind::TurnEnd {
                    turn: turns,
                    tool_calls: calls,
                },
            )
            .await;
            if calls == 0 {
                break Ok(StopReason::Done);
            }
        };
        let (reason, result) = match reason {
            Ok(reason) => (reason.clone(), Ok(RunSummary { turns, reason })),
            Err(error) => (StopReason::ModelError(error.to_string()), Err(error)),
        };
        bus.emit(session, EventKind::AgentEnd { turns, reason })
            .await;
        result
    }

    /// Runs `calls` as [`LoopConfig::call_order`] says (at most `max_parallel` at once), records
    /// each result in the session as soon as its call ends, and returns the results in the order
    /// of `calls`.
    pub async fn run_batch(&mut self, calls: &[ToolCall]) -> Vec<ToolResult> {
        let permits = Arc::new(Semaphore::new(self.config.max_parallel.max(1)));
        let options = CallOptions {
            session_id: Some(self.session_id.clone()),
            ..CallOptions::default()
        };
        let read_only: std::collections::HashSet<String> = self
            .host
            .tools()
            .into_iter()
            .filter(|t| t.hints.read_only)
            .map(|t| t.name)
            .collect();
        // Each call taken in model order waits for the end of the one before it: that call's
        // sender is dropped when it ends (its receiver then resolves), whatever the outcome.
        let mut previous: Option<tokio::sync::oneshot::Receiver<()>> = None;
        let mut pending: FuturesUnordered<_> = FuturesUnordered::new();
        for (i, call) in calls.iter().enumerate() {
            let ordered = self.config.call_order == CallOrder::ReadOnlyAtOnce
                && !read_only.contains(&call.name);
            let (after, ended) = if ordered {
                let (ended, next) = tokio::sync::oneshot::channel::<()>();
                (previous.replace(next), Some(ended))
            } else {
                (None, None)
            };
            let host = self.host.clone();
            let permits = permits.clone();
            let options = options.clone();
            let call = match (&call.principal, &self.principal) {
                (None, Some(principal)) => {
                    std::borrow::Cow::Owned(call.clone().by(principal.clone()))
                }
                _ => std::borrow::Cow::Borrowed(call),
            };
            pending.push(async move {
                if let Some(after) = after {
                    let _ = after.await;
                }
                let _permit = permits.acquire_owned().await.ok();
                let result = host.call_with(&call, &options).await;
                drop(ended);
                (i, result)
            });
        }
        let mut results: Vec<Option<ToolResult>> = vec![None; calls.len()];
        while let Some((i, result)) = pending.next().await {
            self.messages.push(Message::Tool {
                call_id: result.call_id.clone(),
                tool: result.tool.clone(),
                outcome: result.outcome,
                output: result.output.clone(),
                details: self.config.keep_details.keep(result.details.as_ref()),
            });
            results[i] = Some(result);
        }
        results.into_iter().flatten().collect()
    }
}
