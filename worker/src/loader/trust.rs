//! Which files of a plugin directory are plugins, and which of those the host may load.
//!
//! Loading code is executing code. Unless the host opts in, a directory or file that other users
//! can write (group- or world-writable, or owned by a user other than the host's or root), a
//! directory whose path as given passes through a directory others could change (each component
//! is checked, and a link followed only where no one else could have put it), and a symlink that
//! leads outside the directory are refused; the checks are made on the descriptors that are then
//! read ([`crate::loader::open`]). Root-owned directories and files nobody else can write
//! (`/usr/lib/...`) load for a host of any user, as sshd accepts its files.
//! Hidden and temporary files, and files without the platform's library suffix (or `.wasm`, for a
//! host that runs components), are not plugins and are ignored silently.

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

/// The kind of a plugin file, told by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// A native library (the platform's library suffix: `.so`).
    Native,
    /// A WebAssembly component (`.wasm`).
    Component,
}

/// The suffix of component files.
pub const COMPONENT_SUFFIX: &str = ".wasm";

/// The kind of plugin file `name` is, if it is one: the platform's library suffix (or `.wasm`
/// when `components` is set), not hidden, not a temporary file.
pub fn plugin_kind(name: &str, components: bool) -> Option<PluginKind> {
    let temporary = name.ends_with('~')
        || name.ends_with(".tmp")
        || name.ends_with(".part")
        || name.ends_with(".swp")
        || name.contains(".tmp.");
    if name.starts_with('.') || temporary {
        return None;
    }
    if name.ends_with(std::env::consts::DLL_SUFFIX) {
        Some(PluginKind::Native)
    } else if components && name.ends_with(COMPONENT_SUFFIX) {
        Some(PluginKind::Component)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names() {
        assert_eq!(plugin_kind("libecho.so", false), Some(PluginKind::Native));
        assert_eq!(plugin_kind(".libecho.so", true), None);
        assert_eq!(plugin_kind("libecho.so.tmp", true), None);
        assert_eq!(plugin_kind("libecho.tmp.so", true), None);
        assert_eq!(plugin_kind("libecho.so~", true), None);
        assert_eq!(plugin_kind("README.md", true), None);
        assert_eq!(plugin_kind("echo.wasm", true), Some(PluginKind::Component));
        assert_eq!(plugin_kind("echo.wasm", false), None);
        assert_eq!(plugin_kind(".echo.wasm", true), None);
        assert_eq!(plugin_kind("echo.wasm.part", true), None);
    }
}
