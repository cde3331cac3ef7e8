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
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "Hello, Ada!"));
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
    let interface = rho_runtime::plugin_api::ffi::INTERFACE_VERSION;
    assert!(
        text.contains(&format!("interface version: {interface}")),
        "{text}"
    );
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

/// What an installed `rho` does where no rho checkout can be seen: `rho plugin new` in an empty
/// directory outside the repository, then the crate's test, its build, `rho plugin check` and a
/// call through `rho call`, all in a mount namespace where this checkout is covered by an empty
/// tmpfs (the binaries are copied out of it first, as `cargo install` would). Returns the new
/// crate's directory and the target directory it was built into.
fn scaffold_without_the_checkout(outside: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let bin = outside.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["rho", "rho-worker"] {
        std::fs::copy(built().join(name), bin.join(name)).unwrap();
    }
    // Pinned to this workspace's versions, built into a target directory kept between runs (its
    // dependencies' builds are reused), seen outside the checkout through a bind mount.
    std::fs::copy(
        workspace_dir().join("Cargo.lock"),
        outside.join("Cargo.lock"),
    )
    .unwrap();
    let authors = built().parent().unwrap().join("authors");
    let target = outside.join("target");
    for dir in [
        &authors,
        &target,
        &outside.join("work"),
        &outside.join("data"),
    ] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let script = r#"
        set -e
        mount --bind "$AUTHORS" "$OUT/target"
        mount -t tmpfs none "$CHECKOUT"
        test -z "$(ls -A "$CHECKOUT")"
        cd "$OUT/work"
        "$OUT/bin/rho" plugin new greet
        cp "$OUT/Cargo.lock" greet/Cargo.lock
        cd greet
        cargo test -q > "$OUT/test.txt" 2>&1
        cargo build -q
        mkdir "$OUT/plugins"
        cp "$OUT/target/debug/libgreet.so" "$OUT/plugins/"
        "$OUT/bin/rho" plugin check "$OUT/plugins/libgreet.so" --json > "$OUT/check.json"
        # Root in this namespace is the only user mapped: the workers keep it.
        printf '[workers]\nidentity = "host"\n' > "$OUT/rho.toml"
        "$OUT/bin/rho" call greet '{"name":"Ada"}' --plugins "$OUT/plugins" \
            --config "$OUT/rho.toml" > "$OUT/call.txt"
    "#;
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", script])
        .env("OUT", outside)
        .env("AUTHORS", &authors)
        .env("CHECKOUT", workspace_dir())
        .env("XDG_DATA_HOME", outside.join("data"))
        .env("CARGO_TARGET_DIR", outside.join("target"))
        .env_remove("CARGO_MANIFEST_DIR")
        .env_remove("RHO_WORKER")
        .output()
        .unwrap();
    let read = |name: &str| std::fs::read_to_string(outside.join(name)).unwrap_or_default();
    assert!(
        out.status.success(),
        "{}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        read("test.txt")
    );
    (outside.join("work/greet"), authors)
}

#[tokio::test]
async fn rho_plugin_new_makes_a_crate_of_its_own_anywhere_that_builds_loads_and_answers() {
    let outside = tempfile::tempdir().unwrap();
    let rho = |args: &[&str]| {
        Command::new(rho_tests::rho_bin())
            .args(args)
            .current_dir(outside.path())
            .env("XDG_DATA_HOME", outside.path().join("refused-data"))
            .output()
            .unwrap()
    };
    // Names of packages it would sit beside are refused, and nothing is written but the copy
    // of the API in the data directory.
    // (`rho-runtime` is no package of its graph: a crate of its own may take that name.)
    for bad in ["rho_plugin_api", "serde", "abi_stable", "fn", "9lives"] {
        let out = rho(&["plugin", "new", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("rho: "),
            "{bad}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["refused-data"]);
    let (crate_dir, target) = scaffold_without_the_checkout(outside.path());
    let read = |name: &str| std::fs::read_to_string(outside.path().join(name)).unwrap();
    // By version, patched to the copy in the data directory: nothing names the checkout.
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let copy = outside.path().join("data/rho/plugin-api/0.1.0");
    assert!(
        manifest.contains("rho-plugin-api = \"0.1.0\"\n"),
        "{manifest}"
    );
    assert!(
        manifest.contains(&format!(
            "[patch.crates-io]\nrho-plugin-api = {{ path = {:?} }}",
            copy.display().to_string()
        )),
        "{manifest}"
    );
    let checkout = workspace_dir().to_string_lossy().into_owned();
    assert!(!manifest.contains(&checkout), "{manifest}");
    assert_eq!(
        std::fs::read_to_string(copy.join("src/lib.rs")).unwrap(),
        std::fs::read_to_string(workspace_dir().join("plugin-api/src/lib.rs")).unwrap()
    );
    assert!(
        read("test.txt").contains("1 passed"),
        "{}",
        read("test.txt")
    );
    let report: serde_json::Value = serde_json::from_str(&read("check.json")).unwrap();
    assert_eq!(report["plugin"], "greet");
    assert!(
        read("call.txt").contains("Hello, Ada!"),
        "{}",
        read("call.txt")
    );

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
            if &*r.text() == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never answered {want:?}: {}",
                &*r.text()
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
