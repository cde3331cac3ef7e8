//! How the host fixes each granted path before any worker uses it ([`resolve`]).
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

use rho_protocol::grants::{GrantPath, Grants, MAX_GRANTS};

use crate::walk::{self, DevIno, Policy, WalkError};

/// A directory's grants as resolved, with a descriptor of each path (shared by every worker).
pub struct ResolvedGrants {
    /// The paths, in the order of their descriptors.
    pub paths: Vec<GrantPath>,
    /// An `O_PATH` descriptor of each.
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

/// Resolves `grants` for code that runs as `identity` (the user and group a worker switches to;
/// `None`: the host's own): as [`resolve`], and each granted path must be open to that identity
/// (every directory on its way searchable, the path itself readable, writable for a write
/// grant): a grant that says a path and gives nothing of it is refused now, in one line naming
/// the fix, never a surprise at each call. (Access control lists are not read: a path they
/// open is refused here, one they close is found by the call.)
pub fn resolve_for(
    grants: &Grants,
    identity: Option<(u32, u32)>,
) -> Result<ResolvedGrants, String> {
    let resolved = resolve(grants)?;
    let Some((uid, gid)) = identity else {
        return Ok(resolved);
    };
    for grant in &resolved.paths {
        if let Some(closed) = closed_to(&grant.path, grant.write, uid, gid) {
            let what = if grant.write { "write" } else { "read" };
            return Err(format!(
                "the grant to {what} {}: {closed} for uid {uid} (gid {gid}), whom plugins run as \
                 (a host running as root runs them as nobody); open it to them (chmod o+{}), or \
                 set [workers] identity to a user who can {what} it",
                grant.path.display(),
                if grant.write { "rwx" } else { "rx" },
            ));
        }
    }
    Ok(resolved)
}

/// Why `path` is not open to `uid`:`gid` (`write` too), if it is not: the first directory on
/// its way it cannot search (but those under `/tmp`, which the sandbox makes in its scratch),
/// or the path itself.
fn closed_to(path: &Path, write: bool, uid: u32, gid: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    // The permission bits that apply to uid:gid: the owner's, the group's, or the others'.
    let bits = |meta: &std::fs::Metadata| {
        let mode = meta.mode();
        if meta.uid() == uid {
            (mode >> 6) & 7
        } else if meta.gid() == gid {
            (mode >> 3) & 7
        } else {
            mode & 7
        }
    };
    let shown = |at: &Path, meta: &std::fs::Metadata| {
        format!(
            "{} is {:o} {}:{}",
            at.display(),
            meta.mode() & 0o7777,
            meta.uid(),
            meta.gid()
        )
    };
    // Beneath /tmp the sandbox makes the way itself, in its scratch (see `sandbox::mounts`).
    let scratch = Path::new("/tmp");
    for ancestor in path.ancestors().skip(1) {
        if path.starts_with(scratch) && ancestor.starts_with(scratch) {
            continue;
        }
        let meta = std::fs::metadata(ancestor).ok()?;
        if bits(&meta) & 1 == 0 {
            return Some(format!("{} (not searchable)", shown(ancestor, &meta)));
        }
    }
    let meta = std::fs::metadata(path).ok()?;
    let mut wanted = 4;
    if meta.is_dir() {
        wanted |= 1;
    }
    if write {
        wanted |= 2;
    }
    (bits(&meta) & wanted != wanted).then(|| {
        let how = if write {
            "not writable"
        } else {
            "not readable"
        };
        format!("{} ({how})", shown(path, &meta))
    })
}

/// Resolves `grants` (see the module doc). `Err` is one line saying which grant cannot be put
/// in force, and why.
pub fn resolve(grants: &Grants) -> Result<ResolvedGrants, String> {
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

    /// A grant closed to the identity plugins run as is refused in one line naming the fix;
    /// one open to it, or for the host's own identity, is not.
    #[test]
    fn a_grant_closed_to_the_plugins_identity_is_refused_naming_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        // Not under /tmp, whose way the sandbox makes itself (a checkout may be under /tmp too),
        // and beneath directories anyone may search.
        let outside = ["/var/tmp", "/dev/shm"]
            .into_iter()
            .map(std::path::Path::new)
            .find(|p| p.is_dir())
            .unwrap();
        let tmp = tempfile::tempdir_in(outside).unwrap();
        let base = tmp.path().canonicalize().unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let closed = base.join("project");
        std::fs::create_dir(&closed).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let open = base.join("public");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Nobody else's: a uid and gid that own nothing here.
        let stranger = Some((65533, 65533));
        let refused = resolve_for(&grants(&[&closed], &[]), stranger)
            .err()
            .unwrap();
        assert!(
            refused.starts_with(&format!("the grant to read {}: ", closed.display()))
                && refused.contains("(not readable) for uid 65533")
                && refused.contains("chmod o+rx")
                && refused.contains("[workers] identity"),
            "{refused}"
        );
        assert!(resolve_for(&grants(&[&open], &[]), stranger).is_ok());
        let unwritable = resolve_for(&grants(&[], &[&open]), stranger).err().unwrap();
        assert!(unwritable.contains("(not writable)"), "{unwritable}");
        // Beneath a directory it cannot search: named.
        let inner = closed.join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o755)).unwrap();
        let hidden = resolve_for(&grants(&[&inner], &[]), stranger)
            .err()
            .unwrap();
        assert!(hidden.contains("(not searchable)"), "{hidden}");
        // The host's own identity: as resolve.
        assert!(resolve_for(&grants(&[&closed], &[]), None).is_ok());
        // Under /tmp only the path itself counts: the sandbox makes its way in the scratch.
        let scratch = tempfile::tempdir_in("/tmp").unwrap();
        let beneath = scratch.path().join("open");
        std::fs::create_dir(&beneath).unwrap();
        std::fs::set_permissions(&beneath, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(resolve_for(&grants(&[&beneath], &[]), stranger).is_ok());
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
