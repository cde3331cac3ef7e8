//! Which files of a plugin directory are plugins, and which of those the host may load.
//!
//! Loading code is executing code. Unless the host opts in, a directory or file that other users
//! can write (group- or world-writable, or owned by another user than the host's) is refused, and
//! so is a symlink that leads outside the directory. Hidden and temporary files, and files without
//! the platform's library suffix, are not plugins and are ignored silently.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::LoadError;

/// Whether the host checks who can write its plugin files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// Refuse directories and files other users can write (the default).
    #[default]
    OwnerOnly,
    /// Load whatever is there (the host opted in explicitly).
    AnyWriter,
}

/// Whether `name` is a plugin file name: the platform's library suffix, not hidden, not a
/// temporary file.
pub fn is_plugin_name(name: &str) -> bool {
    let temporary = name.ends_with('~')
        || name.ends_with(".tmp")
        || name.ends_with(".part")
        || name.ends_with(".swp")
        || name.contains(".tmp.");
    !name.starts_with('.') && !temporary && name.ends_with(std::env::consts::DLL_SUFFIX)
}

fn writable_by_others(path: &Path, meta: &std::fs::Metadata) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Some(format!(
            "{} is owned by uid {}, not by this host's uid {me}",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "{} is writable by {} (mode {:o})",
            path.display(),
            if meta.mode() & 0o002 != 0 {
                "everyone"
            } else {
                "its group"
            },
            meta.mode() & 0o777
        ));
    }
    None
}

/// Checks the directory itself.
pub fn check_dir(dir: &Path, trust: Trust) -> Result<PathBuf, LoadError> {
    let refused = |reason: String| LoadError::Refused {
        path: dir.to_owned(),
        reason,
    };
    let canonical = dir
        .canonicalize()
        .map_err(|e| refused(format!("cannot open the plugin directory: {e}")))?;
    let meta = std::fs::metadata(&canonical)
        .map_err(|e| refused(format!("cannot open the plugin directory: {e}")))?;
    if !meta.is_dir() {
        return Err(refused("not a directory".into()));
    }
    if trust == Trust::OwnerOnly
        && let Some(reason) = writable_by_others(dir, &meta)
    {
        return Err(refused(format!(
            "{reason}; other users could plant code in it (fix its permissions, or opt in to trusting it)"
        )));
    }
    Ok(canonical)
}

/// Checks one plugin file of `canonical_dir`; returns the path to read it from.
pub fn check_file(path: &Path, canonical_dir: &Path, trust: Trust) -> Result<PathBuf, LoadError> {
    let refused = |reason: String| LoadError::Refused {
        path: path.to_owned(),
        reason,
    };
    let link = std::fs::symlink_metadata(path).map_err(|e| refused(format!("cannot stat: {e}")))?;
    let target = if link.file_type().is_symlink() {
        let target = path
            .canonicalize()
            .map_err(|e| refused(format!("a symlink that leads nowhere: {e}")))?;
        if !target.starts_with(canonical_dir) {
            return Err(refused(format!(
                "a symlink that leads outside the plugin directory (to {})",
                target.display()
            )));
        }
        target
    } else {
        path.to_owned()
    };
    let meta = std::fs::metadata(&target).map_err(|e| refused(format!("cannot stat: {e}")))?;
    if !meta.is_file() {
        return Err(refused("not a regular file".into()));
    }
    if trust == Trust::OwnerOnly
        && let Some(reason) = writable_by_others(&target, &meta)
    {
        return Err(refused(format!(
            "{reason}; another user could replace its code (fix its permissions, or opt in to trusting it)"
        )));
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names() {
        assert!(is_plugin_name("libecho.so"));
        assert!(!is_plugin_name(".libecho.so"));
        assert!(!is_plugin_name("libecho.so.tmp"));
        assert!(!is_plugin_name("libecho.tmp.so"));
        assert!(!is_plugin_name("libecho.so~"));
        assert!(!is_plugin_name("README.md"));
    }
}
