//! [6/8]: the plugin developer's tools: `new-plugin`, `check-plugin`, `build-plugins`.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use rho_runtime::{CallOptions, DirOptions, Outcome};
use rho_tests::{built, call, host_with, plugin_lib, timeout, workspace_dir, xtask_bin};
use serde_json::json;

fn xtask(args: &[&str]) -> Output {
    Command::new(xtask_bin()).args(args).output().unwrap()
}

fn cargo(workspace: &Path, args: &[&str]) -> Output {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", built().parent().unwrap())
        .output()
        .unwrap()
}

/// A temporary workspace whose plugins use this repository's plugin-api by path.
fn temp_workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let api = workspace_dir().join("plugin-api");
    std::fs::write(
        ws.path().join("Cargo.toml"),
        format!(
            "[workspace]\nresolver = \"3\"\nmembers = []\n\n[workspace.dependencies]\n\
             rho-plugin-api = {{ path = {api:?} }}\nserde = {{ version = \"1\", features = [\"derive\"] }}\n\
             schemars = \"1.2\"\n"
        ),
    )
    .unwrap();
    // The same versions as this workspace: the shared target directory's builds are reused.
    std::fs::copy(
        workspace_dir().join("Cargo.lock"),
        ws.path().join("Cargo.lock"),
    )
    .unwrap();
    ws
}

#[tokio::test]
async fn new_plugin_makes_a_crate_that_builds_loads_and_answers() {
    let ws = temp_workspace();
    let root = ws.path().to_str().unwrap();
    let out = xtask(&["--workspace", root, "new-plugin", "hello-world"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = std::fs::read_to_string(ws.path().join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("members = [\"plugins/hello-world\"]"),
        "{manifest}"
    );
    for file in ["Cargo.toml", "src/lib.rs", "README.md"] {
        assert!(
            ws.path().join("plugins/hello-world").join(file).is_file(),
            "{file}"
        );
    }
    // Its unit test passes, and it builds.
    let test = cargo(ws.path(), &["test", "-q", "-p", "hello-world"]);
    assert!(
        test.status.success(),
        "{}",
        String::from_utf8_lossy(&test.stderr)
    );
    assert!(String::from_utf8_lossy(&test.stdout).contains("1 passed"));
    let build = cargo(ws.path(), &["build", "-q", "-p", "hello-world"]);
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    // It loads and answers through a host.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        built().join("libhello_world.so"),
        dir.path().join("libhello_world.so"),
    )
    .unwrap();
    let (host, report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.runner(timeout(5_000))
    })
    .await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let tool = host
        .tools()
        .into_iter()
        .find(|t| t.name == "hello-world")
        .unwrap();
    assert_eq!(tool.parameters["properties"]["name"]["type"], "string");
    // The schema's description is for the model, not the scaffold's note to the author.
    assert_eq!(tool.parameters["description"], "Whom to greet.");
    let r = host
        .call_with(
            &call("1", "hello-world", json!({"name": "Ada"})),
            &CallOptions::default(),
        )
        .await;
    assert_eq!((r.outcome, r.text()), (Outcome::Ok, "Hello, Ada!"));
    assert_eq!(r.details, Some(json!({"length": 3})));

    // It never overwrites, and refuses bad names.
    let again = xtask(&["--workspace", root, "new-plugin", "hello-world"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists; nothing was changed"));
    for bad in [
        "9lives",
        "has space",
        "fn",
        "x".repeat(65).as_str(),
        "rho-plugin-api",
        "serde",
    ] {
        let out = xtask(&["--workspace", root, "new-plugin", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(!ws.path().join("plugins").join(bad).exists(), "{bad}");
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("Cargo.toml")).unwrap(),
        manifest
    );
}

#[test]
fn check_plugin_on_a_good_and_a_bad_file() {
    let good = xtask(&["check-plugin", plugin_lib("faults").to_str().unwrap()]);
    assert_eq!(good.status.code(), Some(0));
    let text = String::from_utf8_lossy(&good.stdout);
    assert!(text.contains("plugin:            faults 0.1.0"), "{text}");
    assert!(text.contains("interface version: 2"), "{text}");
    assert!(
        text.contains("  slow: Sleeps for ms milliseconds; its own timeout is 1000 ms."),
        "{text}"
    );
    assert!(text.contains("    timeout: 1000 ms"), "{text}");
    let as_json = xtask(&[
        "check-plugin",
        "--json",
        plugin_lib("echo").to_str().unwrap(),
    ]);
    let value: serde_json::Value = serde_json::from_slice(&as_json.stdout).unwrap();
    assert_eq!(value["tools"][0]["name"], "echo");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("libbad.so");
    std::fs::write(&bad, b"not a library").unwrap();
    let out = xtask(&["check-plugin", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("libbad.so: not a loadable library"),
        "{stderr}"
    );
    let incompatible = xtask(&["check-plugin", plugin_lib("incompatible").to_str().unwrap()]);
    assert_eq!(incompatible.status.code(), Some(1));
}

#[test]
fn build_plugins_installs_atomically() {
    use notify_debouncer_full::notify::{self, EventKind, Watcher, event::ModifyKind};
    let out = tempfile::tempdir().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |e: notify::Result<notify::Event>| {
        if let Ok(e) = e {
            let _ = tx.send(e);
        }
    })
    .unwrap();
    watcher
        .watch(out.path(), notify::RecursiveMode::NonRecursive)
        .unwrap();
    // Twice: a fresh install, then a replacement over existing files.
    for _ in 0..2 {
        let run = xtask(&["build-plugins", "--out", out.path().to_str().unwrap()]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let progress = String::from_utf8_lossy(&run.stderr);
        assert!(
            progress.contains("installed 3 plugin(s) into"),
            "{progress}"
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    drop(watcher);
    let mut visible_writes = Vec::new();
    let mut renamed_in = 0;
    for event in rx.try_iter() {
        for path in &event.paths {
            let name = path.file_name().unwrap().to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            match event.kind {
                EventKind::Modify(ModifyKind::Data(_)) | EventKind::Access(_) => {
                    visible_writes.push(format!("{:?} {name}", event.kind))
                }
                EventKind::Modify(ModifyKind::Name(_)) => renamed_in += 1,
                _ => {}
            }
        }
    }
    assert!(
        visible_writes.is_empty(),
        "a visible plugin file was written in place: {visible_writes:?}"
    );
    assert!(
        renamed_in >= 6,
        "each plugin renamed into place twice, saw {renamed_in}"
    );
    let mut names: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // The examples only: the fault injectors and hostile fixtures are built for tests.
    assert_eq!(names, ["libecho.so", "libfiles.so", "libpicture.so"]);
}

/// Every package cargo would build for `selection`, with its features (`cargo tree`).
fn resolved(selection: &[&str]) -> std::collections::BTreeSet<String> {
    let mut args = vec![
        "tree",
        "--offline",
        "-e",
        "normal,build",
        "--prefix",
        "none",
    ];
    args.extend(["-f", "{p} [{f}]"]);
    args.extend(selection);
    let out = cargo(workspace_dir(), &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.replace(" (*)", "").replace(" (proc-macro)", ""))
        .collect()
}

#[test]
fn xtask_the_demo_and_the_workspace_build_every_dependency_with_one_feature_set() {
    // `cargo xtask demo` builds xtask, then the plugins with rho in one invocation; `cargo test
    // --workspace` builds everything. A dependency resolved with other features in one of them
    // would be compiled again (and everything above it).
    let workspace = resolved(&["--workspace"]);
    for selection in [
        &["-p", "xtask"][..],
        &[
            "-p",
            "echo",
            "-p",
            "picture",
            "-p",
            "files",
            "-p",
            "faults",
            "-p",
            "rho-runtime-cli",
        ][..],
        &["-p", "rho-runtime-cli"][..],
    ] {
        let subset = resolved(selection);
        let differing: Vec<&String> = subset.difference(&workspace).collect();
        assert!(
            differing.is_empty(),
            "{selection:?} resolves these unlike the workspace (run `cargo hakari generate`): {differing:?}"
        );
    }
}

#[tokio::test]
async fn rho_plugin_new_makes_a_crate_of_its_own_anywhere_that_builds_loads_and_answers() {
    let outside = tempfile::tempdir().unwrap();
    let rho = |args: &[&str]| {
        Command::new(rho_tests::rho_bin())
            .args(args)
            .current_dir(outside.path())
            .output()
            .unwrap()
    };
    // Names of packages it would sit beside are refused, and nothing is written.
    for bad in [
        "rho-runtime",
        "rho_plugin_api",
        "serde",
        "abi_stable",
        "fn",
        "9lives",
    ] {
        let out = rho(&["plugin", "new", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("rho: "),
            "{bad}"
        );
    }
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    let out = rho(&["plugin", "new", "greet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crate_dir = outside.path().join("greet");
    // Pinned to this workspace's versions, built into the shared target directory: the builds
    // of its dependencies are reused.
    std::fs::copy(
        workspace_dir().join("Cargo.lock"),
        crate_dir.join("Cargo.lock"),
    )
    .unwrap();
    let target = built().parent().unwrap().join("authors");
    let build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-q"])
        .current_dir(&crate_dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let lib = target.join("debug").join("libgreet.so");
    let check = rho(&["plugin", "check", lib.to_str().unwrap(), "--json"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(report["plugin"], "greet");
    // A host loads it (isolated, the default) and it answers.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&lib, dir.path().join("libgreet.so")).unwrap();
    let (host, report) = host_with(dir.path(), DirOptions::default(), |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let r = host.call("greet", json!({"name": "Ada"})).await;
    assert_eq!((r.outcome, r.text()), (Outcome::Ok, "Hello, Ada!"));
    host.shutdown().await;

    // `rho plugin dev`: installs into a watched directory, and again after an edit; the host
    // reloads the new build.
    let watched = tempfile::tempdir().unwrap();
    let (host, _) = host_with(watched.path(), DirOptions::default(), |b| b.watch(true)).await;
    let mut dev = Command::new(rho_tests::rho_bin())
        .args(["plugin", "dev", "--out"])
        .arg(watched.path())
        .current_dir(&crate_dir)
        .env("CARGO_TARGET_DIR", &target)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let answer = |host: rho_runtime::Host, want: &'static str| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let r = host.call("greet", json!({"name": "Ada"})).await;
            if r.text() == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never answered {want:?}: {}",
                r.text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    answer(host.clone(), "Hello, Ada!").await;
    let source = crate_dir.join("src/lib.rs");
    let edited = std::fs::read_to_string(&source)
        .unwrap()
        .replace("Hello, {}!", "Howdy, {}!");
    std::fs::write(&source, edited).unwrap();
    answer(host.clone(), "Howdy, Ada!").await;
    let _ = dev.kill();
    let _ = dev.wait();
    host.shutdown().await;
}
