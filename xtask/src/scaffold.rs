//! `cargo xtask new-plugin NAME`: a plugin crate that compiles at once, added to the workspace.

use std::path::{Path, PathBuf};

use crate::plugins::workspace_root;

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

/// Why `name` cannot be a plugin's crate and tool name, if it cannot.
pub fn refuse_name(name: &str) -> Option<String> {
    if !rho_core::plugin_api::is_valid_tool_name(name) {
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
    None
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

fn cargo_toml(name: &str) -> String {
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
rho-plugin-api.workspace = true
serde.workspace = true
schemars.workspace = true
"#
    )
}

fn lib_rs(name: &str) -> String {
    let func = snake(name);
    let args = format!("{}Args", pascal(name));
    format!(
        r#"//! `{name}`: a rho plugin. Edit the tool below; `cargo xtask dev {name}` rebuilds and installs
//! it on every save, and a host watching the plugin directory reloads it.

use rho_plugin_api::{{Answer, Ctx, JsonSchema, Tool, ToolError, export_plugin, json}};
use serde::Deserialize;

/// Arguments of `{name}` (doc comments become the JSON Schema's descriptions).
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
    Tool::new("{name}", "Greets someone by name.", {func}),
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

fn readme(name: &str, rel: &str) -> String {
    format!(
        r#"# {name}

A rho plugin with one tool, `{name}`.

- Build and install into the plugin directory: `cargo xtask build-plugins` (default
  `target/plugins`).
- Edit live: `cargo xtask dev {name}` rebuilds and installs on every save; a host running
  `rho watch --plugins target/plugins` reloads it.
- Try it: `cargo run -q -p rho-cli -- call {name} '{{"name":"Ada"}}' --plugins target/plugins`.
- Test the function directly: `cargo test -p {name}`.

Source: `{rel}/src/lib.rs`.
"#
    )
}

/// Adds `member` to the workspace's `members`, keeping the file's formatting.
fn add_member(manifest: &Path, member: &str) -> Result<(), String> {
    let text =
        std::fs::read_to_string(manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("{}: {e}", manifest.display()))?;
    let members = doc
        .get_mut("workspace")
        .and_then(|w| w.get_mut("members"))
        .and_then(|m| m.as_array_mut())
        .ok_or_else(|| format!("{} has no [workspace] members array", manifest.display()))?;
    if !members.iter().any(|m| m.as_str() == Some(member)) {
        members.push(member);
    }
    std::fs::write(manifest, doc.to_string()).map_err(|e| format!("{}: {e}", manifest.display()))
}

/// Creates the plugin crate `dir/name` and adds it to the workspace.
pub fn new_plugin(name: &str, dir: &Path) -> Result<PathBuf, String> {
    if let Some(reason) = refuse_name(name) {
        return Err(reason);
    }
    let root = workspace_root();
    let rel_dir = if dir.is_absolute() {
        dir.strip_prefix(&root)
            .map_err(|_| {
                format!(
                    "{} is outside the workspace {}",
                    dir.display(),
                    root.display()
                )
            })?
            .to_owned()
    } else {
        dir.to_owned()
    };
    let crate_dir = root.join(&rel_dir).join(name);
    if crate_dir.exists() {
        return Err(format!(
            "{} already exists; nothing was changed",
            crate_dir.display()
        ));
    }
    let rel = rel_dir.join(name).to_string_lossy().replace('\\', "/");
    let write = |path: PathBuf, text: String| {
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    std::fs::create_dir_all(crate_dir.join("src"))
        .map_err(|e| format!("{}: {e}", crate_dir.display()))?;
    let created = write(crate_dir.join("Cargo.toml"), cargo_toml(name))
        .and_then(|()| write(crate_dir.join("src/lib.rs"), lib_rs(name)))
        .and_then(|()| write(crate_dir.join("README.md"), readme(name, &rel)))
        .and_then(|()| add_member(&root.join("Cargo.toml"), &rel));
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
}
