//! [1/13]: containment that holds under the next round of attacks. Grants mean what they say (a
//! grant under /tmp is visible, a grant cannot be redirected), the world outside the grants is
//! read-only (metadata included), and memory the address-space limit does not see is bounded.
//! Each test runs the `attacks` fixture plugin in sandboxed workers and checks from the host's
//! side. CI runs as root: plugins then run as `nobody`, and the host of an ordinary user is
//! `rho` started with another uid.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

use rho_runtime::{
    DirOptions, Grants, Host, Identity, Isolation, Outcome, WorkerLimits, WorkerOptions,
};
use rho_tests::{host_with, install, timeout};
use serde_json::{Value, json};

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A host serving `attacks` isolated with `grants`, `limits` and `identity`, one worker at a
/// time (so a plugin's leftovers are seen by its next call), no spare.
async fn attacks(
    grants: Grants,
    limits: WorkerLimits,
    identity: Identity,
) -> (Host, tempfile::TempDir) {
    let base = rho_tests::host_dir("rho-containment-tests");
    let dir = tempfile::tempdir_in(&base).unwrap();
    install(dir.path(), "attacks");
    let options = DirOptions {
        isolation: Isolation::Process(WorkerOptions {
            grants,
            limits,
            identity,
            spares: 0,
            max_workers: 1,
            ..WorkerOptions::default()
        }),
        ..DirOptions::default()
    };
    let (host, report) = host_with(dir.path(), options, |b| b.runner(timeout(10_000))).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    (host, dir)
}

async fn run(host: &Host, tool: &str, args: Value) -> (Outcome, String) {
    let r = host.call(tool, args).await;
    (r.outcome, r.text().into_owned())
}

/// A directory the plugins' user can use: under `within`, mode `mode`, owned by `nobody` when
/// this runs as root.
fn dir_for_plugins(within: &Path, mode: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(within).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    if root() {
        std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    }
    dir
}

/// A read grant and a write grant under /tmp are there, at their paths, in the sandbox (before:
/// the scratch tmpfs hid them, the plugin got "No such file or directory", and `rho tools`
/// listed them as granted); the read grant stays read-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_under_tmp_are_visible_at_their_paths() {
    let tmp = Path::new("/tmp");
    let readable = dir_for_plugins(tmp, 0o755);
    let writable = dir_for_plugins(tmp, 0o755);
    std::fs::write(readable.path().join("data.txt"), "granted data").unwrap();
    let (host, _dir) = attacks(
        Grants {
            read: vec![readable.path().to_owned()],
            write: vec![writable.path().to_owned()],
            ..Grants::default()
        },
        WorkerLimits::default(),
        Identity::Auto,
    )
    .await;
    let data = readable.path().join("data.txt");
    let (outcome, text) = run(&host, "read_file", json!({"path": data})).await;
    assert_eq!(outcome, Outcome::Ok, "{text}");
    assert!(text.ends_with("granted data"), "{text}");
    let out = writable.path().join("out.txt");
    let (outcome, text) = run(&host, "write_file", json!({"path": out, "text": "hello"})).await;
    assert_eq!(outcome, Outcome::Ok, "{text}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hello");
    for target in [data.clone(), readable.path().join("new.txt")] {
        let (outcome, text) = run(&host, "write_file", json!({"path": target, "text": "x"})).await;
        assert_eq!(outcome, Outcome::Error, "{}: {text}", target.display());
        assert!(text.contains("Read-only file system"), "{text}");
    }
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "granted data");
    // What is in force is what was granted, in the plugin's report and in its info.
    let info = &host.plugins().await[0];
    let granted = info.granted.as_ref().unwrap();
    assert_eq!(granted.read, [readable.path().canonicalize().unwrap()]);
    assert_eq!(granted.write, [writable.path().canonicalize().unwrap()]);
    host.shutdown().await;
}

/// `/tmp` itself and `/proc` cannot be granted: the directory's plugins are refused with one
/// line saying why, and another directory serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_cannot_be_put_in_force_refuses_the_directory_in_one_line() {
    let base = rho_tests::host_dir("rho-containment-tests");
    let refused = tempfile::tempdir_in(&base).unwrap();
    install(refused.path(), "attacks");
    let served = tempfile::tempdir_in(&base).unwrap();
    install(served.path(), "echo");
    let with = |grants: Grants| DirOptions {
        isolation: Isolation::Process(WorkerOptions {
            grants,
            spares: 0,
            ..WorkerOptions::default()
        }),
        ..DirOptions::default()
    };
    for grants in [
        Grants {
            read: vec!["/tmp".into()],
            ..Grants::default()
        },
        Grants {
            write: vec!["/".into()],
            ..Grants::default()
        },
    ] {
        let (host, reports) = Host::builder()
            .plugin_dir(refused.path(), with(grants))
            .plugin_dir(served.path(), with(Grants::default()))
            .build()
            .await
            .unwrap();
        assert_eq!(reports[0].errors.len(), 1, "{:?}", reports[0].errors);
        assert!(
            reports[0].errors[0].contains("the sandbox's own"),
            "{}",
            reports[0].errors[0]
        );
        assert!(reports[1].errors.is_empty(), "{:?}", reports[1].errors);
        let r = host.call("echo", json!({"text": "hi"})).await;
        assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
        host.shutdown().await;
    }
}

/// With `--grant-write w --grant-read w/sub`, a plugin replaces `w/sub` with a symlink to a
/// secret directory; the next worker still grants only the directory the host resolved (before:
/// it applied the read grant through the symlink, and the plugin read the secret).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_swapped_for_a_symlink_is_not_redirected() {
    let base = rho_tests::host_dir("rho-containment-tests");
    let w = dir_for_plugins(&base, 0o755);
    let secret = dir_for_plugins(&base, 0o755);
    let sub = w.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("mine.txt"), "granted").unwrap();
    std::fs::write(secret.path().join("secret.txt"), "the secret").unwrap();
    if root() {
        std::os::unix::fs::chown(&sub, Some(65534), Some(65534)).unwrap();
    }
    let (host, _dir) = attacks(
        Grants {
            write: vec![w.path().to_owned()],
            read: vec![sub.clone()],
            ..Grants::default()
        },
        WorkerLimits::default(),
        Identity::Auto,
    )
    .await;
    let (outcome, text) = run(
        &host,
        "swap_for_symlink",
        json!({"path": sub, "target": secret.path()}),
    )
    .await;
    assert_eq!(outcome, Outcome::Ok, "{text}");
    // A call that leaves its worker spent: the next call has a new worker, set up after the swap.
    let (outcome, _) = run(&host, "exhaust_fds", json!({})).await;
    assert_eq!(outcome, Outcome::Ok);
    let (outcome, text) = run(&host, "ids", json!({})).await;
    assert_eq!(outcome, Outcome::Ok, "{text}");
    for path in [sub.join("secret.txt"), secret.path().join("secret.txt")] {
        let (outcome, text) = run(&host, "read_file", json!({"path": path})).await;
        assert_eq!(outcome, Outcome::Error, "{}: {text}", path.display());
        assert!(!text.contains("the secret"), "{text}");
    }
    // The directory that was granted is still readable where the plugin moved it.
    let moved = w.path().join("sub.old").join("mine.txt");
    let (outcome, text) = run(&host, "read_file", json!({"path": moved})).await;
    assert_eq!(outcome, Outcome::Ok, "{text}");
    host.shutdown().await;
}

/// The modes of `path` (the permission bits and setuid/setgid/sticky).
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A host of an ordinary user, no grants: the plugin changes no metadata outside its scratch
/// (before: `chmod 0666` of a key file, `utimes`, `setxattr` and `chmod 0777` of its own plugin
/// directory all worked, the last making rho refuse that directory).
#[test]
fn metadata_outside_the_grants_cannot_change_for_an_ordinary_user() {
    if !root() {
        eprintln!("skipped: switching to an ordinary user needs root (CI runs as root)");
        return;
    }
    const USER: u32 = 4321;
    let base = rho_tests::host_dir("rho-containment-tests");
    let home = tempfile::tempdir_in(&base).unwrap();
    let plugins = home.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    install(&plugins, "attacks");
    let keys = home.path().join("authorized_keys");
    std::fs::write(&keys, "ssh-ed25519 AAAA").unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
    for path in [home.path(), &plugins, &plugins.join("libattacks.so"), &keys] {
        std::os::unix::fs::chown(path, Some(USER), Some(USER)).unwrap();
    }
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&plugins, std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = (
        mode(&keys),
        mode(&plugins),
        std::fs::metadata(&keys).unwrap().modified().unwrap(),
    );
    let call = |tool: &str, args: Value| {
        let out = std::process::Command::new(rho_tests::rho_bin())
            .args(["call", tool, "--plugins"])
            .arg(&plugins)
            .arg(args.to_string())
            .env("HOME", home.path())
            .uid(USER)
            .gid(USER)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let keys_arg = keys.to_str().unwrap();
    for (tool, args) in [
        ("chmod", json!({"path": keys_arg, "mode": "666"})),
        ("utimes", json!({"path": keys_arg})),
        ("setxattr", json!({"path": keys_arg})),
        ("chmod", json!({"path": plugins, "mode": "777"})),
    ] {
        let (code, out) = call(tool, args.clone());
        assert_eq!(code, Some(1), "{tool} {args}: {out}");
        assert!(
            out.contains("Read-only file system"),
            "{tool} {args}: {out}"
        );
    }
    let after = (
        mode(&keys),
        mode(&plugins),
        std::fs::metadata(&keys).unwrap().modified().unwrap(),
    );
    assert_eq!(before, after);
    // The directory still loads: the plugin did not lock its host out.
    let (code, out) = call("ids", json!({}));
    assert_eq!(code, Some(0), "{out}");
}

/// A root host whose plugins keep its identity (`identity = "host"`) cannot have a plugin make a
/// root-owned executable setuid (before: `chmod 4755` worked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_host_keeping_its_identity_gets_no_setuid_file() {
    if !root() {
        eprintln!("skipped: a root host needs root (CI runs as root)");
        return;
    }
    let base = rho_tests::host_dir("rho-containment-tests");
    let place = tempfile::tempdir_in(&base).unwrap();
    let program = place.path().join("program");
    std::fs::copy("/bin/true", &program).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (host, _dir) = attacks(Grants::default(), WorkerLimits::default(), Identity::Host).await;
    let (outcome, text) = run(&host, "chmod", json!({"path": program, "mode": "4755"})).await;
    assert_eq!(outcome, Outcome::Error, "{text}");
    assert!(text.contains("Read-only file system"), "{text}");
    assert_eq!(mode(&program), 0o755);
    host.shutdown().await;
}

/// Memory the address-space limit does not see is bounded by it: System V shared memory (one
/// segment and all together), System V and POSIX message queues, and pipe buffers past the
/// default (before: 512 MiB of shared memory under a 256 MiB limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_memory_and_message_queues_are_bounded_by_the_memory_limit() {
    let limits = WorkerLimits {
        memory_bytes: Some(512 << 20),
        ..WorkerLimits::default()
    };
    let (host, _dir) = attacks(Grants::default(), limits, Identity::Auto).await;
    let (outcome, text) = run(&host, "shm", json!({"mib": 1024})).await;
    assert_eq!(
        outcome,
        Outcome::Error,
        "one segment over the limit: {text}"
    );
    let (outcome, text) = run(&host, "shm", json!({"mib": 300})).await;
    assert_eq!(outcome, Outcome::Ok, "{text}");
    // The first segment is still there (same worker, same IPC namespace): 600 MiB in all.
    let (outcome, text) = run(&host, "shm", json!({"mib": 300})).await;
    assert_eq!(
        outcome,
        Outcome::Error,
        "two segments over the limit: {text}"
    );
    for kind in ["sysv", "posix"] {
        let (outcome, text) = run(&host, "message_queue", json!({"kind": kind, "mib": 1024})).await;
        assert_eq!(outcome, Outcome::Error, "{kind}: {text}");
        assert!(text.starts_with("denied"), "{kind}: {text}");
    }
    let (outcome, text) = run(&host, "pipe_size", json!({"mib": 1})).await;
    assert_eq!(outcome, Outcome::Error, "{text}");
    let report = host.plugins().await;
    assert!(!report.is_empty());
    host.shutdown().await;
}

/// A program in the sandbox (`SandboxedCommand`: an MCP server) has no address-space limit (V8
/// reserves gigabytes it never uses): memory `RLIMIT_DATA` does not count is closed to it.
/// Shared anonymous mappings are refused (`EPERM`) and `/dev/zero` is read-only (a shared
/// writable mapping of it is such memory too); private memory is bounded by `memory_mb`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_program_has_no_memory_its_data_limit_does_not_count() {
    use tokio::io::AsyncReadExt;
    let script = r#"
import mmap, os
try:
    mmap.mmap(-1, 1 << 20)
    print("shared: mapped")
except OSError as e:
    print("shared: refused", e.errno)
try:
    open("/dev/zero", "r+b")
    print("zero: writable")
except OSError as e:
    print("zero: refused", e.errno)
try:
    block = bytearray(64 << 20)
    print("private 64 MiB: ok")
    block = bytearray(256 << 20)
    print("private 256 MiB: ok")
except MemoryError:
    print("private 256 MiB: refused")
"#;
    let options = rho_runtime::WorkerOptions {
        limits: WorkerLimits {
            data_bytes: Some(128 << 20),
            ..rho_runtime::SandboxedCommand::default_limits()
        },
        ..rho_runtime::WorkerOptions::default()
    };
    let mut child = rho_runtime::SandboxedCommand::new("python3")
        .args(["-c", script])
        .options(options)
        .spawn()
        .await
        .unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status}: {out}");
    assert!(out.contains("shared: refused 1"), "{out}");
    assert!(out.contains("zero: refused 13"), "{out}");
    assert!(out.contains("private 64 MiB: ok"), "{out}");
    assert!(out.contains("private 256 MiB: refused"), "{out}");
}
