//! [1/8]: real plugin libraries loaded from a directory, listed, called; bad files refused with
//! one line while the good ones serve.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use rho_runtime::{CallOptions, DirOptions, Host, Outcome};
use rho_tests::{call, host_with, install, plugin_dir, plugin_lib, timeout};
use serde_json::json;

#[tokio::test]
async fn lists_the_tools_of_every_plugin() {
    let dir = plugin_dir(&["echo", "picture", "files", "faults"]);
    let (host, report) = host_with(dir.path(), DirOptions::in_process(), |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let names: Vec<String> = host.tools().iter().map(|t| t.name.clone()).collect();
    for expected in [
        "echo",
        "checkerboard",
        "read_passage",
        "panic",
        "spin",
        "updates",
    ] {
        assert!(
            names.contains(&expected.to_string()),
            "{expected} missing from {names:?}"
        );
    }
    let tools = host.tools();
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(echo.plugin.as_deref(), Some("echo"));
    assert_eq!(echo.plugin_version.as_deref(), Some("0.1.0"));
    assert_eq!(echo.parameters["properties"]["text"]["type"], "string");
    assert_eq!(echo.parameters["required"], json!(["text"]));
    let slow = tools.iter().find(|t| t.name == "slow").unwrap();
    assert_eq!(slow.timeout_ms, Some(1000));
    let infos = host.plugins().await;
    assert_eq!(infos.len(), 4);
    assert!(
        infos
            .iter()
            .all(|p| p.interface_version == rho_plugin_api::ffi::INTERFACE_VERSION)
    );
    assert!(infos.iter().all(|p| p.sha256.len() == 64));
}

#[tokio::test]
async fn calls_each_example_tool() {
    let dir = plugin_dir(&["echo", "picture", "files"]);
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.runner(timeout(5_000))
    })
    .await;
    let opts = CallOptions::default();

    let echo = host
        .call_with(&call("1", "echo", json!({"text": "héllo"})), &opts)
        .await;
    assert_eq!((echo.outcome, &*echo.text()), (Outcome::Ok, "héllo"));

    let picture = host
        .call_with(&call("2", "checkerboard", json!({"size": 40})), &opts)
        .await;
    assert_eq!(picture.outcome, Outcome::Ok);
    let image = &picture.output.images()[0];
    assert_eq!(image.mime_type, "image/png");
    let decoder = png::Decoder::new(std::io::Cursor::new(image.bytes.clone()));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).expect("PNG pixels");
    assert_eq!((frame.width, frame.height), (40, 40));
    assert_eq!(pixels[0], 0, "top-left square is black");
    assert_eq!(pixels[8], 255, "the next square is white");
    assert!(picture.text().contains("40x40"));

    let text_file = dir.path().join("notes.txt");
    std::fs::write(&text_file, "alpha\nbeta\ngamma\ndelta\n").unwrap();
    let args = json!({"path": text_file, "start_line": 2, "end_line": 3});
    let passage = host
        .call_with(&call("3", "read_passage", args), &opts)
        .await;
    assert_eq!(passage.outcome, Outcome::Ok);
    assert_eq!(&*passage.text(), "2 | beta\n3 | gamma\n");
    assert_eq!(
        passage.details,
        Some(json!({"path": text_file, "start_line": 2, "end_line": 3, "total_lines": 4}))
    );

    let args = json!({"path": dir.path().join("missing.txt"), "start_line": 1, "end_line": 2});
    let missing = host
        .call_with(&call("4", "read_passage", args), &opts)
        .await;
    assert_eq!(missing.outcome, Outcome::Error);
    assert!(
        missing.text().starts_with("cannot read `"),
        "{}",
        &*missing.text()
    );
    assert!(
        missing.text().contains("No such file"),
        "{}",
        &*missing.text()
    );
}

#[tokio::test]
async fn two_plugins_sharing_the_interface_stay_distinct() {
    // abi_stable's RootModule::load_from caches one module per type: were it used, the second
    // plugin would answer with the first one's tools.
    let dir = plugin_dir(&["echo", "files"]);
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.runner(timeout(5_000))
    })
    .await;
    let tools = host.tools();
    let origin = |n: &str| {
        tools
            .iter()
            .find(|t| t.name == n)
            .unwrap()
            .plugin
            .clone()
            .unwrap()
    };
    assert_eq!(origin("echo"), "echo");
    assert_eq!(origin("read_passage"), "files");
    let r = host
        .call_with(
            &call("1", "echo", json!({"text": "a"})),
            &CallOptions::default(),
        )
        .await;
    assert_eq!(&*r.text(), "a");
    // The same library loaded twice (two hosts) gives two working, distinct loads.
    let other = plugin_dir(&["echo"]);
    let (host2, _report2) = host_with(other.path(), DirOptions::in_process(), |b| {
        b.runner(timeout(5_000))
    })
    .await;
    let r2 = host2
        .call_with(
            &call("1", "echo", json!({"text": "b"})),
            &CallOptions::default(),
        )
        .await;
    assert_eq!(&*r2.text(), "b");
    assert!(!host2.tools().iter().any(|t| t.name == "read_passage"));
}

/// The toolchain's own `libstd-*.so`: a real shared library that is not a rho plugin.
fn rust_std_library() -> std::path::PathBuf {
    let out = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .unwrap();
    let rustlib =
        std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("lib/rustlib");
    std::fs::read_dir(&rustlib)
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|target| std::fs::read_dir(target.path().join("lib")).ok())
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("libstd-") && name.ends_with(".so")
        })
        .expect("the toolchain's libstd .so")
}

#[tokio::test]
async fn each_bad_file_gives_one_line_and_the_good_plugins_serve() {
    let dir = plugin_dir(&["echo", "incompatible"]);
    let d = dir.path();
    std::fs::write(d.join("libempty.so"), b"").unwrap();
    std::fs::write(
        d.join("libgarbage.so"),
        (0..4096u32)
            .map(|i| (i * 7919 % 251) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let echo = std::fs::read(plugin_lib("echo")).unwrap();
    std::fs::write(d.join("libtruncated.so"), &echo[..echo.len() / 3]).unwrap();
    std::fs::copy(rust_std_library(), d.join("libnotaplugin.so")).unwrap();
    std::fs::write(d.join("README.md"), "not a plugin, ignored").unwrap();
    std::fs::write(d.join(".libhidden.so"), "hidden, ignored").unwrap();

    let (host, report) = host_with(d, DirOptions::in_process(), |b| b.runner(timeout(5_000))).await;
    let errors = &report.errors;
    let find = |file: &str| {
        errors
            .iter()
            .find(|e| e.starts_with(&format!("{}: ", d.join(file).display())))
            .unwrap_or_else(|| panic!("no error for {file} in {errors:#?}"))
            .clone()
    };
    assert!(find("libempty.so").ends_with("empty file, not a plugin library"));
    assert!(
        find("libgarbage.so")
            .ends_with("not a loadable library: not an ELF file (bad magic number)")
    );
    assert!(find("libtruncated.so").contains("not a loadable library: truncated"));
    assert!(
        find("libnotaplugin.so")
            .ends_with("a library but not a rho plugin (it exports no root module)")
    );
    assert!(
        find("libincompatible.so")
            .contains("incompatible plugin: the layout of its root module differs")
    );
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert!(
        errors.iter().all(|e| !e.contains('\n')),
        "one line each: {errors:#?}"
    );

    let r = host
        .call_with(
            &call("1", "echo", json!({"text": "still here"})),
            &CallOptions::default(),
        )
        .await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "still here"));
}

#[tokio::test]
async fn a_panicking_plugin_tool_crashes_the_call_not_the_host() {
    let dir = plugin_dir(&["faults"]);
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.runner(timeout(5_000))
    })
    .await;
    let opts = CallOptions::default();
    let r = host
        .call_with(&call("1", "panic", json!({"message": "boom"})), &opts)
        .await;
    assert_eq!(r.outcome, Outcome::Crashed);
    assert!(
        r.text()
            .starts_with("tool `panic` panicked at plugins/faults/src/lib.rs:"),
        "{}",
        &*r.text()
    );
    assert!(r.text().ends_with(": boom"), "{}", &*r.text());
    let r = host
        .call_with(&call("2", "panic_payload", json!({})), &opts)
        .await;
    assert_eq!(r.outcome, Outcome::Crashed);
    assert!(
        r.text().ends_with(": a non-string panic payload"),
        "{}",
        &*r.text()
    );
    // The process lives and the plugin still answers.
    let r = host
        .call_with(&call("3", "build_tag", json!({})), &opts)
        .await;
    assert_eq!(r.outcome, Outcome::Ok);
}

#[test]
fn the_incompatible_fixture_is_built() {
    assert!(plugin_lib("incompatible").exists());
    let dir = tempfile::tempdir().unwrap();
    assert!(install(dir.path(), "echo").exists());
}

struct HostEcho;

#[async_trait::async_trait]
impl rho_runtime::Tool for HostEcho {
    fn spec(&self) -> rho_runtime::ToolSpec {
        rho_runtime::ToolSpec::native("echo", "the host's own echo", json!({"type": "object"}))
    }
    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: rho_runtime::ToolCtx,
    ) -> Result<rho_runtime::Answer, rho_runtime::ToolError> {
        Ok(rho_runtime::Answer::text("from the host"))
    }
}

#[tokio::test]
async fn a_name_offered_twice_follows_the_rule_and_is_reported() {
    use tokio_stream::StreamExt;
    let dir = plugin_dir(&["echo"]);
    std::fs::copy(plugin_lib("echo"), dir.path().join("libecho2.so")).unwrap();
    // A bus of our own, subscribed before `build`: the conflict is reported while loading.
    let bus = rho_runtime::Bus::default();
    let mut sub = bus.subscribe();
    let (_host, _report) =
        host_with(dir.path(), DirOptions::in_process(), |b| b.bus(bus.clone())).await;
    let mut conflicts = Vec::new();
    while let Ok(Some(rho_runtime::BusItem::Event(e))) =
        tokio::time::timeout(std::time::Duration::from_millis(100), sub.next()).await
    {
        if let rho_runtime::EventKind::ToolNameConflict {
            tool,
            kept,
            ignored,
        } = &e.kind
        {
            conflicts.push((tool.clone(), kept.clone(), ignored.clone()));
        }
    }
    assert_eq!(
        conflicts,
        [(
            "echo".to_string(),
            "echo@0.1.0 (libecho.so)".to_string(),
            "echo@0.1.0 (libecho2.so)".to_string()
        )]
    );
    // Host-native tools rank before every plugin, even when added after the directory.
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.runner(timeout(5_000)).tool(std::sync::Arc::new(HostEcho))
    })
    .await;
    let r = host
        .call_with(&call("1", "echo", json!({})), &CallOptions::default())
        .await;
    assert_eq!(&*r.text(), "from the host");
    let twice = Host::builder()
        .plugin_dir(dir.path(), DirOptions::in_process())
        .tool(std::sync::Arc::new(HostEcho))
        .tool(std::sync::Arc::new(HostEcho))
        .build()
        .await;
    assert!(matches!(
        twice,
        Err(rho_runtime::HostError::Tool(rho_runtime::RegistryError::Duplicate(name))) if name == "echo"
    ));
}

struct BadName;

#[async_trait::async_trait]
impl rho_runtime::Tool for BadName {
    fn spec(&self) -> rho_runtime::ToolSpec {
        rho_runtime::ToolSpec::native("bad name!", "", json!({"type": "object"}))
    }
    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: rho_runtime::ToolCtx,
    ) -> Result<rho_runtime::Answer, rho_runtime::ToolError> {
        Ok(rho_runtime::Answer::text(""))
    }
}

#[tokio::test]
async fn a_tool_name_models_do_not_accept_is_refused_with_a_clear_error() {
    let built = Host::builder()
        .tool(std::sync::Arc::new(BadName))
        .build()
        .await;
    let Err(err) = built else {
        panic!("a host with a badly named tool was built")
    };
    assert!(matches!(
        err,
        rho_runtime::HostError::Tool(rho_runtime::RegistryError::BadName(_))
    ));
    assert_eq!(
        err.to_string(),
        "tool \"bad name!\" refused: a tool name must match ^[a-zA-Z0-9_-]{1,64}$"
    );
}
