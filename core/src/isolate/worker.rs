//! The worker side: what `rho-worker <plugin copy>` runs. It loads one plugin, says `Ready` on its
//! channel (fd 3), then serves calls one at a time on a thread of their own, so a `Cancel` can set
//! the running call's flag while it runs. It exits when the host closes the channel.
//!
//! Only this process is at risk: a plugin that segfaults, aborts or exits takes the worker down,
//! and the host reads that as the call's crash.

use std::io::BufReader;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rho_plugin_api::{Answer, Output};

use crate::invoke::Failure;
use crate::isolate::protocol::{
    CHANNEL_FD, FrameError, FromWorker, ImageHead, ToWorker, read_frame, write_frame,
};
use crate::outcome::crash_text;
use crate::plugin::call::call_module;
use crate::plugin::load::load_checked_copy;

/// The largest frame a worker accepts from its host (arguments): 1 GiB.
const MAX_FROM_HOST: usize = 1 << 30;

type Channel = Arc<Mutex<UnixStream>>;

fn send(channel: &Channel, message: &FromWorker, blobs: &[&[u8]]) -> bool {
    let mut stream = channel.lock().unwrap_or_else(PoisonError::into_inner);
    write_frame(&mut *stream, message, blobs).is_ok()
}

/// The worker's main: `rho-worker PLUGIN_COPY [SHOWN_PATH]`.
pub fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(copy) = args.next().map(PathBuf::from) else {
        eprintln!(
            "rho-worker: usage: rho-worker PLUGIN_COPY [SHOWN_PATH] (started by a rho host, channel on fd 3)"
        );
        return ExitCode::from(2);
    };
    let shown = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| copy.clone());
    // SAFETY: fcntl on a descriptor number has no memory effects; a bad fd just fails.
    let valid = unsafe { libc::fcntl(CHANNEL_FD, libc::F_SETFD, libc::FD_CLOEXEC) } == 0;
    if !valid {
        eprintln!(
            "rho-worker: no channel on fd {CHANNEL_FD}: this program is started by a rho host"
        );
        return ExitCode::from(2);
    }
    // SAFETY: fd 3 is the channel the host opened for us and nothing else owns it.
    let stream = unsafe { UnixStream::from_raw_fd(CHANNEL_FD) };
    let Ok(writer) = stream.try_clone() else {
        return ExitCode::from(1);
    };
    let channel: Channel = Arc::new(Mutex::new(writer));
    let loaded = match load_checked_copy(&copy, &shown) {
        Ok(loaded) => loaded,
        Err(error) => {
            send(
                &channel,
                &FromWorker::LoadFailed {
                    error: error.to_string(),
                },
                &[],
            );
            return ExitCode::SUCCESS;
        }
    };
    let ready = FromWorker::Ready {
        name: loaded.info.name.clone(),
        version: loaded.info.version.clone(),
        interface_version: loaded.info.interface_version,
        tools: loaded.tools.clone(),
        rejected: loaded.rejected.clone(),
    };
    if !send(&channel, &ready, &[]) {
        return ExitCode::from(1);
    }
    serve(BufReader::new(stream), &channel, loaded.module)
}

/// One call for the call thread.
struct Job {
    id: u64,
    tool: String,
    args: String,
    call_id: String,
    cancelled: Arc<AtomicBool>,
}

fn serve(
    mut reader: BufReader<UnixStream>,
    channel: &Channel,
    module: rho_plugin_api::ffi::PluginModRef,
) -> ExitCode {
    // Calls run on one long-lived thread, so the main thread can take a `Cancel` meanwhile; the
    // host sends one call at a time.
    let (jobs, queue) = std::sync::mpsc::channel::<Job>();
    let call_channel = channel.clone();
    let spawned = std::thread::Builder::new()
        .name("rho-worker-call".into())
        .spawn(move || {
            while let Ok(job) = queue.recv() {
                let updates = call_channel.clone();
                let id = job.id;
                let on_update = move |partial: &str| {
                    let update = FromWorker::Update {
                        id,
                        partial: partial.to_owned(),
                    };
                    send(&updates, &update, &[]);
                };
                let result = call_module(
                    module,
                    &job.tool,
                    &job.args,
                    &job.call_id,
                    &job.cancelled,
                    &on_update,
                );
                answer(&call_channel, id, result);
            }
        });
    if let Err(e) = spawned {
        eprintln!("rho-worker: cannot start the call thread: {e}");
        return ExitCode::from(1);
    }
    let mut running: Option<(u64, Arc<AtomicBool>)> = None;
    loop {
        let frame = match read_frame::<ToWorker>(&mut reader, MAX_FROM_HOST) {
            Ok(frame) => frame,
            Err(FrameError::Closed) => return ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("rho-worker: {error}");
                return ExitCode::from(1);
            }
        };
        match frame.message {
            ToWorker::Cancel { id } => {
                if let Some((current, flag)) = &running
                    && *current == id
                {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            ToWorker::Call {
                id,
                tool,
                args,
                call_id,
            } => {
                let cancelled = Arc::new(AtomicBool::new(false));
                running = Some((id, cancelled.clone()));
                if jobs
                    .send(Job {
                        id,
                        tool,
                        args,
                        call_id,
                        cancelled,
                    })
                    .is_err()
                {
                    return ExitCode::from(1);
                }
            }
        }
    }
}

fn answer(channel: &Channel, id: u64, result: Result<Answer, Failure>) {
    let (message, blobs): (FromWorker, Vec<&[u8]>) = match &result {
        Ok(answer) => {
            let (kind, text) = match &answer.output {
                Output::Text(text) => ("text", text),
                Output::Image { text, .. } => ("image", text),
                Output::Images { text, .. } => ("images", text),
            };
            let images = answer.output.images();
            let heads = images
                .iter()
                .map(|i| ImageHead {
                    mime_type: i.mime_type.clone(),
                    len: i.bytes.len(),
                })
                .collect();
            let message = FromWorker::Answer {
                id,
                kind: kind.into(),
                text: text.clone(),
                images: heads,
                details: answer.details.as_ref().map(|d| d.to_string()),
            };
            (message, images.iter().map(|i| i.bytes.as_slice()).collect())
        }
        Err(failure) => {
            let (kind, message, details) = match failure {
                Failure::Tool(e) => (
                    "error",
                    e.message.clone(),
                    e.details.as_ref().map(|d| d.to_string()),
                ),
                Failure::Crash(reason) => ("panic", crash_text(reason), None),
                Failure::InvalidArguments(m) => ("invalid_arguments", m.clone(), None),
                Failure::UnknownTool(m) => ("unknown_tool", m.clone(), None),
            };
            (
                FromWorker::Failure {
                    id,
                    kind: kind.into(),
                    message,
                    details,
                },
                Vec::new(),
            )
        }
    };
    send(channel, &message, &blobs);
}
