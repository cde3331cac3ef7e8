//! macOS's sandbox for a worker: a Seatbelt profile (SBPL, the language of `sandbox-exec -p`)
//! generated from a plugin's grants ([`profile`]).
//!
//! The profile denies by default and allows only:
//!
//! - reading the system's libraries, frameworks and data a dynamic library needs to load and run
//!   ([`SYSTEM_READS`]), the plugin's own file, the granted read and write paths, and the
//!   worker's scratch directory;
//! - writing only under the scratch directory and the granted write paths (and to `/dev/null`);
//! - the network (outbound, inbound, binding, sockets) only with the network grant;
//! - starting processes (`process-fork`, `process-exec`) only with the processes grant;
//! - what every process needs to exist: reading its own metadata and `sysctl`s, signalling
//!   itself.
//!
//! Paths are written as SBPL string literals; a path that is not absolute, or that holds a
//! control character or `NUL`, is refused ([`ProfileError`]) rather than escaped: nothing a
//! grant names can change the profile's structure.
//!
//! The generator is plain text and runs (and is tested) on every platform; only macOS applies
//! it. What it cannot do is stated beside it in the README: Seatbelt does not bound memory or
//! processes (resource limits do), and with processes granted a process that calls `setsid`
//! leaves the worker's process group and can outlive it.

use std::fmt::Write;
use std::path::Path;

use rho_protocol::Grants;

/// Paths every worker reads on macOS: the dynamic loader's caches, the system's libraries and
/// frameworks, time zone data, and the devices a program opens (`/dev/null`, randomness).
pub const SYSTEM_READS: &[&str] = &[
    "/usr/lib",
    "/usr/share/zoneinfo",
    "/usr/share/icu",
    "/System/Library",
    "/System/Cryptexes",
    "/System/Volumes/Preboot/Cryptexes",
    "/private/var/db/dyld",
    "/private/var/db/timezone",
    "/private/etc/localtime",
    "/dev/null",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
];

/// A path a profile cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Seatbelt profile cannot name {path:?}: {why}")]
pub struct ProfileError {
    /// The path, as given.
    pub path: String,
    /// Why: not absolute, or a control character in it.
    pub why: &'static str,
}

/// The Seatbelt profile of a worker that loads `plugin` with `grants` and writes its scratch
/// files under `scratch` (both absolute paths the host resolved, symbolic links followed: Seatbelt
/// matches the paths the kernel resolves, so `/tmp/x` must be given as `/private/tmp/x`).
///
/// ```
/// use std::path::Path;
/// use rho_protocol::Grants;
/// use rho_worker::sandbox::seatbelt::profile;
///
/// let grants = Grants { read: vec!["/srv/photos".into()], ..Grants::default() };
/// let text = profile(&grants, Path::new("/private/tmp/rho-1/scratch"), Path::new("/private/tmp/rho-1/libfiles.dylib")).unwrap();
/// assert!(text.starts_with("(version 1)\n(deny default)\n"));
/// assert!(text.contains("(subpath \"/srv/photos\")"));
/// assert!(!text.contains("network"));
/// ```
pub fn profile(grants: &Grants, scratch: &Path, plugin: &Path) -> Result<String, ProfileError> {
    let scratch = literal(scratch)?;
    let plugin = literal(plugin)?;
    let reads = grants
        .read
        .iter()
        .map(|p| literal(p))
        .collect::<Result<Vec<_>, _>>()?;
    let writes = grants
        .write
        .iter()
        .map(|p| literal(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = String::from("(version 1)\n(deny default)\n");
    out.push_str("\n; to exist: its own signals, sysctls and process information\n");
    out.push_str("(allow signal (target self))\n");
    out.push_str("(allow sysctl-read)\n");
    out.push_str("(allow process-info* (target self))\n");
    out.push_str("\n; reads: the system, the plugin, the grants, the scratch directory\n");
    out.push_str("(allow file-read-metadata)\n");
    out.push_str("(allow file-read*\n");
    for path in SYSTEM_READS {
        let _ = writeln!(out, "    (subpath {})", quoted(path));
    }
    let _ = writeln!(out, "    (literal {plugin})");
    for path in reads.iter().chain(&writes) {
        let _ = writeln!(out, "    (subpath {path})");
    }
    let _ = writeln!(out, "    (subpath {scratch}))");
    out.push_str("\n; writes: the scratch directory and the write grants only\n");
    out.push_str("(allow file-write*\n");
    out.push_str("    (literal \"/dev/null\")\n");
    for path in &writes {
        let _ = writeln!(out, "    (subpath {path})");
    }
    let _ = writeln!(out, "    (subpath {scratch}))");
    if grants.network {
        out.push_str("\n; the network grant\n");
        out.push_str("(allow network-outbound)\n(allow network-inbound)\n(allow network-bind)\n");
        out.push_str("(allow system-socket)\n(allow mach-lookup (global-name \"com.apple.dnssd.service\"))\n");
    }
    if grants.processes {
        out.push_str("\n; the processes grant\n");
        out.push_str("(allow process-fork)\n(allow process-exec)\n");
    }
    Ok(out)
}

/// `path` as an SBPL string literal, or why it cannot be one.
fn literal(path: &Path) -> Result<String, ProfileError> {
    let shown = path.to_string_lossy();
    let refused = |why| ProfileError {
        path: shown.to_string(),
        why,
    };
    let Some(text) = path.to_str() else {
        return Err(refused("it is not UTF-8"));
    };
    if !path.is_absolute() {
        return Err(refused("it is not absolute"));
    }
    if text.chars().any(char::is_control) {
        return Err(refused("it holds a control character"));
    }
    Ok(quoted(text))
}

/// `text` between double quotes, `\` and `"` escaped.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const SCRATCH: &str = "/private/tmp/rho-7/scratch";
    const PLUGIN: &str = "/private/tmp/rho-7/libfiles.dylib";

    fn grants(read: &[&str], write: &[&str], network: bool, processes: bool) -> Grants {
        Grants {
            read: read.iter().map(PathBuf::from).collect(),
            write: write.iter().map(PathBuf::from).collect(),
            network,
            processes,
            ..Grants::default()
        }
    }

    fn generated(grants: &Grants) -> String {
        profile(grants, Path::new(SCRATCH), Path::new(PLUGIN)).unwrap()
    }

    /// The golden profiles, one per combination of grants (`worker/tests/seatbelt/*.sb`).
    #[test]
    fn profiles_match_their_golden_files() {
        let cases = [
            (
                grants(&[], &[], false, false),
                include_str!("../../tests/seatbelt/none.sb"),
            ),
            (
                grants(&["/srv/photos", "/Users/ann/notes"], &[], false, false),
                include_str!("../../tests/seatbelt/reads.sb"),
            ),
            (
                grants(&["/srv/photos"], &["/Users/ann/out"], true, true),
                include_str!("../../tests/seatbelt/all.sb"),
            ),
        ];
        let bless = std::env::var_os("RHO_BLESS").is_some();
        for (i, (grants, golden)) in cases.into_iter().enumerate() {
            let text = generated(&grants);
            if bless {
                let name = ["none", "reads", "all"][i];
                let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/seatbelt");
                std::fs::write(dir.join(format!("{name}.sb")), &text).unwrap();
                continue;
            }
            assert_eq!(
                text, golden,
                "{grants:?} (RHO_BLESS=1 writes the golden files anew)"
            );
        }
    }

    /// Whatever the grants, a profile denies by default, writes only under the scratch directory
    /// and the write grants, and has no network or processes without their grants.
    #[test]
    fn a_profile_never_allows_what_the_grants_do_not() {
        let paths: [&[&str]; 3] = [&[], &["/srv/a"], &["/srv/a", "/Volumes/b c"]];
        for read in paths {
            for write in paths {
                for network in [false, true] {
                    for processes in [false, true] {
                        let grants = grants(read, write, network, processes);
                        let text = generated(&grants);
                        assert!(text.starts_with("(version 1)\n(deny default)\n"));
                        assert!(!text.contains("(allow default)"));
                        assert_eq!(text.contains("network"), network, "{text}");
                        assert_eq!(text.contains("process-exec"), processes, "{text}");
                        assert_eq!(text.contains("process-fork"), processes, "{text}");
                        let writes = text.split("(allow file-write*\n").nth(1).unwrap();
                        let writes = &writes[..writes.find("))").unwrap() + 1];
                        for line in writes.lines() {
                            let allowed = line == "    (literal \"/dev/null\")"
                                || line == format!("    (subpath {})", quoted(SCRATCH))
                                || write
                                    .iter()
                                    .any(|w| line == format!("    (subpath {})", quoted(w)));
                            assert!(allowed, "a write beyond the grants: {line}");
                        }
                        assert_eq!(text.matches("(allow file-write*").count(), 1);
                    }
                }
            }
        }
    }

    #[test]
    fn a_path_that_could_change_the_profile_is_refused_not_escaped() {
        for bad in [
            "relative/path",
            "/srv/a\n(allow default)",
            "/srv/\0x",
            "/srv/a\u{7f}",
        ] {
            let grants = grants(&[bad], &[], false, false);
            let refused = profile(&grants, Path::new(SCRATCH), Path::new(PLUGIN));
            assert!(refused.is_err(), "{bad:?}");
        }
        // Quotes and backslashes are escaped: still one literal.
        let grants = grants(&["/srv/a \"b\" \\c"], &[], false, false);
        let text = generated(&grants);
        assert!(text.contains(r#"(subpath "/srv/a \"b\" \\c")"#), "{text}");
    }
}
