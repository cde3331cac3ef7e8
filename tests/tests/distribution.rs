//! Signed plugin distribution against a real registry (Debian's `docker-registry`, the CNCF
//! distribution registry 2.8, which has no referrers API: signatures go through the tag scheme)
//! and keys made by Debian's `minisign -G -W`: `rho plugin publish | install | update | verify |
//! list | remove`, locked directories, and the attacks an install must refuse (a tampered blob, an
//! unsigned or foreign-signed artifact, a tag moved backwards, a plugin asking beyond its grants).

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rho_distribution::{
    Credentials, Declaration, InstallPolicy, PlatformFile, PluginRef, SigningKey, TrustedKeys,
};
use rho_tests::{OciRegistry, debian_tool, plugin_lib, rho_bin};
use serde_json::Value;

fn rho(args: &[&str]) -> Output {
    Command::new(rho_bin())
        .args(args)
        .env("DOCKER_CONFIG", "/nonexistent") // no credentials of this machine's user
        .output()
        .expect("run rho")
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A key pair made by minisign itself (`-W`: no password): (secret, public).
fn minisign_key(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (secret, public) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    );
    let out = Command::new(debian_tool("minisign", "minisign"))
        .args(["-G", "-W", "-p"])
        .arg(&public)
        .arg("-s")
        .arg(&secret)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    (secret, public)
}

/// A file for macOS on Apple silicon as far as its header goes (no Mac builds here): what a
/// publisher adds beside the Linux library; installs on Linux must never take it.
fn macos_header(dir: &Path) -> PathBuf {
    let mut bytes = vec![0u8; 4096];
    bytes[..4].copy_from_slice(&[0xcf, 0xfa, 0xed, 0xfe]);
    bytes[4..8].copy_from_slice(&0x0100_000cu32.to_le_bytes());
    bytes[12..16].copy_from_slice(&6u32.to_le_bytes());
    let path = dir.join("libecho.dylib");
    std::fs::write(&path, bytes).unwrap();
    path
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `rho plugin install REFERENCE --dir DIR --trust-key PUBLIC`.
fn install_trusting(reference: &str, dir: &Path, public: &Path) -> Output {
    rho(&[
        "plugin",
        "install",
        reference,
        "--dir",
        s(dir),
        "--trust-key",
        s(public),
    ])
}

/// The digest `rho plugin publish` printed.
fn published_digest(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("{}", text(out)))
        .to_owned()
}

fn lock_of(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(rho_runtime::PluginLock::path_for(dir)).unwrap()).unwrap()
}

#[test]
fn published_plugins_install_pinned_load_answer_verify_and_go() {
    let registry = OciRegistry::start();
    let work = tempfile::tempdir().unwrap();
    let (key, public) = minisign_key(work.path(), "publisher");
    let dylib = macos_header(work.path());
    let reference = format!("oci://{}/tools/echo:0.1.0", registry.addr);
    let out = rho(&[
        "plugin",
        "publish",
        s(&plugin_lib("echo")),
        s(&dylib),
        &reference,
        "--key",
        s(&key),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("published echo 0.1.0 (linux-x86_64, macos-aarch64)"),
        "{stdout}"
    );
    let digest = published_digest(&out);

    let dir = work.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    let out = install_trusting(&reference, &dir, &public);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("signed by trusted key"), "{stdout}");
    assert!(stdout.contains("asks for: nothing"), "{stdout}");
    let installed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        installed,
        ["libecho.so"],
        "only this platform's file, no leftovers"
    );
    assert_eq!(
        std::fs::read(dir.join("libecho.so")).unwrap(),
        std::fs::read(plugin_lib("echo")).unwrap()
    );
    let lock = lock_of(&dir);
    let entry = &lock["plugins"][0];
    assert_eq!(entry["digest"], digest.as_str(), "{lock}");
    assert_eq!(entry["name"], "echo");
    assert_eq!(entry["version"], "0.1.0");
    assert_eq!(entry["source"], reference.as_str());
    assert_eq!(
        entry["sha256"],
        rho_runtime::sha256_hex(&std::fs::read(plugin_lib("echo")).unwrap()).as_str()
    );
    assert!(
        entry["signer"].as_str().is_some_and(|k| k.len() == 16),
        "{lock}"
    );

    // It loads and answers.
    let out = rho(&[
        "call",
        "echo",
        r#"{"text":"from the registry"}"#,
        "--plugins",
        s(&dir),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("from the registry"));

    // Pinned by digest installs the same; list shows it.
    let out = rho(&["plugin", "list", "--dir", s(&dir), "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["digest"], digest.as_str());

    // verify: all agree, then a changed file is named.
    let out = rho(&["plugin", "verify", "--dir", s(&dir)]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::copy(plugin_lib("picture"), dir.join("libecho.so")).unwrap();
    std::fs::copy(plugin_lib("files"), dir.join("libfiles.so")).unwrap();
    let out = rho(&["plugin", "verify", "--dir", s(&dir)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("libecho.so: changed since it was installed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("libfiles.so: a plugin file the lock does not name"),
        "{stderr}"
    );

    // Reinstalling by digest puts the reviewed bytes back.
    let pinned = format!("oci://{}/tools/echo@{digest}", registry.addr);
    std::fs::remove_file(dir.join("libfiles.so")).unwrap();
    let out = install_trusting(&pinned, &dir, &public);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        rho(&["plugin", "verify", "--dir", s(&dir)])
            .status
            .success()
    );

    let out = rho(&["plugin", "remove", "echo", "--dir", s(&dir)]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!dir.join("libecho.so").exists());
    assert_eq!(lock_of(&dir)["plugins"], serde_json::json!([]));
}

#[test]
fn unsigned_foreign_signed_and_tampered_artifacts_are_refused() {
    let Published {
        registry,
        work,
        key,
        public,
        reference,
        digest,
        dir,
    } = published("echo", "tools/echo:0.1.0");
    let (_, stranger) = minisign_key(work.path(), "stranger");
    let install = |extra: &[&str]| {
        let mut args = vec!["plugin", "install", reference.as_str(), "--dir", s(&dir)];
        args.extend(extra);
        rho(&args)
    };

    // Signed, but by a key this host does not trust; and no key at all.
    for extra in [&["--trust-key", s(&stranger)][..], &[][..]] {
        let out = install(extra);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("refused: no trusted signature")
                && stderr.contains("which is not trusted"),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
    assert!(!rho_runtime::PluginLock::path_for(&dir).exists());

    // The signature gone (its referrers tag deleted): unsigned, refused unless asked for.
    let index = delete_tag(&registry, "tools/echo", &digest.replace(':', "-"));
    assert!(index.starts_with("sha256:"));
    let out = install(&["--trust-key", s(&stranger)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("it is not signed"), "{}", text(&out));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
    let out = install(&["--allow-unsigned"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("UNSIGNED"));
    assert_eq!(lock_of(&dir)["plugins"][0]["signer"], Value::Null);
    std::fs::remove_file(dir.join("libecho.so")).unwrap();
    std::fs::remove_file(rho_runtime::PluginLock::path_for(&dir)).unwrap();

    // Signed again, then the plugin's bytes changed inside the registry's storage.
    let out = rho(&[
        "plugin",
        "publish",
        s(&plugin_lib("echo")),
        &reference,
        "--key",
        s(&key),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let layer = rho_runtime::sha256_hex(&std::fs::read(plugin_lib("echo")).unwrap());
    let stored = registry.blob_file(&format!("sha256:{layer}"));
    let mut bytes = std::fs::read(&stored).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&stored, bytes).unwrap();
    let out = install(&["--trust-key", s(&public)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not match its digest"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!rho_runtime::PluginLock::path_for(&dir).exists());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
}

/// Deletes tag `tag` of `repository` (the manifest it names, by digest, as the registry API
/// deletes); returns that digest.
fn delete_tag(registry: &OciRegistry, repository: &str, tag: &str) -> String {
    use std::io::{Read, Write};
    let request = |method: &str, path: &str| {
        let mut stream = std::net::TcpStream::connect(&registry.addr).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/vnd.oci.image.index.v1+json\r\nConnection: close\r\n\r\n",
            registry.addr
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    };
    let head = request("HEAD", &format!("/v2/{repository}/manifests/{tag}"));
    let digest = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("docker-content-digest: ")
                .map(|d| d.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("{head}"));
    let deleted = request("DELETE", &format!("/v2/{repository}/manifests/{digest}"));
    assert!(deleted.starts_with("HTTP/1.1 202"), "{deleted}");
    digest
}

/// A registry, a publisher's key pair (minisign's), `plugin` published with `rho plugin
/// publish` at `repo_tag` of it, and an empty plugin directory.
struct Published {
    registry: OciRegistry,
    work: tempfile::TempDir,
    key: PathBuf,
    public: PathBuf,
    reference: String,
    digest: String,
    dir: PathBuf,
}

fn published(plugin: &str, repo_tag: &str) -> Published {
    let registry = OciRegistry::start();
    let work = tempfile::tempdir().unwrap();
    let (key, public) = minisign_key(work.path(), "publisher");
    let reference = format!("oci://{}/{repo_tag}", registry.addr);
    let out = rho(&[
        "plugin",
        "publish",
        s(&plugin_lib(plugin)),
        &reference,
        "--key",
        s(&key),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let digest = published_digest(&out);
    let dir = work.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    Published {
        registry,
        work,
        key,
        public,
        reference,
        digest,
        dir,
    }
}

#[test]
fn capabilities_beyond_the_grants_are_refused_unless_granted_or_accepted() {
    let Published {
        registry: _registry,
        work,
        public,
        reference,
        dir,
        ..
    } = published("needs", "tools/needs:1");
    let install = |extra: &[&str]| {
        let mut args = vec![
            "plugin",
            "install",
            reference.as_str(),
            "--dir",
            s(&dir),
            "--trust-key",
            s(&public),
        ];
        args.extend(extra);
        rho(&args)
    };
    let out = install(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("asks for: read "),
        "shown before refusing: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("beyond the directory's grants") && stderr.contains("is not granted"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);

    // The directory's configuration grants what it needs: installed.
    let config = work.path().join("rho.toml");
    std::fs::write(
        &config,
        format!(
            "[[plugins]]\ndir = {:?}\ngrants = {{ read = [\"/var/tmp\"], network = true, env = [\"PATH\", \"RHO_NEEDS_TOKEN\"] }}\n",
            s(&dir)
        ),
    )
    .unwrap();
    let out = install(&["--config", s(&config)]);
    assert!(out.status.success(), "{}", text(&out));
    // It loads in the sandbox with what the directory grants (its token passed through).
    let out = Command::new(rho_bin())
        .args(["call", "token", "{}", "--config", s(&config)])
        .env("RHO_NEEDS_TOKEN", "granted-token")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("granted-token"),
        "{}",
        text(&out)
    );
    // One grant short (no network): refused again, naming it.
    std::fs::remove_file(dir.join("libneeds.so")).unwrap();
    std::fs::remove_file(rho_runtime::PluginLock::path_for(&dir)).unwrap();
    std::fs::write(
        &config,
        format!(
            "[[plugins]]\ndir = {:?}\ngrants = {{ read = [\"/var/tmp\"], env = [\"PATH\", \"RHO_NEEDS_TOKEN\"] }}\n",
            s(&dir)
        ),
    )
    .unwrap();
    let out = install(&["--config", s(&config)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the network (grants.network) is not granted"),
        "{}",
        text(&out)
    );

    // Accepted explicitly: installed, and sandboxed as granted: without the network grant
    // the host refuses to load it (one line naming the network), and serves the others.
    let out = install(&["--config", s(&config), "--accept-capabilities"]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::copy(plugin_lib("echo"), dir.join("libecho.so")).unwrap();
    let out = rho(&["tools", "--config", s(&config), "--json"]);
    let tools: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)));
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo"], "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("libneeds.so") && stderr.contains("network"),
        "{stderr}"
    );
}

#[test]
fn a_registry_with_a_password_takes_the_docker_config_credentials_and_refuses_without() {
    use base64::Engine as _;
    let registry = OciRegistry::start_with_password("publisher", "s3cret-pass");
    let work = tempfile::tempdir().unwrap();
    let (key, public) = minisign_key(work.path(), "publisher");
    let docker = work.path().join("docker");
    std::fs::create_dir(&docker).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode("publisher:s3cret-pass");
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, registry.addr),
    )
    .unwrap();
    let reference = format!("oci://{}/tools/echo:0.1.0", registry.addr);
    let dir = work.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    let with = |config: &Path, args: &[&str]| {
        Command::new(rho_bin())
            .args(args)
            .env("DOCKER_CONFIG", config)
            .output()
            .unwrap()
    };
    let lib = plugin_lib("echo");
    let publish = ["plugin", "publish", s(&lib), &reference, "--key", s(&key)];
    let install = [
        "plugin",
        "install",
        &reference,
        "--dir",
        s(&dir),
        "--trust-key",
        s(&public),
    ];
    // Without credentials: refused, one line, nothing written.
    let nowhere = work.path().join("no-docker-config");
    for args in [&publish[..], &install[..]] {
        let out = with(&nowhere, args);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("the registry:"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    // With them: published and installed.
    let out = with(&docker, &publish);
    assert!(out.status.success(), "{}", text(&out));
    let out = with(&docker, &install);
    assert!(out.status.success(), "{}", text(&out));
    assert!(dir.join("libecho.so").exists());
}

#[test]
fn a_locked_directory_loads_only_what_its_lock_names() {
    let Published {
        registry: _registry,
        work,
        public,
        reference,
        dir,
        ..
    } = published("echo", "tools/echo:0.1.0");
    let out = install_trusting(&reference, &dir, &public);
    assert!(out.status.success(), "{}", text(&out));
    // A file copied in by hand, not installed.
    std::fs::copy(plugin_lib("picture"), dir.join("libpicture.so")).unwrap();
    let config = work.path().join("rho.toml");
    std::fs::write(
        &config,
        format!("[[plugins]]\ndir = {:?}\nlocked = true\n", s(&dir)),
    )
    .unwrap();
    let tools = |config: &Path| rho(&["tools", "--config", s(config), "--json"]);
    let out = tools(&config);
    let names: Vec<String> = serde_json::from_slice::<Value>(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", text(&out)))
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["echo"], "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("libpicture.so") && stderr.contains("not in the directory's lock file"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line for the refused file: {stderr}"
    );

    // The installed file's bytes replaced: refused before it loads.
    std::fs::remove_file(dir.join("libpicture.so")).unwrap();
    std::fs::copy(plugin_lib("faults"), dir.join("libecho.so")).unwrap();
    let out = tools(&config);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(listed, serde_json::json!([]), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("libecho.so") && stderr.contains("is not what was installed"),
        "{stderr}"
    );
    // The same directory unlocked loads what is there.
    std::fs::write(&config, format!("[[plugins]]\ndir = {:?}\n", s(&dir))).unwrap();
    let out = tools(&config);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"spin\""),
        "{}",
        text(&out)
    );
}

/// Publishes `file` declared as echo `version` at `tag` through the library (an embedder's
/// path), signed by `key` when given.
fn publish_version(
    registry: &OciRegistry,
    file: &Path,
    version: &str,
    tag: &str,
    key: &SigningKey,
) -> String {
    let files = [PlatformFile::read(file).unwrap()];
    let declaration = Declaration {
        name: "echo".into(),
        version: version.into(),
        interface_version: rho_runtime::plugin_api::ffi::INTERFACE_VERSION,
        capabilities: Default::default(),
        tools: Vec::new(),
    };
    let at = PluginRef::parse(&format!("oci://{}/tools/echo:{tag}", registry.addr)).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(rho_distribution::publish(
            &files,
            &declaration,
            &at,
            key,
            &Credentials::Anonymous.into(),
        ))
        .unwrap()
        .digest
}

#[test]
fn updates_follow_a_tag_forwards_to_signed_versions_only() {
    let registry = OciRegistry::start();
    let work = tempfile::tempdir().unwrap();
    let (key_file, public) = minisign_key(work.path(), "publisher");
    let key = SigningKey::from_file(&key_file).unwrap();
    let (faults_default, faults_v2) = rho_tests::faults_variants().clone();
    let first = publish_version(&registry, &faults_default, "1.0.0", "stable", &key);
    let dir = work.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    let stable = format!("oci://{}/tools/echo:stable", registry.addr);
    let update = || {
        rho(&[
            "plugin",
            "update",
            "--dir",
            s(&dir),
            "--trust-key",
            s(&public),
        ])
    };
    let out = install_trusting(&stable, &dir, &public);
    assert!(out.status.success(), "{}", text(&out));
    let out = update();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("up to date"),
        "{}",
        text(&out)
    );

    // A newer signed version at the tag: taken, whole (the file is v2's bytes).
    let second = publish_version(&registry, &faults_v2, "1.1.0", "stable", &key);
    assert_ne!(first, second);
    let out = update();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1.0.0 -> 1.1.0"),
        "{}",
        text(&out)
    );
    let installed_file = lock_of(&dir)["plugins"][0]["file"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        std::fs::read(dir.join(&installed_file)).unwrap(),
        std::fs::read(&faults_v2).unwrap()
    );
    assert_eq!(lock_of(&dir)["plugins"][0]["digest"], second.as_str());

    // The tag moved back to the older version: refused, nothing changed.
    let back = publish_version(&registry, &faults_default, "1.0.0", "stable", &key);
    assert_eq!(
        back, first,
        "the same bytes and declaration: the same manifest"
    );
    let out = update();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not newer than the installed 1.1.0"),
        "{}",
        text(&out)
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(lock_of(&dir)["plugins"][0]["digest"], second.as_str());
    assert_eq!(
        std::fs::read(dir.join(&installed_file)).unwrap(),
        std::fs::read(&faults_v2).unwrap(),
        "nothing written"
    );

    // A newer version whose signature is gone: refused even when unsigned installs are allowed.
    let third = publish_version(&registry, &faults_default, "1.2.0", "stable", &key);
    delete_tag(&registry, "tools/echo", &third.replace(':', "-"));
    let out = rho(&[
        "plugin",
        "update",
        "--dir",
        s(&dir),
        "--trust-key",
        s(&public),
        "--allow-unsigned",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("updates take signed versions only"),
        "{}",
        text(&out)
    );
    assert_eq!(lock_of(&dir)["plugins"][0]["digest"], second.as_str());

    // A newer version signed by another trusted key: refused (the publisher is pinned).
    let (other_file, other_public) = minisign_key(work.path(), "other");
    let other = SigningKey::from_file(&other_file).unwrap();
    publish_version(&registry, &faults_default, "1.3.0", "stable", &other);
    let out = rho(&[
        "plugin",
        "update",
        "--dir",
        s(&dir),
        "--trust-key",
        s(&public),
        "--trust-key",
        s(&other_public),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("remove and install to change publishers"),
        "{}",
        text(&out)
    );
    assert_eq!(lock_of(&dir)["plugins"][0]["digest"], second.as_str());

    // The library refuses the same, and says nothing is trusted without keys.
    let policy = InstallPolicy {
        trusted: TrustedKeys::none(),
        access: Credentials::Anonymous.into(),
        ..InstallPolicy::default()
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let err = runtime
        .block_on(rho_distribution::fetch(
            &PluginRef::parse(&stable).unwrap(),
            &policy,
        ))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no key is trusted"), "{err}");
}

#[test]
fn plain_http_is_refused_for_registries_off_loopback_and_bad_keys_are_one_line() {
    let out = rho(&[
        "plugin",
        "install",
        "oci://registry.example:5000/x/y:1",
        "--dir",
        "/nonexistent",
        "--plain-http",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("plain HTTP is only for registries on a loopback address"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let work = tempfile::tempdir().unwrap();
    let out = rho(&["plugin", "key", "new", s(&work.path().join("k"))]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(work.path().join("k.pub").exists());
    // A password-protected key (minisign without -W reads a password from the terminal; here
    // one made by the library with a password) is refused with one line.
    let encrypted = work.path().join("encrypted.key");
    let pair = minisign::KeyPair::generate_encrypted_keypair(Some("pw".into())).unwrap();
    std::fs::write(&encrypted, pair.sk.to_box(None).unwrap().into_string()).unwrap();
    let out = rho(&[
        "plugin",
        "publish",
        s(&plugin_lib("echo")),
        "oci://127.0.0.1:1/x/y:1",
        "--key",
        s(&encrypted),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without a password"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // A registry that is not there: one line, nothing written.
    let dir = work.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    let out = rho(&[
        "plugin",
        "install",
        &format!("oci://127.0.0.1:{}/x/y:1", rho_tests::free_port()),
        "--dir",
        s(&dir),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out)
    );
}

/// README's "Signed installs" block, every line as written (`rho` the built one, the registry
/// this test started for `registry.example`), with a temporary HOME and the example files where
/// the lines name them: `target/release/libecho.so` and `echo.wasm` (built for wasm32-wasip2).
#[test]
fn the_readme_commands_publish_install_update_verify_list_and_remove() {
    let readme = std::fs::read_to_string(rho_tests::workspace_dir().join("README.md")).unwrap();
    let section = readme
        .split("## Signed installs from OCI registries")
        .nth(1)
        .unwrap();
    let block = section
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let lines: Vec<&str> = block
        .lines()
        .map(|l| l.split("  #").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 7, "{block}");

    let registry = OciRegistry::start();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cwd.path().join("target/release")).unwrap();
    std::fs::copy(
        plugin_lib("echo"),
        cwd.path().join("target/release/libecho.so"),
    )
    .unwrap();
    rho_tests::build_component("echo", None, &cwd.path().join("echo.wasm"));
    std::fs::create_dir(home.path().join("rho-plugins")).unwrap();
    let rho = rho_bin();
    let mut outputs = Vec::new();
    for line in &lines {
        let command = line
            .replacen("rho ", &format!("{} ", rho.display()), 1)
            .replace("registry.example", &registry.addr);
        let out = Command::new("sh")
            .args(["-c", &command])
            .current_dir(cwd.path())
            .env("HOME", home.path())
            .env("DOCKER_CONFIG", home.path().join(".docker"))
            .output()
            .unwrap();
        assert!(out.status.success(), "`{line}`: {}", text(&out));
        outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    // What each line prints, in order (the key's line says nothing checked here).
    let expected = [
        (1, "published echo 0.1.0 (linux-x86_64, wasm32-wasip2)"),
        (2, "signed by trusted key"),
        (3, "echo 0.1.0: up to date"),
        (4, "1 installed plugin(s) match"),
        (5, "echo 0.1.0  libecho.so  sha256:"),
        (6, "removed echo 0.1.0"),
    ];
    for (line, says) in expected {
        assert!(
            outputs[line].contains(says),
            "`{}`: {}",
            lines[line],
            outputs[line]
        );
    }
    assert!(!home.path().join("rho-plugins/libecho.so").exists());
}
