//! `cargo xtask msrv`: the `rust-version` the workspace declares, checked against what its
//! locked dependencies declare ([4/13]): the workspace's own can be no lower than the highest
//! of theirs, or `cargo install --locked` on that toolchain fails in a dependency. And the one
//! manifest that inherits nothing (`plugin-api`'s, which `rho` carries as it is) agrees with the
//! workspace: same version, edition, rust-version and license as every package, and the same
//! requirement and features for each dependency it shares with another package.

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
    let (needed, by) = needed(&metadata).ok_or("no locked dependency declares a rust-version")?;
    let declared = declared(&metadata)?;
    println!(
        "locked dependencies need Rust {} ({by}); the workspace declares {}",
        show(needed),
        show(declared)
    );
    let disagree = disagreements(&metadata);
    if !disagree.is_empty() {
        return Err(disagree.join("\n"));
    }
    if declared < needed {
        return Err(format!(
            "Cargo.toml: rust-version {} is lower than {} that {by} needs",
            show(declared),
            show(needed)
        ));
    }
    Ok(())
}

fn packages(metadata: &Value) -> impl Iterator<Item = &Value> {
    metadata["packages"].as_array().into_iter().flatten()
}

/// The highest `rust-version` among packages from a registry, with the package (`name version`)
/// that declares it.
fn needed(metadata: &Value) -> Option<(Version, String)> {
    packages(metadata)
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

/// The lowest `rust-version` among the workspace's own packages (each inherits the workspace's).
fn declared(metadata: &Value) -> Result<Version, String> {
    packages(metadata)
        .filter(|p| p["source"].is_null())
        .filter_map(|p| parse(p["rust_version"].as_str()?))
        .min()
        .ok_or_else(|| "no package of the workspace declares a rust-version".into())
}

/// Where the workspace's packages disagree: a published package's field unlike the others', or a dependency
/// one package requires otherwise than another (name, requirement, features, default features).
fn disagreements(metadata: &Value) -> Vec<String> {
    let own: Vec<&Value> = packages(metadata)
        .filter(|p| p["source"].is_null())
        .collect();
    let mut problems = Vec::new();
    // Among the published crates (test crates and plugins keep editions of their own).
    for field in ["version", "edition", "rust_version", "license"] {
        let mut values: Vec<(&str, String)> = own
            .iter()
            .filter(|p| p["publish"].is_null())
            .map(|p| (p["name"].as_str().unwrap_or("?"), p[field].to_string()))
            .collect();
        values.sort_by(|a, b| a.1.cmp(&b.1));
        if let (Some(first), Some(last)) = (values.first(), values.last())
            && first.1 != last.1
        {
            problems.push(format!(
                "{field}: {} says {}, {} says {}",
                first.0, first.1, last.0, last.1
            ));
        }
    }
    let mut seen: std::collections::BTreeMap<&str, (&str, String)> = Default::default();
    for package in &own {
        let name = package["name"].as_str().unwrap_or("?");
        let dependencies = package["dependencies"].as_array().into_iter().flatten();
        for dependency in dependencies.filter(|d| d["kind"].is_null() && d["path"].is_null()) {
            let Some(dep) = dependency["name"].as_str() else {
                continue;
            };
            let mut features: Vec<&str> = dependency["features"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            features.sort_unstable();
            let shape = format!(
                "{} {features:?} default-features {}",
                dependency["req"], dependency["uses_default_features"]
            );
            match seen.get(dep) {
                Some((other, theirs)) if *theirs != shape && name == "rho-plugin-api" => problems
                    .push(format!(
                        "plugin-api/Cargo.toml: {dep} {shape}, but {other} has {theirs}"
                    )),
                Some((other, theirs)) if *theirs != shape && *other == "rho-plugin-api" => problems
                    .push(format!(
                        "plugin-api/Cargo.toml: {dep} {theirs}, but {name} has {shape}"
                    )),
                Some(_) => {}
                None => {
                    seen.insert(dep, (name, shape));
                }
            }
        }
    }
    problems
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
        assert_eq!(needed(&metadata), Some(([1, 89, 0], "b 0.51.0".into())));
        assert_eq!(declared(&metadata), Ok([1, 88, 0]));
        assert_eq!(show([1, 89, 0]), "1.89");
        assert_eq!(parse("1.x"), None);
    }

    #[test]
    fn a_manifest_unlike_the_workspace_is_named() {
        let serde = |req: &str, features: &[&str]| {
            json!({"name": "serde", "req": req, "kind": null, "path": null,
                   "features": features, "uses_default_features": true})
        };
        let package = |name: &str, version: &str, dependency: Value| {
            json!({"name": name, "version": version, "source": null, "edition": "2024",
                   "rust_version": "1.89", "license": "MIT", "dependencies": [dependency]})
        };
        let metadata = json!({"packages": [
            package("rho-runtime", "0.1.0", serde("^1", &["derive", "rc"])),
            package("rho-plugin-api", "0.2.0", serde("^1", &["derive"])),
        ]});
        let problems = disagreements(&metadata).join("\n");
        assert!(
            problems.contains("version: rho-runtime says \"0.1.0\""),
            "{problems}"
        );
        assert!(
            problems.contains("plugin-api/Cargo.toml: serde \"^1\" [\"derive\"]"),
            "{problems}"
        );
        let agreeing = json!({"packages": [
            package("rho-runtime", "0.1.0", serde("^1", &["rc", "derive"])),
            package("rho-plugin-api", "0.1.0", serde("^1", &["derive", "rc"])),
        ]});
        assert_eq!(disagreements(&agreeing), Vec::<String>::new());
    }
}
