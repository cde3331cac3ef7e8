//! Where `rho serve` journals by default, and how `rho watch --attach` finds the newest journal.
//!
//! Each server writes its own file, `serve-<unix ms>-<pid>.jsonl` under `$XDG_STATE_HOME/rho`
//! (`~/.local/state/rho`; the directory is made with mode 0700), so two servers never share one by
//! default. A path given with `--journal` or `serve.journal` is appended to; when another server
//! holds it, this server says so and journals to its own default path instead. The directory
//! keeps the newest [`KEPT`] default journals; older ones no server holds are removed.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The directory default journals go in.
pub fn dir() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local").join("state"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("rho")
}

/// How many default journals the directory keeps.
pub const KEPT: usize = 32;

/// The files of `dir` named `<prefix>...<suffix>`, most recently modified first.
pub fn newest_first(dir: &Path, prefix: &str, suffix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    found.sort_by(|a, b| b.cmp(a));
    found.into_iter().map(|(_, path)| path).collect()
}

/// The default journals in `dir`, newest first.
fn journals_in(dir: &Path) -> Vec<PathBuf> {
    newest_first(dir, "serve-", ".jsonl")
}

/// Makes `dir` (and its missing parents) with mode 0700 if it is not there.
pub fn make_private(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot make the directory {}: {e}", dir.display()))
}

/// A fresh default journal path for this server (its directory made, mode 0700); the oldest
/// default journals beyond [`KEPT`] that no server holds are removed.
pub fn unique() -> Result<PathBuf, String> {
    let dir = dir();
    make_private(&dir)?;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    for old in journals_in(&dir).into_iter().skip(KEPT - 1) {
        if !in_use(&old) {
            let _ = std::fs::remove_file(old);
        }
    }
    Ok(dir.join(format!("serve-{ms}-{}.jsonl", std::process::id())))
}

/// Whether another process holds `path`'s journal lock (a running server writes it).
pub fn in_use(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    // SAFETY: flock on our own descriptor; closing the file releases a lock we took.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) != 0 }
}

/// The journal `rho serve` writes: `wanted` unless another server holds it (then, with a line
/// saying so, a fresh default path), or a fresh default path without one.
pub fn for_server(wanted: Option<&Path>) -> Result<PathBuf, String> {
    match wanted {
        Some(path) if !in_use(path) => Ok(path.to_owned()),
        Some(path) => {
            let own = unique()?;
            eprintln!(
                "rho: the journal {} is in use by another server; this one journals to {}",
                path.display(),
                own.display()
            );
            Ok(own)
        }
        None => unique(),
    }
}

/// The default journal of the running server that started last, else the newest of all: what
/// `rho watch --attach` without a path follows. Servers are ordered by when they started (the
/// time in the file's name), not by their last write: an older server that keeps writing is
/// not the newer one.
pub fn newest_running() -> Result<PathBuf, String> {
    let running = journals_in(&dir())
        .into_iter()
        .filter(|path| in_use(path))
        .max_by_key(|path| started_ms(path));
    match running {
        Some(path) => Ok(path),
        None => newest(),
    }
}

/// When the server of the default journal `path` started (Unix ms, from its name
/// `serve-<ms>-<pid>.jsonl`); `None` for a path of another name.
pub fn started_ms(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("serve-")?.strip_suffix(".jsonl")?;
    rest.split_once('-')?.0.parse().ok()
}

/// The most recently modified default journal.
pub fn newest() -> Result<PathBuf, String> {
    let dir = dir();
    journals_in(&dir).into_iter().next().ok_or_else(|| {
        format!(
            "no journal to attach to in {} (start `rho serve` first)",
            dir.display()
        )
    })
}
