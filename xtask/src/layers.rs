//! `cargo xtask layers`: the measures of the workspace's cut ([3/13]), counted from the sources.
//!
//! - lines of each crate's `src/` (crates outside `tests/` and `plugins/`), and each crate's share:
//!   none over [`MAX_SHARE`] %;
//! - in every crate with a `src/` (plugins and tests included, [4/13]): no circle of file
//!   imports (`crate::...`, `super::...` and `self::...` paths, `use` groups expanded
//!   (`crate::{a::A, B}`), each resolved to the file that defines it: through a module's
//!   re-exports (`pub use content::Block` in `lib.rs`) to the file of the item's definition);
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

/// `text` without its comments (line comments; block comments are rare enough in this code
/// base to be read as code).
fn uncommented(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A path as a file wrote it, resolved against the file's module: `crate::a::b` is `[a, b]`;
/// `super::x` from module `a::b` is `[a, x]`; `self::x` is the module's own `x`. `None` for a
/// path that starts elsewhere (another crate, or a name the module imported).
fn resolved(parts: &[&str], module: &[String]) -> Option<Vec<String>> {
    let (first, rest) = parts.split_first()?;
    let mut base = match *first {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => {
            let mut base = module.to_vec();
            base.pop();
            base
        }
        _ => return None,
    };
    let mut rest = rest;
    while rest.first() == Some(&"super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().map(|p| (*p).to_owned()));
    Some(base)
}

/// The paths of a `use` tree (`a::{b, c::{d as e, self}, f::*}`), each with the name it binds
/// (`None` for a glob): `[a, b] b`, `[a, c, d] e`, `[a, c] c`, `[a, f] *`.
fn use_tree(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    fn expand(prefix: &[String], tree: &str, out: &mut Vec<(Vec<String>, Option<String>)>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head: Vec<String> = tree[..open]
                .split("::")
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect();
            let inner = tree[open + 1..]
                .trim_end()
                .strip_suffix('}')
                .unwrap_or(&tree[open + 1..]);
            let mut base = prefix.to_vec();
            base.extend(head);
            // Split the group at its top-level commas.
            let (mut depth, mut start) = (0usize, 0usize);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth = depth.saturating_sub(1),
                    ',' if depth == 0 => {
                        expand(&base, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand(&base, &inner[start..], out);
            return;
        }
        if tree.is_empty() {
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((path, alias)) => (path.trim(), Some(alias.trim().to_owned())),
            None => (tree, None),
        };
        let mut parts = prefix.to_vec();
        parts.extend(
            path.split("::")
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
        );
        if parts.last().map(String::as_str) == Some("self") {
            parts.pop();
        }
        let name = match parts.last().map(String::as_str) {
            Some("*") => None,
            _ => alias.or_else(|| parts.last().cloned()),
        };
        out.push((parts, name));
    }
    let mut out = Vec::new();
    expand(&[], tree, &mut out);
    out
}

/// The `use` statements of `code` (comments removed): `(public, tree)`.
fn use_statements(code: &str) -> Vec<(bool, String)> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find("use ") {
        let start = at + i;
        at = start + 4;
        // `use` as a word starting a statement: after a line start, `;`, `{`, `}` or `pub ...`.
        let before = code[..start].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        let starts = before.is_empty()
            || before.ends_with([';', '{', '}', ']'])
            || before.ends_with("pub")
            || before.ends_with(')');
        if !starts
            || code[..start]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            break;
        };
        found.push((public, code[at..at + end].to_owned()));
        at += end + 1;
    }
    found
}

/// The crate paths a file's code names, resolved against its module: those of its `use`
/// statements (groups expanded) and those written inline (`crate::x::f()`).
fn named_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (_, tree) in use_statements(code) {
        for (path, _) in use_tree(&tree) {
            let parts: Vec<&str> = path.iter().map(String::as_str).collect();
            if let Some(path) = resolved(&parts, module) {
                found.push(path);
            }
        }
    }
    for (at, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
        .chain(code.match_indices("self::"))
    {
        // A word boundary before it (`rho_crate::` is no path of ours).
        if at > 0 {
            let before = code.as_bytes()[at - 1];
            if before.is_ascii_alphanumeric() || before == b'_' || before == b':' {
                continue;
            }
        }
        let path: String = code[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
        if let Some(path) = resolved(&parts, module) {
            found.push(path);
        }
    }
    found
}

/// What a module's file re-exports (`pub use`): each name it binds, with the path it binds it
/// to (resolved; relative paths through the module's child modules).
type Reexports = BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>;

fn reexports_of(
    code: &str,
    module: &[String],
    modules: &BTreeMap<Vec<String>, PathBuf>,
) -> BTreeMap<String, Vec<String>> {
    let mut found = BTreeMap::new();
    for (public, tree) in use_statements(code) {
        if !public {
            continue;
        }
        for (path, name) in use_tree(&tree) {
            let Some(name) = name else { continue };
            let parts: Vec<&str> = path.iter().map(String::as_str).collect();
            let target = resolved(&parts, module).or_else(|| {
                // `pub use child::X`: a path through a child module of this one.
                let mut child = module.to_vec();
                child.push(path.first()?.clone());
                modules.contains_key(&child).then(|| {
                    let mut full = module.to_vec();
                    full.extend(path.iter().cloned());
                    full
                })
            });
            if let Some(target) = target {
                found.insert(name, target);
            }
        }
    }
    found
}

/// The file defining what `path` names: the file of its longest module prefix, or, when the
/// next part is a name that module re-exports, the file of what the re-export names (followed
/// through further re-exports, at most 8 deep).
fn file_of(
    modules: &BTreeMap<Vec<String>, PathBuf>,
    reexports: &Reexports,
    path: &[String],
) -> Option<PathBuf> {
    let mut path = path.to_vec();
    for _ in 0..8 {
        let n = (0..=path.len())
            .rev()
            .find(|n| modules.contains_key(&path[..*n]))?;
        let followed = path
            .get(n)
            .and_then(|name| reexports.get(&path[..n])?.get(name))
            .filter(|target| target.as_slice() != &path[..=n]);
        match followed {
            Some(target) => {
                let mut next = target.clone();
                next.extend(path[n + 1..].iter().cloned());
                path = next;
            }
            None => return modules.get(&path[..n]).cloned(),
        }
    }
    None
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

/// The library name of the crate in `dir` (its package's name, `-` as `_`), if it has one.
fn library_name(dir: &Path) -> Option<String> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
    let package = manifest.split("[package]").nth(1)?;
    let line = package
        .lines()
        .take_while(|l| !l.trim_start().starts_with('['))
        .find(|l| l.trim_start().starts_with("name"))?;
    let name = line.split('"').nth(1)?;
    Some(name.replace('-', "_"))
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
        let codes: Vec<(PathBuf, Vec<String>, String)> = files
            .iter()
            .map(|(f, t)| (f.clone(), module_of(src, f), uncommented(code_of(t))))
            .collect();
        let reexports: Reexports = codes
            .iter()
            .map(|(_, module, code)| (module.clone(), reexports_of(code, module, &modules)))
            .collect();
        let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for (file, module, code) in &codes {
            let is_mod = file.file_stem().is_some_and(|s| s == "mod" || s == "lib");
            let edges = graph.entry(file.clone()).or_default();
            for path in named_paths(code, module) {
                if let Some(target) = file_of(&modules, &reexports, &path)
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
    // Every rho crate of the workspace a layered crate could name (by its library name).
    let rho_crates: BTreeSet<String> = members
        .iter()
        .filter_map(|(_, dir)| library_name(dir))
        .filter(|name| name.starts_with("rho_"))
        .collect();
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
            let code = uncommented(code_of(&text));
            for word in code.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                if rho_crates.contains(word) && !allowed.contains(&word) && word != krate_lib(krate)
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
                (
                    "protocol/Cargo.toml",
                    "[package]\nname = \"rho-protocol\"\n",
                ),
                ("protocol/src/lib.rs", "pub use rho_runtime::Host;\n"),
                ("worker/Cargo.toml", "[package]\nname = \"rho-worker\"\n"),
                ("worker/src/lib.rs", "mod a;\nmod b;\n"),
                ("worker/src/a.rs", "use crate::b::B;\n"),
                ("worker/src/b.rs", "use super::a::A; // crate::nothing\n"),
                ("core/Cargo.toml", "[package]\nname = \"rho-runtime\"\n"),
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
                // Through the root's re-exports and a `use` group, as `crate::Block` in
                // plugin-api's answer.rs and `crate::Image` in its content.rs were.
                ("plugins/api/Cargo.toml", ""),
                (
                    "plugins/api/src/lib.rs",
                    "mod answer;\nmod content;\npub use answer::{Answer, Image as Picture};\npub use content::Block;\n",
                ),
                (
                    "plugins/api/src/answer.rs",
                    "use crate::{Block, other::Thing};\npub struct Image;\n",
                ),
                (
                    "plugins/api/src/content.rs",
                    "use crate::{\n    Picture,\n};\npub enum Block {}\n",
                ),
                // A group through `self` and `super` in a nested module.
                ("plugins/deep/Cargo.toml", ""),
                ("plugins/deep/src/lib.rs", "mod m;\n"),
                (
                    "plugins/deep/src/m/mod.rs",
                    "mod x;\nmod y;\nuse self::{x::X};\n",
                ),
                (
                    "plugins/deep/src/m/x.rs",
                    "use super::{y::{self, Y}};\npub struct X;\n",
                ),
                ("plugins/deep/src/m/y.rs", "pub struct Y(super::x::X);\n"),
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
            problems.contains(
                "an import circle: plugins/api/src/answer.rs <-> plugins/api/src/content.rs"
            ),
            "{problems}"
        );
        assert!(
            problems
                .contains("an import circle: plugins/deep/src/m/x.rs <-> plugins/deep/src/m/y.rs"),
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
                (
                    "protocol/Cargo.toml",
                    "[package]\nname = \"rho-protocol\"\n",
                ),
                ("protocol/src/lib.rs", &protocol),
                ("worker/Cargo.toml", "[package]\nname = \"rho-worker\"\n"),
                (
                    "worker/src/lib.rs",
                    "mod a;\nmod b;\npub use crate::a::A;\n",
                ),
                (
                    "worker/src/a.rs",
                    "use crate::b::B;\nuse rho_protocol::Outcome;\n",
                ),
                ("worker/src/b.rs", "pub struct B;\n"),
                ("core/Cargo.toml", "[package]\nname = \"rho-runtime\"\n"),
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
