//! [2/9]: loading cannot be tricked, stalled or blown up: files swapped by rename, FIFOs, huge
//! and sparse files, hard links by the hundred, a failed file read again and again, versions past
//! the cap, a directory deleted and made again, load-time code that hangs.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rho_runtime::{
    DirOptions, EventKind, Grants, Host, Isolation, ScanReport, Trust, WorkerOptions,
};
use rho_tests::{install, plugin_dir, plugin_lib, wait_for};

/// These tests read this process's memory, I/O counters and mappings: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Bytes this process has read (`rchar`: every read system call, cached or not).
fn bytes_read() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Distinct private copies of plugins mapped into this process.
fn mapped_copies() -> usize {
    let me = format!("rho-plugins-{}.", std::process::id());
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut files: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains(&me))
        .collect();
    files.sort();
    files.dedup();
    files.len()
}

/// A host serving `dir` with `options` (watched if `watch`), and the errors of its first load
/// (the directory's own, when it is refused as a whole, among them).
async fn open(dir: &Path, options: DirOptions, watch: bool) -> (Host, Vec<String>) {
    let (host, mut reports) = Host::builder()
        .plugin_dir(dir, options)
        .watch(watch)
        .build()
        .await
        .unwrap();
    (host, reports.remove(0).errors)
}

/// Rescans the host's one directory.
async fn rescan(host: &Host) -> ScanReport {
    host.reload().await.remove(0)
}

fn has(host: &Host, tool: &str) -> bool {
    host.tools().iter().any(|t| t.name == tool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_swapped_by_rename_never_loads_what_was_refused() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = plugin_dir(&[]);
    let good = std::fs::read(plugin_lib("echo")).unwrap();
    // The "attacker's" file: another plugin, writable by everyone (refused if it is what is
    // opened); renamed in and out of place while the directory is scanned.
    let bad_path = dir.path().join(".bad");
    let good_path = dir.path().join(".good");
    let target = dir.path().join("libecho.so");
    std::fs::write(&target, &good).unwrap();
    let (host, errors) = open(dir.path(), DirOptions::in_process(), false).await;
    assert!(errors.is_empty(), "{errors:?}");
    let good_sha = host.plugins().await[0].sha256.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let (bad, good_bytes) = (std::fs::read(plugin_lib("faults")).unwrap(), good.clone());
        let (bad_path, good_path, target) = (bad_path.clone(), good_path.clone(), target.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 20_000 {
                std::fs::write(&bad_path, &bad).unwrap();
                std::fs::set_permissions(&bad_path, std::fs::Permissions::from_mode(0o666))
                    .unwrap();
                std::fs::rename(&bad_path, &target).unwrap();
                std::fs::write(&good_path, &good_bytes).unwrap();
                std::fs::rename(&good_path, &target).unwrap();
                n += 1;
            }
        })
    };
    for _ in 0..30 {
        host.reload().await;
        for info in host.plugins().await {
            assert_eq!(info.sha256, good_sha, "a refused file was loaded");
        }
        assert!(!has(&host, "segfault"), "the attacker's tools are served");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_through_a_directory_others_can_write_is_refused() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = plugin_dir(&["echo"]);
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    install(&shared, "faults");
    std::os::unix::fs::symlink("shared/libfaults.so", dir.path().join("libfaults.so")).unwrap();
    let (host, errors) = open(dir.path(), DirOptions::in_process(), false).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0]
            .contains("libfaults.so: refused: a symlink through a directory others may change"),
        "{}",
        errors[0]
    );
    assert!(has(&host, "echo") && !has(&host, "segfault"));
}

/// The path is checked as the user gave it: a plugin directory in a parent anyone can write was
/// renamed away and a symlink to a directory of fault plugins put in its place (before: the
/// symlink's target and its ancestors were checked, found safe, and 70 tools served).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_directory_swapped_for_a_symlink_in_a_writable_parent_is_refused() {
    let _one = ONE_AT_A_TIME.lock().await;
    let base = rho_tests::host_dir("rho-loading-tests");
    let parent = tempfile::tempdir_in(&base).unwrap();
    let faults = tempfile::tempdir_in(&base).unwrap();
    install(faults.path(), "faults");
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = parent.path().join("plugins");
    std::os::unix::fs::symlink(faults.path(), &dir).unwrap();
    let (host, errors) = open(&dir, DirOptions::in_process(), false).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("is writable by others and not sticky"),
        "{}",
        errors[0]
    );
    assert!(!has(&host, "segfault"));
}

/// A directory and files root owns and no one else can write (`/usr/lib/...` style) load for a
/// host of any user: here `rho tools` run as `nobody` (before: "owned by uid 0, not by this
/// host's uid 65534", and only `--trust-any-writer` got in, which also accepts world-writable
/// files).
#[test]
fn a_root_owned_directory_loads_for_a_host_running_as_nobody() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making root-owned files needs root (CI runs as root)");
        return;
    }
    let base = rho_tests::host_dir("rho-loading-tests");
    let dir = tempfile::tempdir_in(&base).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let plugin = install(dir.path(), "echo");
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o644)).unwrap();
    let home = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(home.path(), Some(65534), Some(65534)).unwrap();
    let out = std::process::Command::new(rho_tests::rho_bin())
        .args(["tools", "--plugins"])
        .arg(dir.path())
        .env("HOME", home.path())
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("echo"), "{stdout}{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_directory_under_a_parent_others_can_write_is_refused() {
    let _one = ONE_AT_A_TIME.lock().await;
    let base = rho_tests::host_dir("rho-loading-tests");
    let parent = tempfile::tempdir_in(&base).unwrap();
    // World-writable and not sticky: anyone could swap `plugins` for a directory of theirs.
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = parent.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    install(&dir, "echo");
    let (host, errors) = open(&dir, DirOptions::in_process(), false).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("is writable by others and not sticky"),
        "{}",
        errors[0]
    );
    assert!(!has(&host, "echo"));
    // Opting in to any writer loads it.
    let trusting = DirOptions {
        trust: Trust::AnyWriter,
        ..DirOptions::in_process()
    };
    let (host, errors) = open(&dir, trusting, false).await;
    assert!(errors.is_empty() && has(&host, "echo"), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_huge_and_sparse_files_are_refused_at_once_in_bounded_memory() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = plugin_dir(&["echo"]);
    let fifo = std::ffi::CString::new(dir.path().join("libfifo.so").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    // A 4 GiB sparse file: nothing on disk, 4 GiB to whoever reads it.
    let sparse = std::fs::File::create(dir.path().join("libsparse.so")).unwrap();
    sparse.set_len(4 << 30).unwrap();
    drop(sparse);
    let peak = status_kib("VmHWM:");
    let started = Instant::now();
    let (host, errors) = open(dir.path(), DirOptions::in_process(), false).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("libfifo.so: refused: not a regular file"))
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("libsparse.so: refused: 4294967296 bytes, over the largest"))
    );
    assert!(has(&host, "echo"));
    let grew = status_kib("VmHWM:").saturating_sub(peak);
    assert!(grew < 64 << 10, "peak RSS grew by {grew} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_hard_links_load_one_image_in_bounded_memory() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = plugin_dir(&["echo"]);
    let original = dir.path().join("libecho.so");
    let size_kib = std::fs::metadata(&original).unwrap().len() / 1024;
    for i in 0..200 {
        std::fs::hard_link(&original, dir.path().join(format!("libecho{i:03}.so"))).unwrap();
    }
    let peak = status_kib("VmHWM:");
    let mapped = mapped_copies();
    let (host, _errors) = open(dir.path(), DirOptions::in_process(), false).await;
    assert_eq!(host.plugins().await.len(), 201);
    assert!(has(&host, "echo"));
    // One image for the one content, and memory in the order of one file, not of 201.
    assert_eq!(mapped_copies() - mapped, 1);
    let grew = status_kib("VmHWM:").saturating_sub(peak);
    assert!(
        grew < 4 * size_kib + (32 << 10),
        "peak RSS grew by {grew} KiB for a {size_kib} KiB file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_file_is_not_read_again_until_it_changes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = plugin_dir(&["echo"]);
    let broken = dir.path().join("libbroken.so");
    std::fs::write(&broken, vec![0u8; 32 << 20]).unwrap();
    let (host, errors) = open(dir.path(), DirOptions::in_process(), false).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    let before = bytes_read();
    for _ in 0..5 {
        let report = rescan(&host).await;
        assert!(
            report.errors.is_empty(),
            "reported again: {:?}",
            report.errors
        );
    }
    let read = bytes_read() - before;
    assert!(read < 1 << 20, "{read} bytes read by five rescans");
    // Changed: read, and reported, again.
    std::fs::write(&broken, vec![1u8; 1 << 20]).unwrap();
    let report = rescan(&host).await;
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_cap_refuses_before_anything_is_mapped() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = plugin_dir(&[]);
    let target = dir.path().join("libfaults.so");
    let bytes = std::fs::read(plugin_lib("faults")).unwrap();
    // Distinct contents of one plugin: the same library with 0..5 bytes appended.
    let version = |n: usize| {
        let mut v = bytes.clone();
        v.extend(std::iter::repeat_n(0u8, n));
        v
    };
    std::fs::write(&target, version(0)).unwrap();
    let options = DirOptions {
        max_versions: 2,
        ..DirOptions::in_process()
    };
    let before = mapped_copies();
    let (host, errors) = open(dir.path(), options, false).await;
    assert!(errors.is_empty(), "{errors:?}");
    let mut refused = 0;
    for n in 1..=4 {
        rho_tests::install_bytes(&target, &version(n));
        let report = rescan(&host).await;
        refused += report
            .errors
            .iter()
            .filter(|e| e.contains("versions of") && e.contains("the cap is 2"))
            .count();
    }
    assert_eq!(refused, 3);
    assert_eq!(mapped_copies() - before, 2, "refused versions were mapped");
    // A version already mapped comes back without a new mapping.
    rho_tests::install_bytes(&target, &version(0));
    let report = rescan(&host).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.reloaded.len(), 1);
    assert_eq!(mapped_copies() - before, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_deleted_and_made_again_is_followed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let parent = plugin_dir(&[]);
    let dir = parent.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    install(&dir, "echo");
    let (host, errors) = open(&dir, DirOptions::in_process(), true).await;
    assert!(errors.is_empty() && has(&host, "echo"), "{errors:?}");
    let mut sub = host.subscribe();
    std::fs::remove_dir_all(&dir).unwrap();
    wait_for(&mut sub, Duration::from_secs(10), |e| {
        matches!(e.kind, EventKind::PluginRemoved { .. })
    })
    .await
    .expect("the tools leave with the directory");
    assert!(!has(&host, "echo"));
    std::fs::create_dir(&dir).unwrap();
    install(&dir, "faults");
    wait_for(&mut sub, Duration::from_secs(10), |e| {
        matches!(e.kind, EventKind::PluginLoaded { .. })
    })
    .await
    .expect("what lands in the new directory loads");
    assert!(has(&host, "segfault"));
    // And it is watched again: a later change is seen too.
    install(&dir, "echo");
    wait_for(
        &mut sub,
        Duration::from_secs(10),
        |e| matches!(&e.kind, EventKind::PluginLoaded { plugin, .. } if plugin == "echo"),
    )
    .await
    .expect("the new directory is watched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_time_code_that_hangs_is_bounded() {
    let _one = ONE_AT_A_TIME.lock().await;
    // SAFETY: read by the plugin's load-time code only; removed below (tests of this file run
    // one at a time).
    unsafe { std::env::set_var("RHO_ATTACKS_LOAD_SLEEP_MS", "3000") };
    // In process: the scan reports the file stalled at its bound and moves on; the plugin
    // serves once its load-time code returns.
    let dir = plugin_dir(&["attacks", "echo"]);
    let options = DirOptions {
        load_timeout: Duration::from_millis(500),
        ..DirOptions::in_process()
    };
    let started = Instant::now();
    let (host, errors) = open(dir.path(), options, false).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "the scan waited {took:?}"
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("libattacks.so: refused: stalled"),
        "{}",
        errors[0]
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while !(has(&host, "ids") && has(&host, "echo")) {
        assert!(Instant::now() < deadline, "the stalled plugin never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(host);

    // Isolated: three such files load at once, each within its bound.
    let dir = plugin_dir(&[]);
    for name in ["liba.so", "libb.so", "libc.so"] {
        std::fs::copy(plugin_lib("attacks"), dir.path().join(name)).unwrap();
    }
    let options = DirOptions {
        isolation: Isolation::Process(WorkerOptions {
            spares: 0,
            grants: Grants {
                env: vec!["RHO_ATTACKS_LOAD_SLEEP_MS".into()],
                ..Grants::default()
            },
            ..WorkerOptions::default()
        }),
        ..DirOptions::in_process()
    };
    let started = Instant::now();
    let (host, errors) = open(dir.path(), options.clone(), false).await;
    assert!(errors.is_empty(), "{errors:?}");
    let deadline = Instant::now() + Duration::from_secs(15);
    while host.plugins().await.len() < 3 {
        assert!(Instant::now() < deadline, "the slow plugins never served");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    // One after another they would take 9 s.
    assert!(took < Duration::from_millis(6500), "took {took:?}");
    host.shutdown().await;
    // Past its bound an isolated load fails with one line; the others are not held up.
    let dir = plugin_dir(&["attacks", "echo"]);
    let bounded = DirOptions {
        load_timeout: Duration::from_millis(800),
        ..options
    };
    let (host, errors) = open(dir.path(), bounded, false).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("loading took longer than 800 ms"),
        "{}",
        errors[0]
    );
    // SAFETY: see above.
    unsafe { std::env::remove_var("RHO_ATTACKS_LOAD_SLEEP_MS") };
    assert!(has(&host, "echo"));
    host.shutdown().await;
}

/// A plugin whose load-time code sleeps 30 s, isolated beside `echo`: the host is built, `echo`
/// serves and a call of it answers, long before the 10 s `load_timeout`, and the stalled file is
/// named once (before: `Host::build`, `rho tools` and `rho call echo` all waited the 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_isolated_file_holds_up_no_other() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = plugin_dir(&["echo"]);
    std::fs::copy(plugin_lib("attacks"), dir.path().join("libslow.so")).unwrap();
    // SAFETY: read by the plugin's load-time code only; removed below (tests of this file run
    // one at a time).
    unsafe { std::env::set_var("RHO_ATTACKS_LOAD_SLEEP_MS", "30000") };
    let options = DirOptions {
        isolation: Isolation::Process(WorkerOptions {
            spares: 0,
            grants: Grants {
                env: vec!["RHO_ATTACKS_LOAD_SLEEP_MS".into()],
                ..Grants::default()
            },
            ..WorkerOptions::default()
        }),
        ..DirOptions::default()
    };
    let bus = rho_runtime::Bus::default();
    let mut events = bus.subscribe();
    let started = Instant::now();
    let (host, reports) = Host::builder()
        .plugin_dir(dir.path(), options)
        .bus(bus)
        .build()
        .await
        .unwrap();
    let built = started.elapsed();
    let r = host.call("echo", serde_json::json!({"text": "hi"})).await;
    let answered = started.elapsed();
    assert_eq!(&*r.text(), "hi");
    // The bound that used to hold everything up is 10 s; the build waits `load_wait` (2 s).
    assert!(built < Duration::from_secs(5), "built after {built:?}");
    assert!(
        answered < Duration::from_secs(5),
        "answered after {answered:?}"
    );
    let report = &reports[0];
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.loading.len(), 1, "{report:?}");
    assert!(report.loading[0].ends_with("libslow.so"), "{report:?}");
    // A name nobody serves waits `load_wait`, then names the file still loading.
    let r = host.call("ids", serde_json::json!({})).await;
    assert_eq!(r.outcome, rho_runtime::Outcome::UnknownTool);
    assert!(
        r.text().contains("still loading after 2000 ms"),
        "{}",
        &*r.text()
    );
    assert!(r.text().contains("libslow.so"), "{}", &*r.text());
    // Reported once: a rescan does not start it again nor name it again.
    let again = host.reload().await.remove(0);
    assert!(
        again.loading.is_empty() && again.errors.is_empty(),
        "{again:?}"
    );
    let mut warnings = 0;
    while let Ok(Some(rho_runtime::BusItem::Event(event))) =
        tokio::time::timeout(Duration::from_millis(100), events.recv()).await
    {
        if let EventKind::Warning { subject, .. } = &event.kind {
            warnings += usize::from(subject.ends_with("libslow.so"));
        }
    }
    assert_eq!(warnings, 1);
    // SAFETY: see above.
    unsafe { std::env::remove_var("RHO_ATTACKS_LOAD_SLEEP_MS") };
    host.shutdown().await;
}

/// The same through the CLI, as a user types it: `rho call echo` answers and `rho tools` lists
/// echo and names the stalled file, both well before the 10 s `load_timeout`.
#[test]
fn rho_call_and_rho_tools_do_not_wait_for_a_stalled_file() {
    let _one = ONE_AT_A_TIME.blocking_lock();
    let dir = plugin_dir(&["echo"]);
    std::fs::copy(plugin_lib("attacks"), dir.path().join("libslow.so")).unwrap();
    let rho = |args: &[&str]| {
        let started = Instant::now();
        let out = std::process::Command::new(rho_tests::rho_bin())
            .args(args)
            .args(["--plugins", dir.path().to_str().unwrap()])
            .args(["--grant-env", "RHO_ATTACKS_LOAD_SLEEP_MS"])
            .env("RHO_ATTACKS_LOAD_SLEEP_MS", "30000")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            started.elapsed(),
        )
    };
    let (code, stdout, stderr, took) = rho(&["call", "echo", r#"{"text":"hi"}"#]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(stdout.trim(), "hi");
    assert!(took < Duration::from_secs(5), "rho call took {took:?}");
    let (code, stdout, stderr, took) = rho(&["tools"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("echo"), "{stdout}");
    assert!(
        stderr.contains("libslow.so: still loading after 2000 ms"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(5), "rho tools took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_landing_before_the_watch_starts_is_loaded() {
    let _one = ONE_AT_A_TIME.lock().await;
    for attempt in 0..20u64 {
        let dir = plugin_dir(&["echo"]);
        // Lands while the host is built: after its first scan has listed the directory, before
        // its watcher exists, when no event will ever tell. `build` does both (in some 10 ms),
        // so the file lands a millisecond later in each attempt.
        let landing = {
            let dir = dir.path().to_owned();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(attempt));
                install(&dir, "faults");
            })
        };
        let (host, _errors) = open(dir.path(), DirOptions::in_process(), true).await;
        landing.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !has(&host, "segfault") {
            assert!(
                Instant::now() < deadline,
                "the file that landed first is never loaded"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_given_by_a_relative_path_is_watched() {
    let _one = ONE_AT_A_TIME.lock().await;
    // Integration tests run in their package's directory; `./.tmpXXXX` is relative.
    let dir = tempfile::tempdir_in(".").unwrap();
    let relative = std::path::PathBuf::from(".").join(dir.path().file_name().unwrap());
    assert!(relative.is_relative());
    install(&relative, "echo");
    let (host, errors) = open(&relative, DirOptions::in_process(), true).await;
    assert!(errors.is_empty() && has(&host, "echo"), "{errors:?}");
    // Past the watcher's own first scan.
    tokio::time::sleep(Duration::from_millis(300)).await;
    install(&relative, "faults");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !has(&host, "segfault") {
        assert!(
            Instant::now() < deadline,
            "a change in a relative directory is never seen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn the_copies_of_a_killed_host_are_removed_by_the_next_one() {
    let dir = plugin_dir(&["echo", "faults"]);
    let rho = rho_tests::rho_bin();
    // A host killed mid-call by SIGKILL leaves its private copy directory.
    let mut killed = std::process::Command::new(&rho)
        .args(["call", "sleep", r#"{"ms":30000}"#, "--plugins"])
        .arg(dir.path())
        .spawn()
        .unwrap();
    let mut killed_dir = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while killed_dir.is_none() {
        assert!(Instant::now() < deadline, "no copy directory appeared");
        killed_dir = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("rho-plugins-{}.", killed.id())))
            });
        std::thread::sleep(Duration::from_millis(20));
    }
    killed.kill().unwrap();
    killed.wait().unwrap();
    let killed_dir = killed_dir.unwrap();
    assert!(killed_dir.exists());
    // The next host removes it.
    let out = std::process::Command::new(&rho)
        .args(["tools", "--plugins"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        !killed_dir.exists(),
        "{} is still there",
        killed_dir.display()
    );
}
