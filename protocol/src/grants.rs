//! What an isolated plugin may do beyond the sandbox's defaults ([`Grants`]), and each granted
//! path as the host resolved it ([`GrantPath`], in the worker's `Start` frame). How the host
//! resolves them, and how a worker puts them in force, is the worker crate's.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// System paths every plugin may read (and execute from, where child processes are granted).
pub const SYSTEM_READ: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc",
];

/// What an isolated plugin may do beyond the defaults. Without grants a plugin reads system
/// files (`/usr`, `/lib*`, `/bin`, `/sbin`, `/etc`, `/opt`, its own `/proc`), writes only its scratch
/// directory (`/tmp` inside the sandbox), has no network, starts no processes, and sees only the
/// environment keys in `env`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Grants {
    /// Paths (and everything beneath them) the plugin may read.
    pub read: Vec<PathBuf>,
    /// Paths (and everything beneath them) the plugin may read and write.
    pub write: Vec<PathBuf>,
    /// Network access (TCP and UDP, the host's network namespace).
    pub network: bool,
    /// Starting child processes (`fork`, `execve`); they die at the end of each call.
    pub processes: bool,
    /// Environment variables passed through from the host; all others are cleared.
    pub env: Vec<String>,
}

impl Default for Grants {
    /// Nothing beyond the defaults; the environment keys `PATH`, `LANG`, `LC_ALL`, `TZ`, `RUST_LOG`.
    fn default() -> Self {
        Grants {
            read: Vec::new(),
            write: Vec::new(),
            network: false,
            processes: false,
            env: ["PATH", "LANG", "LC_ALL", "TZ", "RUST_LOG"]
                .map(String::from)
                .to_vec(),
        }
    }
}

impl std::fmt::Display for Grants {
    /// The grants in words, as [`Capabilities`](rho_plugin_api::Capabilities) shows what a plugin
    /// asks for: `read /srv; network; env PATH, LANG`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let paths = |paths: &[PathBuf]| paths.iter().map(|p| p.display().to_string()).collect();
        rho_plugin_api::Capabilities {
            read: paths(&self.read),
            write: paths(&self.write),
            network: self.network,
            env: self.env.clone(),
            processes: self.processes,
        }
        .fmt(f)
    }
}

impl Grants {
    /// The first of `asked` these grants do not cover, named with the grant that would: a path
    /// to read is covered by a granted read or write path it lies under (or a system directory
    /// every sandbox reads: `/usr`, `/etc`...), a path to write by a write path, an environment
    /// key by `env`, the network and processes by their switches.
    ///
    /// ```
    /// use rho_plugin_api::Capabilities;
    /// use rho_protocol::Grants;
    /// let grants = Grants { write: vec!["/data".into()], ..Grants::default() };
    /// assert_eq!(grants.uncovered(&Capabilities::none().read("/data/photos")), None);
    /// assert_eq!(grants.uncovered(&Capabilities::none().read("/usr/share/zoneinfo")), None);
    /// assert!(grants.uncovered(&Capabilities::none().read("/data/../home")).is_some());
    /// assert_eq!(
    ///     grants.uncovered(&Capabilities::none().network()).as_deref(),
    ///     Some("the network (grants.network)")
    /// );
    /// ```
    pub fn uncovered(&self, asked: &rho_plugin_api::Capabilities) -> Option<String> {
        // A path the host can compare: absolute, without `..` (`/data/../etc` lies "under"
        // `/data` component by component, and is not).
        let plain = |p: &str| {
            let path = Path::new(p);
            path.is_absolute()
                && !path
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
        };
        if let Some(p) = asked.read.iter().chain(&asked.write).find(|p| !plain(p)) {
            return Some(format!("the path {p:?} (an absolute path without `..`)"));
        }
        let under = |paths: &[PathBuf], p: &str| paths.iter().any(|g| Path::new(p).starts_with(g));
        if let Some(p) = asked.read.iter().find(|p| {
            let system = SYSTEM_READ.iter().any(|s| Path::new(p).starts_with(s));
            !system && !under(&self.read, p) && !under(&self.write, p)
        }) {
            return Some(format!("reading {p} (grants.read)"));
        }
        if let Some(p) = asked.write.iter().find(|p| !under(&self.write, p)) {
            return Some(format!("writing {p} (grants.write)"));
        }
        if asked.network && !self.network {
            return Some("the network (grants.network)".into());
        }
        if asked.processes && !self.processes {
            return Some("child processes (grants.processes)".into());
        }
        if let Some(key) = asked.env.iter().find(|k| !self.env.contains(k)) {
            return Some(format!("the environment variable {key} (grants.env)"));
        }
        None
    }
}

/// The most paths one directory may grant (read and write together): each is a descriptor
/// handed to every worker.
pub const MAX_GRANTS: usize = 64;

/// One granted path as the host resolved it, in the order of the descriptors handed to a worker
/// ([`GRANT_FDS`](crate::frames::GRANT_FDS) on): its path without links, whether the
/// plugin may write it, and its identity (device and inode) when it was resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantPath {
    /// The path, without links or `..`.
    pub path: PathBuf,
    /// Read and write (`true`) or read only.
    pub write: bool,
    /// Its device and inode.
    pub dev_ino: (u64, u64),
}

impl GrantPath {
    /// How the sandbox report shows it in force: `read /srv/data`, `write /tmp/out`.
    pub fn shown(&self) -> String {
        let how = if self.write { "write" } else { "read" };
        format!("{how} {}", self.path.display())
    }
}

/// Whether a worker must mount `grant` itself: a path under `/tmp` (hidden by the sandbox's
/// scratch tmpfs) or a writable one (the rest of the file system is read-only), unless a
/// writable grant above it already brings it.
pub fn needs_mount(grant: &GrantPath, all: &[GrantPath]) -> bool {
    let covered = all
        .iter()
        .any(|g| g.write && g.path != grant.path && grant.path.starts_with(&g.path));
    !covered && (grant.write || grant.path.starts_with("/tmp"))
}
