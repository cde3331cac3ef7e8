//! `cargo xtask dev NAME`: rebuild a plugin on every save and install it where a host watches.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify_debouncer_full::new_debouncer;
use notify_debouncer_full::notify::RecursiveMode;

use crate::plugins::{self, PluginCrate};

fn cycle(plugin: &PluginCrate, out: &Path) {
    let started = Instant::now();
    match plugins::build(std::slice::from_ref(plugin), &[], false).and_then(|libs| {
        libs.into_iter()
            .next()
            .ok_or_else(|| "nothing built".to_owned())
    }) {
        Ok(lib) => {
            let built = started.elapsed();
            let installing = Instant::now();
            match plugins::install(&lib, out) {
                Ok(path) => eprintln!(
                    "[dev] {}: built in {:.2} s, installed in {:.1} ms -> {}",
                    plugin.name,
                    built.as_secs_f64(),
                    installing.elapsed().as_secs_f64() * 1e3,
                    path.display()
                ),
                Err(e) => eprintln!("[dev] {}: install failed: {e}", plugin.name),
            }
        }
        Err(e) => eprintln!("[dev] {e} (after {:.2} s)", started.elapsed().as_secs_f64()),
    }
}

/// Builds and installs `name`, then again after every change to its sources, until Ctrl-C.
pub fn run(name: &str, out: &Path) -> Result<(), String> {
    let plugin = plugins::discover()?
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            format!("no plugin crate `{name}` in the workspace (see `cargo xtask new-plugin`)")
        })?;
    eprintln!(
        "[dev] watching {} -> {}",
        plugin.dir.display(),
        out.display()
    );
    cycle(&plugin, out);
    let (tx, rx) = mpsc::channel();
    let mut debouncer = new_debouncer(Duration::from_millis(100), None, move |result| {
        let _ = tx.send(result);
    })
    .map_err(|e| format!("cannot watch: {e}"))?;
    for watched in ["src", "Cargo.toml", "build.rs"] {
        let path = plugin.dir.join(watched);
        if path.exists() {
            let mode = if path.is_dir() {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            debouncer
                .watch(&path, mode)
                .map_err(|e| format!("cannot watch {}: {e}", path.display()))?;
        }
    }
    while let Ok(result) = rx.recv() {
        match result {
            Ok(events) if events.iter().any(|e| !e.kind.is_access()) => cycle(&plugin, out),
            Ok(_) => {}
            Err(errors) => {
                for e in errors {
                    eprintln!("[dev] watch error: {e}");
                }
            }
        }
    }
    Ok(())
}
