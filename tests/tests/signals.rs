//! [2/11] A stop signal is never lost, whenever it comes: every long-running command (`serve`
//! over stdio and HTTP, `watch`, `node`) started as a background job of a script starts (SIGINT
//! inherited ignored), sent SIGINT or SIGTERM at moments from 0 to 2 s after its start (some
//! while a hundred isolated plugins load), ends within 10 s of the signal, leaving no worker of
//! its own and no private copy behind (before: a SIGINT in the first moments, or during the whole
//! initial load, was ignored for good). SIGINT's moments count from rho's first instruction: an
//! ignored signal sent while the program is still being loaded is discarded by the kernel.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rho_tests::{NatsServer, install, rho_bin};

/// The bound on an exit after a stop signal, start-up included.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// The processes whose command line names `marker` (a plugin directory's path: its workers').
fn processes_naming(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!("{name}: {cmdline}"));
        }
    }
    found
}

/// Whether process `pid` catches `signal` now (`SigCgt` of its status).
fn catches(pid: u32, signal: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

/// One run: `args` of `rho`, its plugins in `plugins`, started with SIGINT ignored (as a
/// background job of a script), sent `signal` `after` its start; it must end within the bound
/// and leave no process naming its plugin directory and nothing in its TMPDIR.
fn run_and_stop(what: &str, args: &[&str], plugins: &Path, signal: i32, after: Duration) {
    let tmp = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut command = Command::new(rho_bin());
    command
        .args(args)
        .env("TMPDIR", tmp.path())
        .env("XDG_STATE_HOME", state.path())
        .env("XDG_RUNTIME_DIR", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec only signal(2), async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let _stdin = child.stdin.take();
    // An ignored signal sent before the program's first instruction is discarded by the kernel
    // (nothing can catch it): SIGINT's moments count from there, when rho catches it.
    if signal == libc::SIGINT {
        let started = Instant::now();
        while !catches(child.id(), signal) {
            assert!(
                started.elapsed() < EXIT_WITHIN,
                "{what}: never catches SIGINT"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::thread::sleep(after);
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let sent = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if sent.elapsed() > EXIT_WITHIN {
            let _ = child.kill();
            let _ = child.wait();
            let mut stderr = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr);
            panic!(
                "{what}: still running {EXIT_WITHIN:?} after signal {signal} sent {after:?} after \
                 its start: {stderr}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr);
    // Stopped by its handler (0), or by the signal itself before rho's first instruction.
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.success() || status.signal() == Some(signal),
        "{what}: signal {signal} after {after:?} ended it with {status:?}: {stderr}"
    );
    let marker = plugins.to_str().unwrap();
    let deadline = Instant::now() + EXIT_WITHIN;
    loop {
        let left = processes_naming(marker);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: processes left {EXIT_WITHIN:?} after it ended: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let copies: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        copies.is_empty(),
        "{what}: left in its TMPDIR after signal {signal} at {after:?}: {copies:?}"
    );
}

/// A directory of `n` copies of `echo` under their own names (each a plugin file to load,
/// isolated).
fn copies_of_echo(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(rho_tests::host_dir("rho-signal-tests")).unwrap();
    let one = install(dir.path(), "echo");
    for i in 1..n {
        std::fs::copy(&one, dir.path().join(format!("libecho{i}.so"))).unwrap();
    }
    dir
}

/// The moments signals are sent at, after the start: the first instants, the load, later.
const MOMENTS_MS: [u64; 7] = [0, 20, 50, 100, 200, 700, 2000];

#[test]
fn every_long_running_command_stops_on_a_signal_whenever_it_comes() {
    let nats = NatsServer::start();
    let url = nats.url();
    let one = copies_of_echo(1);
    let many = copies_of_echo(100);
    let commands: Vec<(&str, Vec<String>)> = vec![
        ("serve (stdio)", vec!["serve".into()]),
        (
            "serve --http",
            vec!["serve".into(), "--http".into(), "127.0.0.1:0".into()],
        ),
        ("watch", vec!["watch".into()]),
        (
            "node",
            vec![
                "node".into(),
                "--nats".into(),
                url.clone(),
                "--node".into(),
                "sig".into(),
            ],
        ),
    ];
    for (what, base) in &commands {
        for (i, ms) in MOMENTS_MS.iter().enumerate() {
            let signal = if i % 2 == 0 {
                libc::SIGINT
            } else {
                libc::SIGTERM
            };
            // Every third run while a hundred isolated plugins load.
            let dir = if i % 3 == 1 { &many } else { &one };
            let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
            args.extend(["--plugins", dir.path().to_str().unwrap()]);
            run_and_stop(what, &args, dir.path(), signal, Duration::from_millis(*ms));
        }
    }
}
