//! The worker side: what `rho-worker` runs. It takes its descriptors (see [`take_handed`]), reads
//! the sandbox to enter from its channel (fd 3), enters it (see [`crate::sandbox`]),
//! loads the plugin from fd 5, says `Ready` with what of the sandbox is in force, then runs calls
//! one at a time on its main thread; a second thread reads the cancel channel (fd 4) and sets the
//! running call's flag. It exits when the host closes the channel.
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
use std::time::Duration;

use crate::loader::call::{CallInfo, RawAnswer, RawFailure, call_module};
use crate::loader::load::load_checked_copy;
use crate::sandbox;
use rho_protocol::answer::FailureKind;
use rho_protocol::frames::{
    CANCEL_FD, CHANNEL_FD, Frame, FrameError, FromWorker, GRANT_FDS, HANDED_CONTROL_WORDS,
    HANDED_OVER, ToWorker, encode_answer, encode_questions, read_frame, write_frame,
};
use rho_protocol::{Failure, PROTOCOL_VERSION};

/// The largest frame a worker accepts from its host (arguments): 1 GiB.
const MAX_FROM_HOST: usize = 1 << 30;

type Channel = Arc<Mutex<UnixStream>>;

fn send(channel: &Channel, message: &FromWorker, blobs: &[&[u8]]) -> bool {
    let mut stream = channel.lock().unwrap_or_else(PoisonError::into_inner);
    write_frame(&mut *stream, message, blobs).is_ok()
}

/// The call running now, for the cancel thread.
type Running = Arc<Mutex<Option<(u64, Arc<AtomicBool>)>>>;

/// The worker's first step, before it reads a frame: a session of its own (no terminal, a process
/// group the host can kill whole), the parent-death signal, the channel moved from stdin to
/// [`CHANNEL_FD`] (stdin becomes `/dev/null`), every other descriptor it inherited closed, then
/// the [`HANDED_OVER`] descriptors taken from the channel onto their numbers, close-on-exec, and
/// the granted paths' after them ([`GRANT_FDS`] on). Returns how many grants came.
fn take_handed() -> Result<usize, String> {
    let os_error = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY (this function): system calls on this process's own descriptors and state, while it
    // is single-threaded; `recvmsg` writes into `byte` and `control`, which outlive the call, and
    // the descriptors are read from inside `control` as the kernel wrote them.
    unsafe {
        libc::setsid();
        // macOS has no parent-death signal: the worker watches its host instead
        // (`sandbox::enter`).
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::dup2(0, CHANNEL_FD) != CHANNEL_FD
            || libc::fcntl(CHANNEL_FD, libc::F_SETFD, libc::FD_CLOEXEC) != 0
        {
            return Err(os_error("no channel on stdin"));
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
        if null < 0 || libc::dup2(null, 0) != 0 {
            return Err(os_error("opening /dev/null"));
        }
        close_from(CHANNEL_FD + 1);
        let mut byte = [0u8];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: byte.len(),
        };
        let mut control = [0u64; HANDED_CONTROL_WORDS];
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&control) as _;
        if libc::recvmsg(CHANNEL_FD, &mut message, RECEIVE_CLOEXEC) != 1 {
            return Err(os_error("no descriptors on the channel"));
        }
        let header = libc::CMSG_FIRSTHDR(&message);
        let carried = if header.is_null() {
            0
        } else {
            ((*header).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize)
                / std::mem::size_of::<i32>()
        };
        if header.is_null()
            || (*header).cmsg_level != libc::SOL_SOCKET
            || (*header).cmsg_type != libc::SCM_RIGHTS
            || carried < HANDED_OVER.len()
            || message.msg_flags & libc::MSG_CTRUNC != 0
        {
            return Err("the channel's first message did not carry the descriptors".into());
        }
        let mut got = vec![0i32; carried];
        std::ptr::copy_nonoverlapping(
            libc::CMSG_DATA(header),
            got.as_mut_ptr().cast::<u8>(),
            carried * std::mem::size_of::<i32>(),
        );
        // Everything from CHANNEL_FD + 1 up was closed: they arrived on the lowest free numbers,
        // which are theirs.
        let expected: Vec<i32> = HANDED_OVER
            .iter()
            .copied()
            .chain((0..carried - HANDED_OVER.len()).map(|i| GRANT_FDS + i as i32))
            .collect();
        if got != expected {
            return Err(format!("descriptors arrived on {got:?}, not {expected:?}"));
        }
        // Where `recvmsg` cannot mark them close-on-exec as they arrive.
        #[cfg(not(target_os = "linux"))]
        for fd in got {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        Ok(carried - HANDED_OVER.len())
    }
}

/// `recvmsg`'s flag marking received descriptors close-on-exec (Linux's; elsewhere they are
/// marked right after).
#[cfg(target_os = "linux")]
const RECEIVE_CLOEXEC: libc::c_int = libc::MSG_CMSG_CLOEXEC;
#[cfg(not(target_os = "linux"))]
const RECEIVE_CLOEXEC: libc::c_int = 0;

/// Closes every descriptor from `first` up.
fn close_from(first: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: close_range has no memory effects; closing descriptors nothing else owns yet.
    if unsafe { libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0) } == 0 {
        return;
    }
    // Kernels before 5.11 and other systems: one descriptor at a time, up to the limit.
    // SAFETY: getdtablesize has no preconditions; close on any number only fails.
    let limit = unsafe { libc::getdtablesize() }.clamp(first, 1 << 16);
    for fd in first..limit {
        // SAFETY: as above.
        unsafe { libc::close(fd) };
    }
}

/// Takes a descriptor the host passed, marking it close-on-exec (the plugin's own children must
/// not inherit it).
fn take_fd(fd: i32, what: &str) -> Option<UnixStream> {
    // SAFETY: fcntl on a descriptor number has no memory effects; a bad fd just fails.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        eprintln!("rho-worker: no {what} on fd {fd}: this program is started by a rho host");
        return None;
    }
    // SAFETY: the host opened this descriptor for us and nothing else owns it.
    Some(unsafe { UnixStream::from_raw_fd(fd) })
}

/// The first argument of a worker process: `EXE --rho-worker PROTOCOL SHOWN_PATH`. A host binary
/// that calls [`run_if_worker`] first thing in `main` is its own worker: started so, it runs the
/// worker's body and exits.
pub const WORKER_ARG: &str = "--rho-worker";

/// Whether this process called [`run_if_worker`]: its own executable can be its workers'.
static SELF_WORKER: AtomicBool = AtomicBool::new(false);

/// Makes this binary its own worker: call it first thing in `main`, before the tokio runtime and
/// before any thread exists (a process with threads cannot make the user namespace its sandbox
/// needs). Started as a worker (`EXE --rho-worker ...`), it runs the worker's body and exits
/// with its status; otherwise it returns at once, and the runtime starts this executable for its
/// workers instead of looking for a `rho-worker` program.
pub fn run_if_worker() {
    SELF_WORKER.store(true, Ordering::Relaxed);
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == WORKER_ARG)
    {
        std::process::exit(i32::from(run()));
    }
}

/// Whether [`run_if_worker`] was called in this process (so its executable serves as a worker).
pub fn self_worker() -> bool {
    SELF_WORKER.load(Ordering::Relaxed)
}

/// The body of the `rho-worker` program: `rho-worker --rho-worker PROTOCOL SHOWN_PATH`, its
/// channel on stdin bringing its other descriptors. Not for hosts: a host finds `rho-worker`
/// through its worker options, or is its own worker ([`run_if_worker`]).
pub fn main() -> ExitCode {
    ExitCode::from(run())
}

/// The worker's arguments: the host's protocol version and the plugin's path for messages.
fn arguments() -> Result<PathBuf, String> {
    let mut args = std::env::args_os().skip(1);
    let usage = || {
        "usage: rho-worker --rho-worker PROTOCOL SHOWN_PATH (started by a rho host, channels on \
         fds 3 and 4, the plugin on fd 5)"
            .to_owned()
    };
    if args.next().is_none_or(|arg| arg != WORKER_ARG) {
        return Err(usage());
    }
    let protocol = args.next().ok_or_else(usage)?;
    let protocol = protocol.to_string_lossy();
    if protocol != PROTOCOL_VERSION.to_string() {
        return Err(format!(
            "the host speaks protocol {protocol}, this worker speaks {PROTOCOL_VERSION}: run the \
             worker of the host's own rho release"
        ));
    }
    args.next().map(PathBuf::from).ok_or_else(usage)
}

/// The worker's body (see the module doc); its exit status.
fn run() -> u8 {
    // The arguments first: a host of another release is told so before anything else.
    let shown = match arguments() {
        Ok(shown) => shown,
        Err(line) => {
            eprintln!("rho-worker: {line}");
            return 2;
        }
    };
    let grant_fds = match take_handed() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("rho-worker: {e} (this program is started by a rho host)");
            return 2;
        }
    };
    keep_freed_memory();
    let Some(stream) = take_fd(CHANNEL_FD, "channel") else {
        return 2;
    };
    let load_failed = |error: String| {
        let _ = write_frame(&mut &stream, &FromWorker::LoadFailed { error }, &[]);
        0
    };
    // Read unbuffered: nothing past the first frame may be consumed before the sandbox forks.
    let (spec, program) = match read_frame::<ToWorker>(&mut &stream, MAX_FROM_HOST) {
        Ok(Frame {
            message: ToWorker::Start { protocol, sandbox },
            ..
        }) if protocol == PROTOCOL_VERSION => (sandbox, None),
        Ok(Frame {
            message:
                ToWorker::Exec {
                    protocol,
                    sandbox,
                    program,
                    args,
                    cwd,
                },
            ..
        }) if protocol == PROTOCOL_VERSION => {
            (sandbox, Some(crate::exec::Program { program, args, cwd }))
        }
        Ok(Frame {
            message: ToWorker::Start { protocol, .. } | ToWorker::Exec { protocol, .. },
            ..
        }) => {
            return load_failed(format!(
                "the host speaks protocol {protocol}, this worker speaks {PROTOCOL_VERSION}"
            ));
        }
        Ok(_) => return load_failed("the host sent something else than Start".into()),
        Err(e) => return load_failed(format!("reading the sandbox: {e}")),
    };
    if spec.grant_paths.len() != grant_fds {
        return load_failed(format!(
            "{} grants were announced and {grant_fds} descriptors came",
            spec.grant_paths.len()
        ));
    }
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != spec.host_pid {
        // The host died before the parent-death signal was armed.
        return 1;
    }
    if let Some(program) = program {
        return crate::exec::run(&stream, &spec, &program);
    }
    let Some(cancel) = take_fd(CANCEL_FD, "cancel channel") else {
        return 2;
    };
    // Only the plugin process returns from here; the worker and the sandbox's init wait inside
    // and end as it does.
    let mut entered = match sandbox::enter(&spec, sandbox::Runs::Plugin) {
        Ok(entered) => entered,
        Err(e) => return load_failed(format!("setting up the sandbox: {e}")),
    };
    sandbox::confine(&spec, &mut entered);
    let sandbox::Entered { report, plugin } = entered;
    let Some(plugin) = plugin else {
        return load_failed("the sandbox has no copy of the plugin".into());
    };
    // Before any of the plugin's code runs: its load-time code could write frames of its own.
    let confined = FromWorker::Confined {
        protocol: PROTOCOL_VERSION,
        sandbox: report.clone(),
    };
    if write_frame(&mut &stream, &confined, &[]).is_err() {
        return 1;
    }
    let loaded = match load_checked_copy(&plugin, &shown) {
        Ok(loaded) => loaded,
        Err(error) => return load_failed(error.to_string()),
    };
    // The image stays mapped and the Landlock rules hold without them: the plugin keeps only
    // its channels.
    // SAFETY: closing descriptors this process owns and no longer uses (on macOS the worker
    // closed it before the plugin process loaded its own copy).
    #[cfg(target_os = "linux")]
    unsafe {
        libc::close(rho_protocol::frames::PLUGIN_FD);
    }
    // The writing end for the call thread and the update callbacks (fd 5 from here on).
    let Ok(writer) = stream.try_clone() else {
        return 1;
    };
    let channel: Channel = Arc::new(Mutex::new(writer));
    let ready = FromWorker::Ready {
        name: loaded.info.name.clone(),
        version: loaded.info.version.clone(),
        interface_version: loaded.info.interface_version,
        tools: loaded.tools.clone(),
        rejected: loaded.rejected.clone(),
        capabilities: loaded.info.capabilities.clone(),
    };
    if !send(&channel, &ready, &[]) {
        return 1;
    }
    let running: Running = Arc::new(Mutex::new(None));
    let cancel_running = running.clone();
    let cancels = std::thread::Builder::new()
        .name("rho-worker-cancel".into())
        .spawn(move || read_cancels(BufReader::new(cancel), &cancel_running));
    if let Err(e) = cancels {
        eprintln!("rho-worker: cannot start the cancel thread: {e}");
        return 1;
    }
    let sandbox = Confinement {
        grants: spec.grants,
        report,
        threads: sandbox::ThreadCounter::open()
            .and_then(|counter| Some((counter.count()?, counter))),
    };
    serve(
        BufReader::new(stream),
        &channel,
        loaded.module,
        &running,
        &sandbox,
    )
}

/// The most freed heap a worker keeps for its next calls instead of giving it back to the kernel,
/// and the size from which an allocation is a mapping of its own (given back at once).
#[cfg(target_env = "gnu")]
const KEPT_HEAP: usize = 16 << 20;
#[cfg(target_env = "gnu")]
const OWN_MAPPING_FROM: usize = 8 << 20;

/// Calls of one worker allocate the same buffers again and again (frames, arguments, answers):
/// glibc's defaults give a freed top of the heap over 128 KiB back to the kernel at once, so
/// each call of 64 KiB or more paid `brk` calls, page faults on fresh pages and, with the
/// worker's second thread, TLB shootdowns (perf of a 64 KiB echo: a fifth of the worker's time).
/// A worker keeps up to [`KEPT_HEAP`] of freed heap instead, and payloads under
/// [`OWN_MAPPING_FROM`] come from the heap. Setting either also stops glibc adjusting them.
fn keep_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt changes settings of this process's allocator, nothing else; the process is
    // single-threaded here.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_HEAP as libc::c_int);
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_FROM as libc::c_int);
    }
}

/// What the plugin process knows of its sandbox while serving.
struct Confinement {
    grants: rho_protocol::Grants,
    report: rho_protocol::SandboxReport,
    /// Threads once loaded (the plugin's own load-time threads included), and the counter that
    /// counts them again after each call.
    threads: Option<(usize, sandbox::ThreadCounter)>,
}

/// Sets the flag of the running call when its `Cancel` arrives.
fn read_cancels(mut reader: BufReader<UnixStream>, running: &Running) {
    while let Ok(frame) = read_frame::<ToWorker>(&mut reader, MAX_FROM_HOST) {
        if let ToWorker::Cancel { id } = frame.message
            && let Some((current, flag)) = &*running.lock().unwrap_or_else(PoisonError::into_inner)
            && *current == id
        {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs each call on this thread as it arrives.
fn serve(
    mut reader: BufReader<UnixStream>,
    channel: &Channel,
    module: rho_plugin_api::ffi::PluginModRef,
    running: &Running,
    sandbox: &Confinement,
) -> u8 {
    loop {
        if reader.buffer().is_empty() {
            wait_readable(reader.get_ref());
        }
        let frame = match read_frame::<ToWorker>(&mut reader, MAX_FROM_HOST) {
            Ok(frame) => frame,
            Err(FrameError::Closed) => return 0,
            Err(error) => {
                eprintln!("rho-worker: {error}");
                return 1;
            }
        };
        let ToWorker::Call {
            id,
            tool,
            call_id,
            time_left_ms,
            traceparent,
        } = frame.message
        else {
            continue;
        };
        let Ok(args) = String::from_utf8(frame.blobs) else {
            let failure = FromWorker::Failure {
                id,
                kind: FailureKind::InvalidArguments,
                message: "the arguments are not UTF-8 text".into(),
                details: None,
                spent: false,
            };
            send(channel, &failure, &[]);
            continue;
        };
        let cancelled = Arc::new(AtomicBool::new(false));
        *running.lock().unwrap_or_else(PoisonError::into_inner) = Some((id, cancelled.clone()));
        let updates = channel.clone();
        let on_update = move |partial: &str| {
            let update = FromWorker::Update {
                id,
                partial: partial.to_owned(),
            };
            send(&updates, &update, &[]);
        };
        let logs = channel.clone();
        let on_log = move |level, line: &str| {
            let log = FromWorker::Log {
                id,
                level,
                line: line.to_owned(),
            };
            send(&logs, &log, &[]);
        };
        // A question goes to the host and this thread reads its channel until the reply (the
        // host sends nothing else on it while the call runs; a frame of another call or kind is
        // skipped). The host bounds the wait: it replies or ends this worker.
        let asks = channel.clone();
        let replies = Mutex::new(&mut reader);
        let on_ask = move |questions: Vec<rho_plugin_api::Question>| {
            let cancelled = |why: &str| {
                let replies = questions
                    .iter()
                    .map(|_| rho_plugin_api::Reply::Cancelled(why.into()))
                    .collect();
                (replies, None)
            };
            let (ask, blob) = encode_questions(id, &questions);
            if !send(&asks, &ask, &[&blob]) {
                return cancelled("the host went away");
            }
            let mut reader = replies.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                match read_frame::<ToWorker>(&mut **reader, MAX_FROM_HOST) {
                    Ok(Frame {
                        message:
                            ToWorker::Answered {
                                id: answered,
                                replies,
                                time_left_ms,
                            },
                        ..
                    }) if answered == id => {
                        return (replies, time_left_ms.map(Duration::from_millis));
                    }
                    Ok(_) => {}
                    Err(_) => return cancelled("the host went away"),
                }
            }
        };
        let info = CallInfo {
            time_left: time_left_ms.map(Duration::from_millis),
            traceparent: traceparent.as_deref().unwrap_or_default(),
            on_log: Some(&on_log),
            on_ask: Some(&on_ask),
        };
        let result = call_module(module, &tool, &args, &call_id, &cancelled, &on_update, info);
        *running.lock().unwrap_or_else(PoisonError::into_inner) = None;
        // Before answering: what the call started is gone when the host reads the answer.
        let threads = sandbox.threads.as_ref().map(|(n, counter)| (*n, counter));
        let spent = sandbox::after_call(&sandbox.report, threads);
        answer(channel, id, result, spent, &sandbox.grants);
    }
}

/// Waits until the host has sent something on `socket` (or closed it), in `poll`, not in `read`.
///
/// A reader blocked in `read` on a Unix socket sleeps on the socket's one wait queue, which is
/// also where the kernel says "room to write" each time the host consumes what this worker sent:
/// every answer the host read woke this worker for nothing (perf: a tenth of the host's time at
/// 64 KiB, the cost of the interrupt that wakes an idle processor). `poll` asks for input only
/// and is not woken by that.
fn wait_readable(socket: &UnixStream) {
    use std::os::fd::AsRawFd;
    let mut wanted = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes the one `pollfd` it is given. Any outcome (input, hang-up,
    // an error, EINTR) goes on to the read, which tells them apart.
    unsafe {
        libc::poll(&mut wanted, 1, -1);
    }
}

fn answer(
    channel: &Channel,
    id: u64,
    result: Result<RawAnswer, RawFailure>,
    spent: bool,
    grants: &rho_protocol::Grants,
) {
    let noted = |text: String| match sandbox::denial_note(&text, grants) {
        Some(note) => format!("{text} {note}"),
        None => text,
    };
    let (message, blobs): (FromWorker, Vec<&[u8]>) = match result {
        Ok(RawAnswer {
            ref output,
            structured,
            details,
        }) => encode_answer(id, output, structured, details, spent),
        Err(failure) => {
            let (kind, message, details) = match failure {
                RawFailure::Failed {
                    kind,
                    message,
                    details,
                } => match kind {
                    FailureKind::Error | FailureKind::Panic => (kind, noted(message), details),
                    _ => (kind, message, None),
                },
                RawFailure::Broken(failure) => {
                    let (kind, message) = FailureKind::of(&failure);
                    match failure {
                        Failure::Tool(e) => {
                            (kind, noted(message), e.details.map(|d| d.to_string()))
                        }
                        Failure::Crash(_) => (kind, noted(message), None),
                        _ => (kind, message, None),
                    }
                }
            };
            (
                FromWorker::Failure {
                    id,
                    kind,
                    message,
                    details,
                    spent,
                },
                Vec::new(),
            )
        }
    };
    send(channel, &message, &blobs);
}
