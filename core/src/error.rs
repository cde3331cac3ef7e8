//! Errors of the host library. Each displays as one line for a person: what, which file or tool,
//! why. Details go to `tracing`.

use std::path::PathBuf;

/// Why a plugin file did not load. The other plugins of its directory load and serve regardless.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{}: cannot read: {reason}", path.display())]
    Read {
        /// The plugin file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// The file is empty.
    #[error("{}: empty file, not a plugin library", path.display())]
    Empty {
        /// The plugin file.
        path: PathBuf,
    },
    /// The private copy could not be written.
    #[error("{}: cannot make a private copy to load: {reason}", path.display())]
    Copy {
        /// The plugin file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// The dynamic loader refused the file (garbage, truncated, wrong architecture...).
    #[error("{}: not a loadable library: {reason}", path.display())]
    Open {
        /// The plugin file.
        path: PathBuf,
        /// The loader's first line.
        reason: String,
    },
    /// A library, but without rho's root module symbol.
    #[error("{}: a library but not a rho plugin (it exports no root module)", path.display())]
    NotAPlugin {
        /// The plugin file.
        path: PathBuf,
    },
    /// Built against an incompatible `rho-plugin-api`.
    #[error("{}: incompatible plugin: {reason}", path.display())]
    Incompatible {
        /// The plugin file.
        path: PathBuf,
        /// One line; the full report is logged.
        reason: String,
    },
    /// The plugin reports another interface version.
    #[error("{}: interface version {found}, this host speaks {expected}", path.display())]
    InterfaceVersion {
        /// The plugin file.
        path: PathBuf,
        /// The plugin's version.
        found: u32,
        /// The host's version.
        expected: u32,
    },
    /// The plugin's `describe` failed.
    #[error("{}: the plugin failed to describe itself: {reason}", path.display())]
    Describe {
        /// The plugin file.
        path: PathBuf,
        /// What the plugin said.
        reason: String,
    },
    /// The file or its directory is refused by the security policy.
    #[error("{}: refused: {reason}", path.display())]
    Refused {
        /// The plugin file or directory.
        path: PathBuf,
        /// Why (writable by others, owned by another user, a symlink leading outside...).
        reason: String,
    },
    /// An isolated worker could not load or describe the plugin.
    #[error("{}: the isolated worker failed: {reason}", path.display())]
    Worker {
        /// The plugin file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

impl LoadError {
    /// The file the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            LoadError::Read { path, .. }
            | LoadError::Empty { path }
            | LoadError::Copy { path, .. }
            | LoadError::Open { path, .. }
            | LoadError::NotAPlugin { path }
            | LoadError::Incompatible { path, .. }
            | LoadError::InterfaceVersion { path, .. }
            | LoadError::Describe { path, .. }
            | LoadError::Refused { path, .. }
            | LoadError::Worker { path, .. } => path,
        }
    }
}
