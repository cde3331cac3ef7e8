//! What an isolated plugin may do beyond the sandbox's defaults ([`Grants`]), and how the host
//! fixes each granted path before any worker uses it ([`resolve`]).
//!
//! A grant names a host path. The host resolves it once, when the directory's backend is made:
//! component by component on descriptors ([`crate::walk`]), following a link only where no
//! plugin could have put it (a link inside a granted writable directory refuses the grant), and
//! keeps an `O_PATH` descriptor of what it found. Workers are handed those descriptors: Landlock's
//! rules hold on them (inodes, not paths), and the sandbox mounts a granted directory only after
//! checking that the path it walked in its own mount namespace leads to the same inode. Nothing a
//! plugin does later (renaming a granted directory, putting a symlink in its place) redirects a
//! grant: at worst the grant cannot be put in force in a new worker, and that worker refuses to
//! load.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::isolate::sandbox::SYSTEM_READ;
use crate::walk::{self, DevIno, Policy, WalkError};

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
    /// use rho_core::{Capabilities, Grants};
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
/// ([`GRANT_FDS`](crate::isolate::protocol::GRANT_FDS) on): its path without links, whether the
/// plugin may write it, and its identity (device and inode) when it was resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GrantPath {
    /// The path, without links or `..`.
    pub path: PathBuf,
    /// Read and write (`true`) or read only.
    pub write: bool,
    /// Its device and inode.
    pub dev_ino: DevIno,
}

impl GrantPath {
    /// How the sandbox report shows it in force: `read /srv/data`, `write /tmp/out`.
    pub fn shown(&self) -> String {
        let how = if self.write { "write" } else { "read" };
        format!("{how} {}", self.path.display())
    }
}

/// A directory's grants as resolved, with a descriptor of each path (shared by every worker).
pub(crate) struct ResolvedGrants {
    pub paths: Vec<GrantPath>,
    pub fds: Vec<OwnedFd>,
}

impl ResolvedGrants {
    /// The grants as `Grants` name them, with the resolved paths (what is in force).
    pub fn as_grants(&self, given: &Grants) -> Grants {
        let of = |write: bool| {
            self.paths
                .iter()
                .filter(|g| g.write == write)
                .map(|g| g.path.clone())
                .collect()
        };
        Grants {
            read: of(false),
            write: of(true),
            ..given.clone()
        }
    }
}

/// Remembers each link a walk followed, with the directories from `/` that held it.
#[derive(Default)]
struct Links(Vec<(PathBuf, Vec<DevIno>)>);

impl Policy for Links {
    fn follows(
        &mut self,
        link: &Path,
        _link_st: &libc::stat,
        _dir: &libc::stat,
        chain: &[DevIno],
    ) -> Result<(), String> {
        self.0.push((link.to_owned(), chain.to_vec()));
        Ok(())
    }
}

/// Directories the sandbox makes its own: a grant beneath them would name the sandbox's, and a
/// writable grant above them would cover the sandbox's own with the host's.
const SANDBOX_OWN: &[&str] = &["/proc", "/tmp"];

/// Resolves `grants` (see the module doc). `Err` is one line saying which grant cannot be put
/// in force, and why.
pub(crate) fn resolve(grants: &Grants) -> Result<ResolvedGrants, String> {
    let asked: Vec<(&PathBuf, bool)> = (grants.read.iter().map(|p| (p, false)))
        .chain(grants.write.iter().map(|p| (p, true)))
        .collect();
    if asked.len() > MAX_GRANTS {
        return Err(format!(
            "{} paths are granted; at most {MAX_GRANTS} can be",
            asked.len()
        ));
    }
    let mut walked = Vec::new();
    for (given, write) in asked {
        let mut links = Links::default();
        let found = walk::walk(given, &mut links).map_err(|e| match e {
            WalkError::NotFound(at) => format!(
                "the grant of {}: {} does not exist",
                given.display(),
                at.display()
            ),
            other => format!("the grant of {}: {other}", given.display()),
        })?;
        let path = &found.path;
        for own in SANDBOX_OWN.iter().map(Path::new) {
            if path == own || (path.starts_with(own) && own == Path::new("/proc")) {
                return Err(format!(
                    "the grant of {}: {} is the sandbox's own (grant a path beneath /tmp, or \
                     elsewhere)",
                    given.display(),
                    own.display()
                ));
            }
            if write && own.starts_with(path) {
                return Err(format!(
                    "the grant of {} to write: it holds {}, which is the sandbox's own",
                    given.display(),
                    own.display()
                ));
            }
        }
        walked.push((given.clone(), write, found, links.0));
    }
    // A link inside a writable grant could be the plugin's own: no grant goes through one.
    let writable: Vec<(DevIno, &Path)> = walked
        .iter()
        .filter(|(_, write, _, _)| *write)
        .map(|(_, _, found, _)| (walk::dev_ino(&found.stat), found.path.as_path()))
        .collect();
    for (given, _, _, links) in &walked {
        for (link, chain) in links {
            if let Some((_, root)) = writable.iter().find(|(id, _)| chain.contains(id)) {
                return Err(format!(
                    "the grant of {}: its path goes through the symlink {}, inside the writable \
                     grant {}, which a plugin could have made",
                    given.display(),
                    link.display(),
                    root.display()
                ));
            }
        }
    }
    let mut resolved = ResolvedGrants {
        paths: Vec::new(),
        fds: Vec::new(),
    };
    for (_, write, found, _) in walked {
        resolved.paths.push(GrantPath {
            path: found.path,
            write,
            dev_ino: walk::dev_ino(&found.stat),
        });
        resolved.fds.push(found.fd);
    }
    Ok(resolved)
}

/// Whether a worker must mount `grant` itself: a path under `/tmp` (hidden by the sandbox's
/// scratch tmpfs) or a writable one (the rest of the file system is read-only), unless a
/// writable grant above it already brings it.
pub(crate) fn needs_mount(grant: &GrantPath, all: &[GrantPath]) -> bool {
    let covered = all
        .iter()
        .any(|g| g.write && g.path != grant.path && grant.path.starts_with(&g.path));
    !covered && (grant.write || grant.path.starts_with("/tmp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(read: &[&Path], write: &[&Path]) -> Grants {
        Grants {
            read: read.iter().map(|p| p.to_path_buf()).collect(),
            write: write.iter().map(|p| p.to_path_buf()).collect(),
            ..Grants::default()
        }
    }

    #[test]
    fn links_inside_a_writable_grant_refuse_the_grants_through_them() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let (w, secret) = (base.join("w"), base.join("secret"));
        std::fs::create_dir_all(w.join("sub")).unwrap();
        std::fs::create_dir(&secret).unwrap();
        let ok = resolve(&grants(&[&w.join("sub")], &[&w])).unwrap();
        assert_eq!(ok.paths[0].path, w.join("sub"));
        assert_eq!(ok.fds.len(), 2);
        // The plugin swapped its read grant for a link to a secret: a host resolving the grants
        // anew (a restart) refuses them.
        std::fs::rename(w.join("sub"), w.join("old")).unwrap();
        std::os::unix::fs::symlink(&secret, w.join("sub")).unwrap();
        let refused = resolve(&grants(&[&w.join("sub")], &[&w])).err().unwrap();
        assert!(refused.contains("inside the writable grant"), "{refused}");
        // A link outside every writable grant is followed.
        std::os::unix::fs::symlink(&secret, base.join("here")).unwrap();
        let ok = resolve(&grants(&[&base.join("here")], &[&w])).unwrap();
        assert_eq!(ok.paths[0].path, secret);
    }

    #[test]
    fn the_sandbox_own_directories_cannot_be_granted() {
        for (read, write) in [
            (vec![Path::new("/proc/1")], vec![]),
            (vec![Path::new("/tmp")], vec![]),
            (vec![], vec![Path::new("/")]),
        ] {
            let refused = resolve(&grants(&read, &write)).err().unwrap();
            assert!(refused.contains("the sandbox's own"), "{refused}");
        }
        let missing = resolve(&grants(&[Path::new("/no/such/path")], &[]))
            .err()
            .unwrap();
        assert!(missing.contains("/no does not exist"), "{missing}");
    }
}
