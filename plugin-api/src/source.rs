//! This crate's own source, as it was built into the program that holds it: its manifest,
//! every file under `src/` and its WIT world (`wit/`). `rho plugin new` writes it out (once per version, into rho's data
//! directory) so that a new plugin crate builds against exactly the API `rho` speaks, before the
//! crate is on crates.io and wherever `rho` was built.
//!
//! ```
//! let (path, text) = rho_plugin_api::source::FILES[0];
//! assert_eq!(path, "Cargo.toml");
//! assert!(text.contains(&format!("version = \"{}\"", rho_plugin_api::source::VERSION)));
//! ```

/// The crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `(path in the crate, text)` of the manifest and of every source file.
pub const FILES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../Cargo.toml")),
    ("src/answer.rs", include_str!("answer.rs")),
    ("src/ask.rs", include_str!("ask.rs")),
    ("src/content.rs", include_str!("content.rs")),
    ("src/ctx.rs", include_str!("ctx.rs")),
    ("src/declare.rs", include_str!("declare.rs")),
    ("src/ffi.rs", include_str!("ffi.rs")),
    ("src/glue.rs", include_str!("glue.rs")),
    ("src/lib.rs", include_str!("lib.rs")),
    ("src/log.rs", include_str!("log.rs")),
    ("src/source.rs", include_str!("source.rs")),
    ("src/tool.rs", include_str!("tool.rs")),
    ("src/wasm/bindings.rs", include_str!("wasm/bindings.rs")),
    ("src/wasm/host.rs", include_str!("wasm/host.rs")),
    ("src/wasm/mod.rs", include_str!("wasm/mod.rs")),
    ("wit/plugin.wit", include_str!("../wit/plugin.wit")),
];

/// The WIT world a component plugin implements (`wit/plugin.wit`): hosts bind the same text.
pub const WIT: &str = include_str!("../wit/plugin.wit");

#[cfg(test)]
mod tests {
    use super::FILES;

    #[test]
    fn every_source_file_is_carried() {
        fn walk(dir: &std::path::Path, under: &str, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = format!("{under}/{}", entry.file_name().to_string_lossy());
                if entry.path().is_dir() {
                    walk(&entry.path(), &name, out);
                } else {
                    out.push(name);
                }
            }
        }
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut on_disk = Vec::new();
        walk(&src, "src", &mut on_disk);
        on_disk.sort();
        let carried: Vec<String> = FILES[1..]
            .iter()
            .map(|(p, _)| (*p).to_owned())
            .filter(|p| p.starts_with("src/"))
            .collect();
        assert_eq!(carried, on_disk);
    }
}
