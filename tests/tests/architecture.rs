//! ARCHITECTURE.md stays a true map: every source file of the product crates (each top-level
//! folder with a `Cargo.toml` and a `src/`, but `tests/`, `plugins/` and `workspace-hack/`) is
//! named in a row of "Where each concept lives", and every source file or document it names
//! exists.

use std::collections::BTreeSet;
use std::path::Path;

use rho_tests::workspace_dir;

/// The files under `dir`, relative to `root`, with `/` separators.
fn files_under(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The backticked words of `text`.
fn ticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

#[test]
fn every_source_file_has_a_row_and_every_row_names_real_files() {
    let root = workspace_dir();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    assert!(
        map.lines().count() <= 450,
        "ARCHITECTURE.md has {} lines: it is a map (450 at most); move specification to docs/",
        map.lines().count()
    );
    let rows = &map[map
        .find("## Where each concept lives")
        .expect("the section `Where each concept lives`")..];
    let named: BTreeSet<&str> = ticked(rows).filter(|w| w.contains("/src/")).collect();

    let mut sources = BTreeSet::new();
    for entry in std::fs::read_dir(root).expect("the workspace").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = entry.path();
        if ["tests", "plugins", "workspace-hack", "target"].contains(&name.as_str())
            || !dir.join("Cargo.toml").is_file()
            || !dir.join("src").is_dir()
        {
            continue;
        }
        files_under(root, &dir.join("src"), &mut sources);
    }
    assert!(
        sources.len() > 100,
        "too few source files found: {sources:?}"
    );
    let missing: Vec<&String> = sources
        .iter()
        .filter(|f| !named.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "source files no row of ARCHITECTURE.md names: {missing:?}"
    );

    // Every source file and document the whole map names exists.
    let stale: Vec<&str> = ticked(&map)
        .filter(|w| w.contains("/src/") && !w.contains(' '))
        .chain(
            map.split("](")
                .skip(1)
                .filter_map(|rest| rest.split(')').next())
                .filter(|link| link.ends_with(".md")),
        )
        .filter(|path| !root.join(path.trim_end_matches('/')).exists())
        .collect();
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md names files that do not exist: {stale:?}"
    );
}
