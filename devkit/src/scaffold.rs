//! A plugin crate that compiles at once: standalone (a workspace of its own, anywhere: `rho plugin
//! new`) or a member of an existing workspace (`cargo xtask new-plugin`).
//!
//! Names are refused before anything is written: not a valid tool name, a Rust keyword or a
//! name the toolchain reserves, or the name of a package the crate would sit beside (the
//! workspace's packages and every package in their dependency graph, `rho-runtime` and `serde`
//! included): such a name would break every cargo command of the workspace.

use std::path::{Path, PathBuf};

use crate::dev::Build;
use crate::{DevkitError, io};

/// Where a new plugin crate goes.
#[derive(Debug, Clone)]
pub enum Layout {
    /// A crate of its own (with an empty `[workspace]` table), depending on `rho-plugin-api` by
    /// version, with a `[patch.crates-io]` entry pointing that version at `api` until it is on
    /// crates.io: the copy of the API crate this program carries ([`write_api_copy`]).
    Standalone {
        /// The directory of the plugin API crate the patch points at.
        api: PathBuf,
    },
    /// A member of the workspace whose root directory is `workspace`: added to its `members`,
    /// using its `[workspace.dependencies]`.
    Member {
        /// The workspace's root directory.
        workspace: PathBuf,
    },
}

/// The metadata that makes `rho plugin dev` build a crate as a component.
const COMPONENT_METADATA: &str = "\n# `rho plugin dev` builds this crate as a WebAssembly component (wasm32-wasip2):\n\
     # `rho plugin dev --native` for a library.\n\
     [package.metadata.rho]\n\
     build = \"component\"\n";

/// The version of the plugin API this program carries and new crates depend on.
const API_VERSION: &str = rho_runtime::plugin_api::source::VERSION;

/// rho's data directory: `$XDG_DATA_HOME/rho`, else `$HOME/.local/share/rho`.
pub fn data_dir() -> Result<PathBuf, DevkitError> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    absolute("XDG_DATA_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".local/share")))
        .map(|base| base.join("rho"))
        .ok_or_else(|| DevkitError::Io {
            path: PathBuf::from("$XDG_DATA_HOME"),
            reason: "neither XDG_DATA_HOME nor HOME is set to an absolute path".into(),
        })
}

/// Writes the copy of the plugin API crate this program carries (its manifest and sources, as
/// built in) into `data_dir/plugin-api/VERSION`, and returns that directory. Written once per
/// version and never replaced: a copy already there is used when its files are those carried.
/// One that differs (another build of the same version, say a checkout's next to an installed
/// rho) is left as it is, for the crates that point at it, and this program's copy goes to
/// `VERSION-HASH` (a hash of what it carries). Each copy is written into a directory of its own
/// and renamed into place, so that two programs at once cannot mix or break them.
pub fn write_api_copy(data_dir: &Path) -> Result<PathBuf, DevkitError> {
    let files = rho_runtime::plugin_api::source::FILES;
    let parent = data_dir.join("plugin-api");
    std::fs::create_dir_all(&parent).map_err(io(&parent))?;
    sweep_unfinished_copies(&parent);
    let carried = |dir: &Path| {
        files
            .iter()
            .all(|(path, text)| std::fs::read(dir.join(path)).is_ok_and(|t| t == text.as_bytes()))
    };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in files.iter().flat_map(|(p, t)| p.bytes().chain(t.bytes())) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    for dir in [
        parent.join(API_VERSION),
        parent.join(format!("{API_VERSION}-{hash:016x}")),
    ] {
        if carried(&dir) {
            return Ok(dir);
        }
        if dir.exists() {
            continue;
        }
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let fresh = parent.join(format!(".unfinished-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&fresh);
        for (path, text) in files {
            let path = fresh.join(path);
            let written = match path.parent() {
                Some(folder) => std::fs::create_dir_all(folder),
                None => Ok(()),
            }
            .and_then(|()| std::fs::write(&path, text));
            if let Err(e) = written {
                let _ = std::fs::remove_dir_all(&fresh);
                return Err(io(&path)(e));
            }
        }
        let renamed = std::fs::rename(&fresh, &dir);
        let _ = std::fs::remove_dir_all(&fresh);
        match renamed {
            Ok(()) => return Ok(dir),
            // Another program put its copy there first: the same, or the next name.
            Err(_) if carried(&dir) => return Ok(dir),
            Err(_) if dir.exists() => continue,
            Err(e) => return Err(io(&dir)(e)),
        }
    }
    Err(DevkitError::Io {
        path: parent,
        reason: format!(
            "two copies of plugin API {API_VERSION} unlike the one this program carries are in \
             the way; remove them"
        ),
    })
}

/// Removes the unfinished copies (`.unfinished-PID-N`) of programs that are gone.
fn sweep_unfinished_copies(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(".unfinished-")
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Words a crate may not be named.
const RESERVED: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "Self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    "try",
    "gen",
    "test",
    "core",
    "std",
    "alloc",
    "proc_macro",
    "build",
];

/// Why `name` cannot be a plugin's crate and tool name, if it cannot; `taken` are the package
/// names it would collide with.
pub fn refuse_name(name: &str, taken: &[String]) -> Option<String> {
    if !rho_runtime::plugin_api::is_valid_tool_name(name) {
        return Some(format!(
            "`{name}` is not a valid tool name (^[a-zA-Z0-9_-]{{1,64}}$)"
        ));
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.starts_with('-') {
        return Some(format!(
            "`{name}` is not a valid crate name: it must start with a letter or _"
        ));
    }
    if RESERVED.contains(&name) || RESERVED.contains(&name.replace('-', "_").as_str()) {
        return Some(format!("`{name}` is a reserved word; pick another name"));
    }
    let normal = |n: &str| n.replace('_', "-").to_ascii_lowercase();
    if taken.iter().any(|t| normal(t) == normal(name)) {
        return Some(format!(
            "`{name}` is the name of a package this crate would sit beside (two packages of one name break every cargo command); pick another name"
        ));
    }
    None
}

/// The names of every package in the graph of the manifest `manifest` (its workspace's members
/// and all their dependencies). A workspace without members yet: the keys of its
/// `[workspace.dependencies]` and the graphs of those given by path.
pub fn package_names(manifest: &Path) -> Result<Vec<String>, DevkitError> {
    match metadata_names(manifest) {
        Ok(names) => Ok(names),
        Err(e) => declared_names(manifest).ok_or(e),
    }
}

/// The names `[workspace.dependencies]` of `manifest` declares, with the graphs of path ones.
fn declared_names(manifest: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(manifest).ok()?;
    let doc: toml_edit::DocumentMut = text.parse().ok()?;
    let deps = doc.get("workspace")?.get("dependencies")?.as_table_like()?;
    let base = manifest.parent().unwrap_or(Path::new("."));
    let mut names = Vec::new();
    for (name, spec) in deps.iter() {
        names.push(name.to_owned());
        if let Some(path) = spec.get("path").and_then(|p| p.as_str()) {
            names.extend(metadata_names(&base.join(path).join("Cargo.toml")).unwrap_or_default());
        }
    }
    Some(names)
}

fn metadata_names(manifest: &Path) -> Result<Vec<String>, DevkitError> {
    let meta = crate::cargo_metadata(manifest, false)?;
    Ok(meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect())
}

fn snake(name: &str) -> String {
    name.replace('-', "_")
}

fn pascal(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn cargo_toml(name: &str, layout: &Layout, build: Build) -> String {
    let (dependencies, workspace) = match layout {
        Layout::Member { .. } => (
            "rho-plugin-api.workspace = true\nserde.workspace = true\nschemars.workspace = true\n"
                .to_owned(),
            String::new(),
        ),
        Layout::Standalone { api } => (
            format!(
                "rho-plugin-api = \"{API_VERSION}\"\n\
                 serde = {{ version = \"1\", features = [\"derive\"] }}\n\
                 schemars = \"1.2\"\n"
            ),
            format!(
                "\n# A workspace of its own: it builds wherever it is, inside another workspace too.\n\
                 [workspace]\n\
                 \n\
                 # Until rho-plugin-api {API_VERSION} is on crates.io, it comes from the copy `rho` carries,\n\
                 # which `rho plugin new` writes into rho's data directory (on another machine, run any\n\
                 # `rho plugin new` there once and fix this path). Delete these lines once it is published.\n\
                 [patch.crates-io]\n\
                 rho-plugin-api = {{ path = {api} }}\n",
                api = toml_edit::Value::from(api.display().to_string())
            ),
        ),
    };
    let component = match (build, layout) {
        (Build::Native, _) => String::new(),
        (Build::Component, Layout::Member { .. }) => COMPONENT_METADATA.to_owned(),
        // Profiles are the workspace's: only a crate of its own sets one.
        (Build::Component, Layout::Standalone { .. }) => format!(
            "{COMPONENT_METADATA}\n# Components without debug information: many times smaller, \
             compiled faster by the host.\n[profile.release]\nstrip = true\ndebug = false\n"
        ),
    };
    format!(
        r#"[package]
name = "{name}"
description = "A rho plugin"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# cdylib: the library rho loads; rlib: so unit tests can call the tool functions.
crate-type = ["cdylib", "rlib"]

[dependencies]
{dependencies}{component}{workspace}"#
    )
}

fn lib_rs(name: &str) -> String {
    let func = snake(name);
    let args = format!("{}Args", pascal(name));
    format!(
        r#"//! `{name}`: a rho plugin. Edit the tool below; `rho plugin dev` rebuilds and installs it on
//! every save, and a host watching the plugin directory reloads it.

use rho_plugin_api::{{Answer, Ctx, JsonSchema, Tool, ToolError, export_plugin, json}};
use serde::Deserialize;

// Doc comments (`///`) on this type and its fields become the JSON Schema's descriptions, which
// the model reads: write them for the model.
/// Whom to greet.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct {args} {{
    /// Who or what to greet.
    pub name: String,
}}

/// Greets `args.name`; details carry the length for screens.
pub fn {func}(args: {args}, ctx: &Ctx) -> Result<Answer, ToolError> {{
    if args.name.trim().is_empty() {{
        return Err(ToolError::new("name must not be empty"));
    }}
    ctx.update(format!("greeting {{}}", args.name));
    Ok(Answer::text(format!("Hello, {{}}!", args.name))
        .with_details(json!({{ "length": args.name.chars().count() }})))
}}

export_plugin! {{
    Tool::new("{name}", "Greets someone by name.", {func})
        // What agents act on (MCP hints); a tool that declares none counts as destructive.
        .read_only(true)
        .idempotent(true)
        .open_world(false),
}}

#[cfg(test)]
mod tests {{
    use super::*;

    #[test]
    fn greets() {{
        let ctx = Ctx::detached("test-1");
        let answer = {func}({args} {{ name: "Ada".into() }}, &ctx).unwrap();
        assert_eq!(answer.output.text(), "Hello, Ada!");
        assert_eq!(ctx.sent_updates(), ["greeting Ada"]);
        assert!({func}({args} {{ name: " ".into() }}, &ctx).is_err());
    }}
}}
"#
    )
}

fn readme(name: &str) -> String {
    format!(
        r#"# {name}

A rho plugin with one tool, `{name}`.

- Test the function directly: `cargo test`.
- Build it: `cargo build` (the library is `target/debug/lib{lib}{suffix}`), then see what a
  host sees: `rho plugin check target/debug/lib{lib}{suffix}`.
- Edit live: `rho plugin dev --out PLUGIN_DIR` rebuilds and installs into `PLUGIN_DIR` on every
  save; a host watching it (`rho watch --plugins PLUGIN_DIR`) reloads the new version.
- Try it: `rho call {name} '{{"name":"Ada"}}' --plugins PLUGIN_DIR`.

Source: `src/lib.rs`.
"#,
        lib = snake(name),
        suffix = std::env::consts::DLL_SUFFIX
    )
}

/// Adds `member` to the workspace's `members`, keeping the file's formatting.
fn add_member(manifest: &Path, member: &str) -> Result<(), DevkitError> {
    let text = std::fs::read_to_string(manifest).map_err(io(manifest))?;
    let bad = |reason: String| DevkitError::Io {
        path: manifest.to_owned(),
        reason,
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| bad(format!("{e}")))?;
    let members = doc
        .get_mut("workspace")
        .and_then(|w| w.get_mut("members"))
        .and_then(|m| m.as_array_mut())
        .ok_or_else(|| bad("no [workspace] members array".into()))?;
    if !members.iter().any(|m| m.as_str() == Some(member)) {
        members.push(member);
    }
    std::fs::write(manifest, doc.to_string()).map_err(io(manifest))
}

/// Creates the plugin crate `parent/name` laid out as `layout` and returns its directory; its
/// manifest says it builds as `build` (`rho plugin dev` reads it). Nothing is written when the
/// name is refused or the directory exists; a failure midway removes what was made.
pub fn new_plugin(
    name: &str,
    parent: &Path,
    layout: &Layout,
    build: Build,
) -> Result<PathBuf, DevkitError> {
    let graph = match layout {
        Layout::Standalone { api } => api.join("Cargo.toml"),
        Layout::Member { workspace } => workspace.join("Cargo.toml"),
    };
    if let Some(reason) = refuse_name(name, &[]) {
        return Err(DevkitError::NameRefused(reason));
    }
    let crate_dir = parent.join(name);
    if crate_dir.exists() {
        return Err(DevkitError::Exists(crate_dir));
    }
    if let Some(reason) = refuse_name(name, &package_names(&graph)?) {
        return Err(DevkitError::NameRefused(reason));
    }
    let member = match layout {
        Layout::Standalone { .. } => None,
        Layout::Member { workspace } => {
            let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
            let relative = absolute(&crate_dir)
                .strip_prefix(absolute(workspace))
                .map(|r| r.to_string_lossy().replace('\\', "/"))
                .map_err(|_| DevkitError::Io {
                    path: crate_dir.clone(),
                    reason: format!("outside the workspace {}", workspace.display()),
                })?;
            Some((workspace.join("Cargo.toml"), relative))
        }
    };
    let write = |path: PathBuf, text: String| std::fs::write(&path, text).map_err(io(&path));
    std::fs::create_dir_all(crate_dir.join("src")).map_err(io(&crate_dir))?;
    let created = write(
        crate_dir.join("Cargo.toml"),
        cargo_toml(name, layout, build),
    )
    .and_then(|()| write(crate_dir.join("src/lib.rs"), lib_rs(name)))
    .and_then(|()| write(crate_dir.join("README.md"), readme(name)))
    .and_then(|()| match &member {
        Some((manifest, relative)) => add_member(manifest, relative),
        None => Ok(()),
    });
    if let Err(e) = created {
        let _ = std::fs::remove_dir_all(&crate_dir);
        return Err(e);
    }
    Ok(crate_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let taken = ["rho-runtime".to_owned(), "serde".to_owned()];
        let refuse_name = |name: &str| refuse_name(name, &taken);
        assert!(refuse_name("rho_runtime").unwrap().contains("package"));
        assert!(refuse_name("serde").unwrap().contains("package"));
        assert_eq!(refuse_name("greet"), None);
        assert_eq!(refuse_name("my-tool_2"), None);
        assert!(
            refuse_name("2fast")
                .unwrap()
                .contains("start with a letter")
        );
        assert!(
            refuse_name("has space")
                .unwrap()
                .contains("not a valid tool name")
        );
        assert!(refuse_name("fn").unwrap().contains("reserved"));
        assert!(refuse_name("").is_some());
        assert_eq!(pascal("my-tool_2"), "MyTool2");
    }

    #[test]
    fn the_api_copy_is_written_once_and_never_replaced() {
        let data = tempfile::tempdir().expect("a temporary directory");
        let dir = write_api_copy(data.path()).expect("the copy");
        assert_eq!(dir, data.path().join("plugin-api").join(API_VERSION));
        let lib = dir.join("src/lib.rs");
        let carried = rho_runtime::plugin_api::source::FILES
            .iter()
            .find(|(path, _)| *path == "src/lib.rs")
            .map(|(_, text)| *text);
        assert_eq!(std::fs::read_to_string(&lib).ok().as_deref(), carried);
        // Kept as it is: a file cargo adds beside it survives.
        std::fs::write(dir.join("Cargo.lock"), "# cargo's").expect("a file");
        assert_eq!(write_api_copy(data.path()).expect("the copy"), dir);
        assert!(dir.join("Cargo.lock").is_file());
        // Another build of this version is there: left alone, this one goes beside it.
        std::fs::write(&lib, "// another build").expect("a file");
        let beside = write_api_copy(data.path()).expect("the copy");
        assert_ne!(beside, dir);
        assert!(beside.starts_with(data.path().join("plugin-api")));
        assert_eq!(
            std::fs::read_to_string(&lib).ok().as_deref(),
            Some("// another build")
        );
        assert_eq!(
            std::fs::read_to_string(beside.join("src/lib.rs"))
                .ok()
                .as_deref(),
            carried
        );
        assert_eq!(write_api_copy(data.path()).expect("the copy"), beside);
        // An unfinished copy of a program that is gone is swept; nothing else is left.
        let dead = data.path().join("plugin-api/.unfinished-999999999-0");
        std::fs::create_dir_all(&dead).expect("a directory");
        write_api_copy(data.path()).expect("the copy");
        assert!(!dead.exists());
        let left = std::fs::read_dir(data.path().join("plugin-api"))
            .expect("the directory")
            .count();
        assert_eq!(left, 2);
    }

    #[test]
    fn copies_made_at_once_agree() {
        let data = tempfile::tempdir().expect("a temporary directory");
        let made: Vec<_> = std::thread::scope(|s| {
            let writers: Vec<_> = (0..8)
                .map(|_| s.spawn(|| write_api_copy(data.path())))
                .collect();
            writers.into_iter().map(|w| w.join().ok()).collect()
        });
        for dir in made {
            let dir = dir.and_then(Result::ok).expect("a copy");
            assert_eq!(dir, data.path().join("plugin-api").join(API_VERSION));
        }
    }
}
