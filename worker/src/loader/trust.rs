//! Which files of a plugin directory are plugins, and which of those the host may load.
//!
//! Loading code is executing code. Unless the host opts in, a directory or file that other users
//! can write (group- or world-writable, or owned by a user other than the host's or root), a
//! directory whose path as given passes through a directory others could change (each component
//! is checked, and a link followed only where no one else could have put it), and a symlink that
//! leads outside the directory are refused; the checks are made on the descriptors that are then
//! read ([`crate::loader::open`]). Root-owned directories and files nobody else can write
//! (`/usr/lib/...`) load for a host of any user, as sshd accepts its files.
//! Hidden and temporary files, and files without the platform's library suffix, are not plugins
//! and are ignored silently.

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
