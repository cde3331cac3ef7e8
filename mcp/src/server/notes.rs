//! What a call sends its client before its answer, in order: every partial update as progress
//! of the request's token (when the request carried one), and every log line at or above the
//! level the client asked for (when it asked). A task of the call's forwards them, so a client
//! that reads slowly holds back neither the tool nor the runner; the answer goes out after the
//! last of them (the hooks are never called after the call's end). Bounded: past 1024 unsent
//! notes the newest are dropped, as a lagging subscriber's events would be (the journal has
//! every line), and a client that does not read at all holds the answer 5 s at most.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rho_runtime::{LogHook, LogLevel, UpdateHook};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::oneshot;

use super::logging;

/// How many notes may wait for the client.
const QUEUED: usize = 1024;

/// How long the answer waits for the notes before it to be sent.
const FLUSH_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// One note.
enum Note {
    /// An update, as progress of the request's token.
    Progress(ProgressToken, String),
    /// A log line.
    Log(LogLevel, String),
}

/// A call's forwarder of notes. Dropped without [`Notes::finish`] (the call never started), it
/// stops at once.
pub(super) struct Notes {
    ended: oneshot::Sender<()>,
    forwarder: tokio::task::JoinHandle<()>,
    dropped: Arc<AtomicU64>,
}

/// The hooks a call is given, and the forwarder behind them.
type Hooks = (Option<UpdateHook>, Option<LogHook>, Option<Notes>);

impl Notes {
    /// The hooks that forward the updates of tool `tool`'s call (as progress of `token`) and its
    /// log lines at `level` and above to `peer`; none, and no task, when the client asked for
    /// neither.
    pub(super) fn start(
        peer: Peer<RoleServer>,
        tool: String,
        token: Option<ProgressToken>,
        level: Option<LogLevel>,
    ) -> Hooks {
        if token.is_none() && level.is_none() {
            return (None, None, None);
        }
        let (sender, mut pending) = tokio::sync::mpsc::channel::<Note>(QUEUED);
        let (ended, mut end) = oneshot::channel::<()>();
        let forwarder = tokio::spawn(async move {
            let mut n = 0u32;
            let mut send = async |note: Note| match note {
                Note::Progress(token, partial) => {
                    n += 1;
                    let note =
                        ProgressNotificationParam::new(token, f64::from(n)).with_message(partial);
                    let _ = peer.notify_progress(note).await;
                }
                Note::Log(level, line) => logging::notify(&peer, &tool, level, line).await,
            };
            loop {
                tokio::select! {
                    biased;
                    Some(note) = pending.recv() => send(note).await,
                    _ = &mut end => break,
                }
            }
            while let Ok(note) = pending.try_recv() {
                send(note).await;
            }
        });
        let dropped = Arc::new(AtomicU64::new(0));
        let queue = {
            let dropped = dropped.clone();
            move |note: Note| {
                if sender.try_send(note).is_err() {
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        let on_update = token.map(|token| {
            let queue = queue.clone();
            Arc::new(move |partial: &str| {
                queue(Note::Progress(token.clone(), partial.to_owned()));
            }) as UpdateHook
        });
        let on_log = level.map(|least| {
            Arc::new(move |level: LogLevel, line: &str| {
                if level >= least {
                    queue(Note::Log(level, line.to_owned()));
                }
            }) as LogHook
        });
        let notes = Notes {
            ended,
            forwarder,
            dropped,
        };
        (on_update, on_log, Some(notes))
    }

    /// Call `call_id` ended: what is queued goes out (within 5 s; what is not sent by then
    /// never is: no note after the answer).
    pub(super) async fn finish(self, call_id: &str) {
        let Notes {
            ended,
            mut forwarder,
            dropped,
        } = self;
        let _ = ended.send(());
        if tokio::time::timeout(FLUSH_WITHIN, &mut forwarder)
            .await
            .is_err()
        {
            forwarder.abort();
            tracing::warn!(call = %call_id, "notifications still pending at the answer dropped");
        }
        let dropped = dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(call = %call_id, dropped, "notifications dropped (more than 1024 unsent; the journal has every line)");
        }
    }
}
