//! `cargo xtask msrv`: the `rust-version` each crate of the workspace declares, checked against
//! what the locked dependencies it builds with declare ([4/13]): a crate's own can be no lower
//! than the highest of theirs (normal and build dependencies, transitively), or `cargo install
//! --locked` on that toolchain fails in a dependency. Most crates inherit the workspace's; one
//! that needs a newer Rust for a dependency of its own (`rho-runtime-wasm`: wasmtime) declares
//! it, and the crates below it keep theirs. And the one
//! manifest that inherits nothing (`plugin-api`'s, which `rho` carries as it is) says what the
//! workspace's root manifest says: `[workspace.package]`, its dependencies' entries in
//! `[workspace.dependencies]`, `[workspace.lints]`.

use std::path::Path;

use serde_json::Value;

/// A `rust-version` as numbers (`1.89` is `[1, 89, 0]`).
type Version = [u64; 3];

/// Prints what the locked dependencies need and what the workspace declares; fails when the
/// declaration is lower.
pub fn run(workspace: &Path) -> Result<(), String> {
    // The whole graph: every platform's dependencies, as Cargo.lock holds them.
    let metadata = rho_devkit::cargo_metadata(&workspace.join("Cargo.toml"), false)
        .map_err(|e| e.to_string())?;
    let (root, api) = manifests(workspace)?;
    let disagree = disagreements(&root, &api);
    if !disagree.is_empty() {
        return Err(disagree.join("\n"));
    }
    let mut problems = Vec::new();
    for own in packages(&metadata).filter(|p| p["source"].is_null()) {
        let (Some(name), Some(id)) = (own["name"].as_str(), own["id"].as_str()) else {
            continue;
        };
        // A crate that declares none (the workspace-hack, test fixtures) claims nothing.
        let Some(declared) = own["rust_version"].as_str().and_then(parse) else {
            continue;
        };
        let closure = built_with(&metadata, id);
        let Some((needed, by)) = needed(
            packages(&metadata).filter(|p| p["id"].as_str().is_some_and(|id| closure.contains(id))),
        ) else {
            continue;
        };
        println!(
            "{name}: its locked dependencies need Rust {} ({by}); it declares {}",
            show(needed),
            show(declared)
        );
        if declared < needed {
            problems.push(format!(
                "{name}: rust-version {} is lower than {} that {by} needs",
                show(declared),
                show(needed)
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The ids of the packages the package `id` builds with: its normal and build dependencies,
/// transitively (dev-dependencies build only its tests).
fn built_with<'m>(metadata: &'m Value, id: &'m str) -> std::collections::BTreeSet<&'m str> {
    let nodes: std::collections::BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut next = vec![id];
    while let Some(at) = next.pop() {
        let Some(node) = nodes.get(at) else { continue };
        for dep in node["deps"].as_array().into_iter().flatten() {
            let kinds = dep["dep_kinds"].as_array();
            let builds = kinds
                .into_iter()
                .flatten()
                .any(|k| k["kind"].as_str() != Some("dev"));
            if let Some(pkg) = dep["pkg"].as_str()
                && builds
                && seen.insert(pkg)
            {
                next.push(pkg);
            }
        }
    }
    seen
}

fn packages(metadata: &Value) -> impl Iterator<Item = &Value> {
    metadata["packages"].as_array().into_iter().flatten()
}

/// The highest `rust-version` among `packages` from a registry, with the package (`name
/// version`) that declares it.
fn needed<'m>(packages: impl Iterator<Item = &'m Value>) -> Option<(Version, String)> {
    packages
        .filter(|p| !p["source"].is_null())
        .filter_map(|p| {
            let version = parse(p["rust_version"].as_str()?)?;
            Some((
                version,
                format!("{} {}", p["name"].as_str()?, p["version"].as_str()?),
            ))
        })
        .max_by_key(|(version, _)| *version)
}

/// Where `plugin-api/Cargo.toml`, which inherits nothing, says otherwise than the workspace's
/// root manifest: a `[package]` key the workspace's `[workspace.package]` sets, a dependency
/// unlike its `[workspace.dependencies]` entry (a bare requirement and `{ version = ... }` are
/// one), or lints unlike `[workspace.lints]`.
fn disagreements(root: &toml::Table, api: &toml::Table) -> Vec<String> {
    let at = |table: &toml::Table, path: &[&str]| -> Option<toml::Value> {
        let mut value = table.get(path[0])?.clone();
        for key in &path[1..] {
            value = value.get(key)?.clone();
        }
        Some(value)
    };
    // A dependency as a table: `"1"` is `{ version = "1" }`; the path of a workspace's own
    // crates aside.
    let spec = |value: Option<toml::Value>| match value {
        Some(toml::Value::String(version)) => {
            let mut table = toml::Table::new();
            table.insert("version".into(), toml::Value::String(version));
            Some(table)
        }
        Some(toml::Value::Table(mut table)) => {
            table.remove("path");
            Some(table)
        }
        _ => None,
    };
    let mut problems = Vec::new();
    let shared = root
        .get("workspace")
        .and_then(|w| w.get("package"))
        .and_then(toml::Value::as_table)
        .cloned()
        .unwrap_or_default();
    for (key, value) in &shared {
        let own = at(api, &["package", key]);
        if own.as_ref() != Some(value) {
            problems.push(format!(
                "plugin-api/Cargo.toml: package.{key} is {}, the workspace's {value}",
                own.map_or("missing".into(), |v| v.to_string())
            ));
        }
    }
    let dependencies = api
        .get("dependencies")
        .and_then(toml::Value::as_table)
        .cloned()
        .unwrap_or_default();
    for (name, value) in dependencies {
        let theirs = spec(at(root, &["workspace", "dependencies", &name]));
        let own = spec(Some(value));
        if own != theirs {
            problems.push(format!(
                "plugin-api/Cargo.toml: dependency {name} is {own:?}, the workspace's {theirs:?}"
            ));
        }
    }
    if at(api, &["lints"]) != at(root, &["workspace", "lints"]) {
        problems.push("plugin-api/Cargo.toml: [lints] unlike [workspace.lints]".into());
    }
    problems
}

/// The root manifest and plugin-api's, read.
fn manifests(workspace: &Path) -> Result<(toml::Table, toml::Table), String> {
    let read = |path: std::path::PathBuf| -> Result<toml::Table, String> {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    };
    Ok((
        read(workspace.join("Cargo.toml"))?,
        read(workspace.join("plugin-api/Cargo.toml"))?,
    ))
}

fn parse(text: &str) -> Option<Version> {
    let mut parts = text.split('.').map(|n| n.parse::<u64>().ok());
    let major = parts.next()??;
    let minor = parts.next().unwrap_or(Some(0))?;
    let patch = parts.next().unwrap_or(Some(0))?;
    Some([major, minor, patch])
}

fn show([major, minor, patch]: Version) -> String {
    if patch == 0 {
        format!("{major}.{minor}")
    } else {
        format!("{major}.{minor}.{patch}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_workspace_declares_what_its_locked_dependencies_need() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        if let Err(problem) = run(&root) {
            panic!("{problem}");
        }
    }

    #[test]
    fn the_highest_registry_version_is_needed_and_a_lower_declaration_fails() {
        let metadata = json!({"packages": [
            {"name": "a", "version": "1.0.0", "source": "registry", "rust_version": "1.88"},
            {"name": "b", "version": "0.51.0", "source": "registry", "rust_version": "1.89.0"},
            {"name": "c", "version": "2.0.0", "source": "registry", "rust_version": null},
            {"name": "mine", "version": "0.1.0", "source": null, "rust_version": "1.88"},
        ]});
        assert_eq!(
            needed(packages(&metadata)),
            Some(([1, 89, 0], "b 0.51.0".into()))
        );
        assert_eq!(show([1, 89, 0]), "1.89");
        assert_eq!(parse("1.x"), None);
    }

    #[test]
    fn a_manifest_unlike_the_workspace_is_named() {
        let root: toml::Table = toml::from_str(
            r#"
            [workspace.package]
            version = "0.1.0"
            edition = "2024"
            [workspace.dependencies]
            serde = { version = "1", features = ["derive", "rc"] }
            schemars = "1.2"
            [workspace.lints.clippy]
            unwrap_used = "warn"
            "#,
        )
        .expect("toml");
        let api = |text: &str| toml::from_str::<toml::Table>(text).expect("toml");
        let agreeing = api(r#"
            [package]
            name = "rho-plugin-api"
            version = "0.1.0"
            edition = "2024"
            [dependencies]
            serde = { version = "1", features = ["derive", "rc"] }
            schemars = { version = "1.2" }
            [lints.clippy]
            unwrap_used = "warn"
            "#);
        assert_eq!(disagreements(&root, &agreeing), Vec::<String>::new());
        let drifted = api(r#"
            [package]
            version = "0.2.0"
            [dependencies]
            serde = { version = "1", features = ["derive"] }
            schemars = "1.2"
            "#);
        let problems = disagreements(&root, &drifted).join("\n");
        assert!(
            problems.contains("package.version is \"0.2.0\""),
            "{problems}"
        );
        assert!(
            problems.contains("package.edition is missing"),
            "{problems}"
        );
        assert!(problems.contains("dependency serde"), "{problems}");
        assert!(!problems.contains("dependency schemars"), "{problems}");
        assert!(problems.contains("[lints]"), "{problems}");
    }
}
