//! `cargo xtask layers`: the measures of the workspace's cut ([3/13]), counted from the sources.
//!
//! - lines of each crate's `src/` (crates outside `tests/` and `plugins/`), and each crate's share:
//!   none over [`MAX_SHARE`] %;
//! - in every crate with a `src/` (plugins and tests included, [4/13]): no circle of file
//!   imports (`crate::...` and `super::...` paths resolved to the files that define them);
//! - in the layered crates (protocol, worker, runtime): no file over [`MAX_FILE_LINES`] lines;
//!   no path to a higher layer from a lower one (protocol uses only the plugin API, the worker
//!   only the protocol, the runtime the protocol and the worker).
//!
//! Prints the figures and every violation; fails when there is one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The largest share of the workspace's lines one crate may hold, percent.
const MAX_SHARE: f64 = 35.0;

/// The longest source file of a layered crate, lines.
const MAX_FILE_LINES: usize = 800;

/// The library names of the workspace's crates a layered crate could name.
const RHO_CRATES: &[&str] = &[
    "rho_plugin_api",
    "rho_protocol",
    "rho_worker",
    "rho_runtime",
    "rho_bridge_nats",
    "rho_devkit",
    "rho_runtime_cli",
];

/// The layered crates, lowest first, with the rho crates each may use.
const LAYERS: &[(&str, &[&str])] = &[
    ("protocol", &["rho_plugin_api"]),
    ("worker", &["rho_plugin_api", "rho_protocol"]),
    ("core", &["rho_plugin_api", "rho_protocol", "rho_worker"]),
];

/// The `.rs` files under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// The module path of `file` in the crate whose `src/` is `src` (`["call", "runner"]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The paths a file names: `crate::a::b...` and `super::...` (resolved), text outside comments.
fn named_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        for (at, _) in code
            .match_indices("crate::")
            .chain(code.match_indices("super::"))
        {
            // A word boundary before it (`rho_crate::` is no path of ours).
            if at > 0 {
                let before = code.as_bytes()[at - 1];
                if before.is_ascii_alphanumeric() || before == b'_' {
                    continue;
                }
            }
            let rest = &code[at..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut parts: Vec<String> = path
                .split("::")
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect();
            if parts.first().map(String::as_str) == Some("crate") {
                parts.remove(0);
            } else {
                // `super` from a file `a/b.rs` (module a::b) is `a`; from `a/mod.rs` (module a)
                // the parent of a.
                let mut base = module.to_vec();
                while parts.first().map(String::as_str) == Some("super") {
                    parts.remove(0);
                    base.pop();
                }
                base.extend(parts);
                parts = base;
            }
            found.push(parts);
        }
    }
    found
}

/// The file of `crate` defining the longest module prefix of `path`.
fn file_of(modules: &BTreeMap<Vec<String>, PathBuf>, path: &[String]) -> Option<PathBuf> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]).cloned())
}

/// The circles of a graph (strongly connected components of more than one node).
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    // Tarjan, iteratively small enough to recurse: the graphs have tens of nodes.
    struct State<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        next: usize,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, node: &'a PathBuf) {
        s.index.insert(node, s.next);
        s.low.insert(node, s.next);
        s.next += 1;
        s.stack.push(node);
        s.on_stack.insert(node);
        if let Some(edges) = s.graph.get(node) {
            for next in edges {
                let Some((next, _)) = s.graph.get_key_value(next) else {
                    continue;
                };
                if !s.index.contains_key(next) {
                    visit(s, next);
                    let low = s.low[next].min(s.low[node]);
                    s.low.insert(node, low);
                } else if s.on_stack.contains(next) {
                    let low = s.index[next].min(s.low[node]);
                    s.low.insert(node, low);
                }
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                component.push(top.clone());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.found
}

/// The crates whose files are checked for circles: every member with a `src/` (the workspace's
/// top-level folders, `tests/` and each of `plugins/`), as `(name, folder)`, sorted.
fn source_crates(workspace: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let mut found = Vec::new();
    let mut folders: Vec<(String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(workspace)
        .map_err(|e| e.to_string())?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "target" || name.starts_with('.') {
            continue;
        }
        if name == "plugins" {
            for plugin in std::fs::read_dir(entry.path())
                .map_err(|e| e.to_string())?
                .flatten()
            {
                let plugin_name = plugin.file_name().to_string_lossy().into_owned();
                folders.push((format!("plugins/{plugin_name}"), plugin.path()));
            }
        } else {
            folders.push((name, entry.path()));
        }
    }
    for (name, dir) in folders {
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            found.push((name, dir));
        }
    }
    found.sort();
    Ok(found)
}

/// One crate's files and the graph of their imports (`crate::` and `super::` paths, the code
/// before each file's tests).
struct Imports {
    files: Vec<(PathBuf, String)>,
    graph: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

impl Imports {
    fn read(src: &Path) -> Result<Self, String> {
        let mut files = Vec::new();
        for file in sources(src) {
            let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
            files.push((file, text));
        }
        let modules: BTreeMap<Vec<String>, PathBuf> = files
            .iter()
            .map(|(f, _)| (module_of(src, f), f.clone()))
            .collect();
        let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for (file, text) in &files {
            let module = module_of(src, file);
            let is_mod = file.file_stem().is_some_and(|s| s == "mod" || s == "lib");
            let edges = graph.entry(file.clone()).or_default();
            for path in named_paths(code_of(text), &module) {
                if let Some(target) = file_of(&modules, &path)
                    && target != *file
                    // A module's own file re-exporting its children is no circle of use.
                    && !(is_mod && target.starts_with(file.parent().unwrap_or(file)))
                {
                    edges.insert(target);
                }
            }
        }
        Ok(Self { files, graph })
    }
}

/// The code of a file before its tests.
fn code_of(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or_default()
}

/// Counts and checks (see the module doc); `Err` lists the violations.
pub fn run(workspace: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    let members = source_crates(workspace)?;
    // Lines per crate: every member with a `src/`, but tests and plugins.
    let mut crates: Vec<(String, usize)> = Vec::new();
    for (name, dir) in &members {
        if name == "tests" || name.starts_with("plugins/") {
            continue;
        }
        let count = sources(&dir.join("src")).iter().map(|f| lines(f)).sum();
        crates.push((name.clone(), count));
    }
    let total: usize = crates.iter().map(|(_, n)| n).sum();
    println!("{:<20} {:>7} {:>6}", "crate", "lines", "share");
    for (name, count) in &crates {
        let share = 100.0 * *count as f64 / total.max(1) as f64;
        println!("{name:<20} {count:>7} {share:>5.1}%");
        if share > MAX_SHARE {
            problems.push(format!(
                "{name} holds {share:.1}% of the lines (at most {MAX_SHARE}%)"
            ));
        }
    }
    println!("{:<20} {total:>7}", "all");
    let shown = |f: &Path| f.strip_prefix(workspace).unwrap_or(f).display().to_string();
    // Every crate: no circle of imports between its files.
    for (name, dir) in &members {
        let imports = Imports::read(&dir.join("src"))?;
        let found = circles(&imports.graph);
        let longest = imports
            .files
            .iter()
            .map(|(f, t)| (t.lines().count(), f))
            .max()
            .map(|(n, f)| format!("{n} lines ({})", shown(f)))
            .unwrap_or_default();
        println!(
            "{name:<20} {} files, the longest {longest}, {} import circle(s)",
            imports.files.len(),
            found.len()
        );
        for circle in found {
            let names: Vec<String> = circle.iter().map(|f| shown(f)).collect();
            problems.push(format!("an import circle: {}", names.join(" <-> ")));
        }
    }
    // The layered crates: short files, and no use of a higher layer.
    for (krate, allowed) in LAYERS {
        for file in sources(&workspace.join(krate).join("src")) {
            let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
            let n = text.lines().count();
            if n > MAX_FILE_LINES {
                problems.push(format!(
                    "{} has {n} lines (at most {MAX_FILE_LINES})",
                    shown(&file)
                ));
            }
            // The rho crates its code names (comments aside).
            let uncommented: String = code_of(&text)
                .lines()
                .map(|l| l.split("//").next().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n");
            for word in uncommented.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                if RHO_CRATES.contains(&word)
                    && !allowed.contains(&word)
                    && word != krate_lib(krate)
                {
                    problems.push(format!(
                        "{} uses {word}, a crate above its layer",
                        shown(&file)
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        println!("every measure holds");
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The library name of a layered crate's own package.
fn krate_lib(krate: &str) -> &'static str {
    match krate {
        "protocol" => "rho_protocol",
        "worker" => "rho_worker",
        _ => "rho_runtime",
    }
}

#[cfg(test)]
mod tests {
    use super::run;
    use std::path::Path;

    /// Writes `files` (path, text) under a fresh directory.
    fn workspace(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("rho-layers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap_or(&root)).expect("a temporary directory");
            std::fs::write(path, text).expect("a temporary file");
        }
        root
    }

    #[test]
    fn this_workspace_keeps_its_measures() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        if let Err(problems) = run(&root) {
            panic!("the workspace's cut does not hold:\n{problems}");
        }
    }

    #[test]
    fn circles_upward_names_long_files_and_big_shares_are_found() {
        let long = "fn f() {}\n".repeat(801);
        let root = workspace(
            "bad",
            &[
                ("protocol/Cargo.toml", ""),
                ("protocol/src/lib.rs", "pub use rho_runtime::Host;\n"),
                ("worker/Cargo.toml", ""),
                ("worker/src/lib.rs", "mod a;\nmod b;\n"),
                ("worker/src/a.rs", "use crate::b::B;\n"),
                ("worker/src/b.rs", "use super::a::A; // crate::nothing\n"),
                ("core/Cargo.toml", ""),
                ("core/src/lib.rs", &long),
                ("cli/Cargo.toml", ""),
                ("cli/src/main.rs", "mod serve;\nmod http;\n"),
                ("cli/src/serve.rs", "use crate::http::start;\n"),
                (
                    "cli/src/http.rs",
                    "pub fn start() { crate::serve::main() }\n",
                ),
                ("plugins/echo/Cargo.toml", ""),
                ("plugins/echo/src/lib.rs", "mod a;\nmod b;\n"),
                ("plugins/echo/src/a.rs", "use super::b::B;\n"),
                ("plugins/echo/src/b.rs", "use crate::a::A;\n"),
            ],
        );
        let problems = run(&root).expect_err("every measure is broken");
        let _ = std::fs::remove_dir_all(&root);
        assert!(
            problems.contains("protocol/src/lib.rs uses rho_runtime"),
            "{problems}"
        );
        assert!(
            problems.contains("an import circle: worker/src/a.rs <-> worker/src/b.rs"),
            "{problems}"
        );
        // Circles count in every crate, not only the layered ones.
        assert!(
            problems.contains("an import circle: cli/src/http.rs <-> cli/src/serve.rs"),
            "{problems}"
        );
        assert!(
            problems.contains("an import circle: plugins/echo/src/a.rs <-> plugins/echo/src/b.rs"),
            "{problems}"
        );
        assert!(
            problems.contains("core/src/lib.rs has 801 lines"),
            "{problems}"
        );
        assert!(problems.contains("core holds"), "{problems}");
    }

    #[test]
    fn a_use_of_a_lower_layer_and_a_tree_of_imports_pass() {
        // Four crates of six lines each: a quarter of the lines each.
        let pad = "// .\n".repeat(5);
        let protocol = format!("pub use rho_plugin_api::Tool;\n{pad}");
        let core = format!("use rho_worker::A;\n{pad}");
        let cli = format!("fn main() {{}}\n{pad}");
        let root = workspace(
            "good",
            &[
                ("protocol/Cargo.toml", ""),
                ("protocol/src/lib.rs", &protocol),
                ("worker/Cargo.toml", ""),
                (
                    "worker/src/lib.rs",
                    "mod a;\nmod b;\npub use crate::a::A;\n",
                ),
                (
                    "worker/src/a.rs",
                    "use crate::b::B;\nuse rho_protocol::Outcome;\n",
                ),
                ("worker/src/b.rs", "pub struct B;\n"),
                ("core/Cargo.toml", ""),
                ("core/src/lib.rs", &core),
                ("cli/Cargo.toml", ""),
                ("cli/src/main.rs", &cli),
            ],
        );
        let result = run(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(result, Ok(()));
    }
}
