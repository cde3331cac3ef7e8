//! Errors of the host library. Each displays as one line for a person: what, which file or tool,
//! why. Details go to `tracing`.

use std::path::PathBuf;

/// Why a plugin file did not load. The other plugins of its directory load and serve regardless.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("{}: cannot read: {}", shown(path), one_line(reason))]
    Read {
        /// The plugin file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// The file is empty.
    #[error("{}: empty file, not a plugin library", shown(path))]
    Empty {
        /// The plugin file.
        path: PathBuf,
    },
    /// The private copy could not be written.
    #[error(
        "{}: cannot make a private copy to load: {}",
        shown(path),
        one_line(reason)
    )]
    Copy {
        /// The plugin file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// The dynamic loader refused the file (garbage, truncated, wrong architecture...).
    #[error("{}: not a loadable library: {}", shown(path), one_line(reason))]
    Open {
        /// The plugin file.
        path: PathBuf,
        /// The loader's first line.
        reason: String,
    },
    /// A library, but without rho's root module symbol.
    #[error(
        "{}: a library but not a rho plugin (it exports no root module)",
        shown(path)
    )]
    NotAPlugin {
        /// The plugin file.
        path: PathBuf,
    },
    /// Built against an incompatible `rho-plugin-api`.
    #[error("{}: incompatible plugin: {}", shown(path), one_line(reason))]
    Incompatible {
        /// The plugin file.
        path: PathBuf,
        /// One line; the full report is logged.
        reason: String,
    },
    /// The plugin reports an interface version this host does not speak.
    #[error(
        "{}: interface version {found}, this host speaks {oldest} to {newest}",
        shown(path)
    )]
    InterfaceVersion {
        /// The plugin file.
        path: PathBuf,
        /// The plugin's version.
        found: u32,
        /// The oldest version the host loads.
        oldest: u32,
        /// The host's own version.
        newest: u32,
    },
    /// The plugin's `describe` failed.
    #[error(
        "{}: the plugin failed to describe itself: {}",
        shown(path),
        one_line(reason)
    )]
    Describe {
        /// The plugin file.
        path: PathBuf,
        /// What the plugin said.
        reason: String,
    },
    /// The file or its directory is refused by the security policy.
    #[error("{}: refused: {}", shown(path), one_line(reason))]
    Refused {
        /// The plugin file or directory.
        path: PathBuf,
        /// Why (writable by others, owned by another user, a symlink leading outside...).
        reason: String,
    },
    /// The plugin asks for a capability the host does not grant it (isolated plugins).
    #[error(
        "{}: refused: the plugin asks for {}, which this host does not grant it",
        shown(path),
        one_line(asked)
    )]
    NotGranted {
        /// The plugin file.
        path: PathBuf,
        /// The first capability asked for and not granted, with the grant that would allow it:
        /// `network (grants.network)`.
        asked: String,
    },
    /// A WebAssembly component could not be compiled, instantiated or described.
    #[error("{}: not a usable component: {}", shown(path), one_line(reason))]
    Component {
        /// The component file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// An isolated worker could not load or describe the plugin.
    #[error("{}: the isolated worker failed: {}", shown(path), one_line(reason))]
    Worker {
        /// The plugin file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// The most characters of a path or a reason an error line shows; the whole text goes to `tracing`.
pub const MAX_SHOWN: usize = 240;

/// `text` fit for one line: control characters escaped (`\n` for a newline: a file name cannot
/// split a line or forge another), cut to `MAX_SHOWN` (240) characters with `...`.
pub fn one_line(text: &str) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == MAX_SHOWN {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A path fit for one line (see [`one_line`]).
pub fn shown(path: &std::path::Path) -> String {
    one_line(&path.to_string_lossy())
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
            | LoadError::NotGranted { path, .. }
            | LoadError::Component { path, .. }
            | LoadError::Worker { path, .. } => path,
        }
    }
}
