//! macOS's sandbox for a worker: a Seatbelt profile (SBPL, the language of `sandbox-exec -p`)
//! generated from a plugin's grants ([`profile`]).
//!
//! The profile denies by default and allows only:
//!
//! - reading the system's programs, libraries, frameworks and data ([`SYSTEM_READS`]), the
//!   plugin's own file, the granted read and write paths, and the worker's scratch directory;
//! - mapping code only from the system's libraries ([`SYSTEM_CODE`]) and the plugin's file;
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

/// Paths every worker reads on macOS, as on Linux (`/usr`, `/bin`, `/sbin`, `/etc`): the
/// system's programs, libraries and data; the frameworks and the dynamic loader's caches a
/// library needs to load and run; time zone data; the devices a program opens (`/dev/null`,
/// randomness).
pub const SYSTEM_READS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/private/etc",
    "/System/Library",
    "/System/Cryptexes",
    "/System/Volumes/Preboot/Cryptexes",
    "/private/var/db/dyld",
    "/private/var/db/timezone",
    "/dev/null",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
];

/// Where a worker may map code from: the system's libraries and frameworks (and the loader's
/// caches of them); the plugin's own file is added to these.
pub const SYSTEM_CODE: &[&str] = &[
    "/usr/lib",
    "/System/Library",
    "/System/Cryptexes",
    "/System/Volumes/Preboot/Cryptexes",
    "/private/var/db/dyld",
];

/// The system services a program asks to resolve names and check certificates: allowed only
/// with the network grant.
pub const NETWORK_SERVICES: &[&str] = &[
    "com.apple.dnssd.service",
    "com.apple.mDNSResponder",
    "com.apple.SystemConfiguration.DNSConfiguration",
    "com.apple.SystemConfiguration.configd",
    "com.apple.trustd.agent",
];

/// Where a program (not a plugin) may map code from, besides its read grants: the system's
/// programs and libraries.
pub const PROGRAM_CODE: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/System/Library",
    "/System/Cryptexes",
    "/System/Volumes/Preboot/Cryptexes",
    "/private/var/db/dyld",
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

/// What a sandboxed process runs, which decides where it may map code from.
#[derive(Debug, Clone, Copy)]
pub enum Code<'a> {
    /// A plugin library: code only from the system's libraries ([`SYSTEM_CODE`]) and this file.
    Plugin(&'a Path),
    /// A program (an MCP server's command): code from the system's programs and libraries
    /// ([`PROGRAM_CODE`]) and the read grants, where a program's own libraries live.
    Program,
}

/// The Seatbelt profile of a worker that runs `code` with `grants` and writes its scratch files
/// under `scratch`, its private directory one of those under `workers` (absolute paths without
/// symbolic links: Seatbelt matches the paths the kernel resolves, so `/tmp/x` must be given as
/// `/private/tmp/x`). Whatever the grants say, nothing under `workers` is reachable but this
/// worker's own scratch and plugin: a grant of `/tmp` does not open other workers' files.
///
/// ```
/// use std::path::Path;
/// use rho_protocol::Grants;
/// use rho_worker::sandbox::seatbelt::{Code, profile};
///
/// let grants = Grants { read: vec!["/srv/photos".into()], ..Grants::default() };
/// let plugin = Path::new("/private/tmp/rho-workers-501/rho-worker-7-ab12cd/plugin.dylib");
/// let workers = Path::new("/private/tmp/rho-workers-501");
/// let scratch = Path::new("/private/tmp/rho-workers-501/rho-worker-7-ab12cd/scratch");
/// let text = profile(&grants, workers, scratch, Code::Plugin(plugin)).unwrap();
/// assert!(text.starts_with("(version 1)\n(deny default)\n"));
/// assert!(text.contains("(subpath \"/srv/photos\")"));
/// assert!(!text.contains("network"));
/// ```
pub fn profile(
    grants: &Grants,
    workers: &Path,
    scratch: &Path,
    code: Code<'_>,
) -> Result<String, ProfileError> {
    let workers = literal(workers)?;
    let scratch = literal(scratch)?;
    let plugin = match code {
        Code::Plugin(plugin) => Some(literal(plugin)?),
        Code::Program => None,
    };
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
    out.push_str("\n; to exist: signals and process information within its sandbox, sysctls\n");
    out.push_str("(allow signal (target same-sandbox))\n");
    out.push_str("(allow process-info* (target same-sandbox))\n");
    // Listing pids has no target process: after a call the worker finds its group's strays.
    out.push_str("(allow process-info-listpids)\n");
    out.push_str("(allow sysctl-read)\n");
    out.push_str("\n; reads: the system, the code, the grants, the scratch directory\n");
    out.push_str("(allow file-read-metadata)\n");
    out.push_str("(allow file-read*\n");
    for path in SYSTEM_READS {
        let _ = writeln!(out, "    (subpath {})", quoted(path));
    }
    if let Some(plugin) = &plugin {
        let _ = writeln!(out, "    (literal {plugin})");
    }
    for path in reads.iter().chain(&writes) {
        let _ = writeln!(out, "    (subpath {path})");
    }
    let _ = writeln!(out, "    (subpath {scratch}))");
    out.push_str("\n; code: the system's libraries and the plugin, or a program's\n");
    out.push_str("(allow file-map-executable");
    let code_paths: Vec<String> = match &plugin {
        Some(plugin) => SYSTEM_CODE
            .iter()
            .map(|p| format!("(subpath {})", quoted(p)))
            .chain([format!("(literal {plugin})")])
            .collect(),
        None => PROGRAM_CODE
            .iter()
            .map(|p| format!("(subpath {})", quoted(p)))
            .chain(reads.iter().map(|p| format!("(subpath {p})")))
            .collect(),
    };
    for path in code_paths {
        let _ = write!(out, "\n    {path}");
    }
    out.push_str(")\n");
    // A later rule wins: nothing the sandbox can write runs as code, under a read grant or not.
    out.push_str("(deny file-map-executable\n");
    for path in &writes {
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
        out.push_str("(allow system-socket)\n(allow mach-lookup\n");
        for service in NETWORK_SERVICES {
            let _ = writeln!(out, "    (global-name {})", quoted(service));
        }
        out.push_str(")\n");
    }
    if grants.processes {
        out.push_str("\n; the processes grant\n");
        out.push_str("(allow process-fork)\n(allow process-exec)\n");
    }
    // Last, so that it wins over every grant: the workers' directory is fenced off.
    out.push_str("\n; other workers: nothing under the workers' directory but its own\n");
    let _ = writeln!(
        out,
        "(deny file-read* file-write* file-map-executable (subpath {workers}))"
    );
    let _ = writeln!(out, "(allow file-read* file-write* (subpath {scratch}))");
    if let Some(plugin) = &plugin {
        let _ = writeln!(
            out,
            "(allow file-read* file-map-executable (literal {plugin}))"
        );
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

    const WORKERS: &str = "/private/tmp/rho-workers-501";
    const SCRATCH: &str = "/private/tmp/rho-workers-501/rho-worker-7-ab12cd/scratch";
    const PLUGIN: &str = "/private/tmp/rho-workers-501/rho-worker-7-ab12cd/plugin.dylib";

    fn of(grants: &Grants, code: Code<'_>) -> Result<String, ProfileError> {
        profile(grants, Path::new(WORKERS), Path::new(SCRATCH), code)
    }

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
        of(grants, Code::Plugin(Path::new(PLUGIN))).unwrap()
    }

    /// The golden profiles, one per combination of grants and code
    /// (`worker/tests/seatbelt/*.sb`).
    #[test]
    fn profiles_match_their_golden_files() {
        let plugin = Code::Plugin(Path::new(PLUGIN));
        let cases = [
            ("none", grants(&[], &[], false, false), plugin),
            (
                "reads",
                grants(&["/srv/photos", "/Users/ann/notes"], &[], false, false),
                plugin,
            ),
            (
                "all",
                grants(&["/srv/photos"], &["/Users/ann/out"], true, true),
                plugin,
            ),
            (
                "program",
                grants(&["/opt/homebrew"], &["/Users/ann/out"], false, true),
                Code::Program,
            ),
        ];
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/seatbelt");
        let bless = std::env::var_os("RHO_BLESS").is_some();
        for (name, grants, code) in cases {
            let text = of(&grants, code).unwrap();
            let file = dir.join(format!("{name}.sb"));
            if bless {
                std::fs::write(&file, &text).unwrap();
                continue;
            }
            let golden = std::fs::read_to_string(&file).unwrap();
            assert_eq!(
                text, golden,
                "{name}: {grants:?} (RHO_BLESS=1 writes the golden files anew)"
            );
        }
    }

    /// Whatever the grants, a profile denies by default, writes only under the scratch directory
    /// and the write grants, and has no network or processes without their grants.
    #[test]
    fn a_profile_never_allows_what_the_grants_do_not() {
        // `/private/tmp` holds the workers' directory: a grant of it must not open other
        // workers' files, nor stop this one's plugin from loading.
        let paths: [&[&str]; 4] = [
            &[],
            &["/srv/a"],
            &["/srv/a", "/Volumes/b c"],
            &["/private/tmp"],
        ];
        for read in paths {
            for write in paths {
                for network in [false, true] {
                    for processes in [false, true] {
                        let grants = grants(read, write, network, processes);
                        for code in [Code::Plugin(Path::new(PLUGIN)), Code::Program] {
                            let text = of(&grants, code).unwrap();
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
                            // Nothing writable maps as code.
                            let denied = text.split("(deny file-map-executable\n").nth(1).unwrap();
                            let denied = &denied[..denied.find("))").unwrap() + 1];
                            for path in write.iter().chain([&SCRATCH]) {
                                let line = format!("    (subpath {})", quoted(path));
                                assert!(
                                    denied.lines().any(|l| l == line),
                                    "{path} may run: {text}"
                                );
                            }
                            // The fence comes last, and after it only this worker's own files.
                            let fence = text.split("\n; other workers:").nth(1).unwrap();
                            let mut rules = fence.lines().skip(1);
                            let subpath = |p: &str| format!("(subpath {}))", quoted(p));
                            let expected = [
                                "(deny file-read* file-write* file-map-executable ".to_owned()
                                    + &subpath(WORKERS),
                                "(allow file-read* file-write* ".to_owned() + &subpath(SCRATCH),
                            ];
                            for rule in expected {
                                assert_eq!(rules.next(), Some(rule.as_str()), "{text}");
                            }
                            if let Code::Plugin(_) = code {
                                let plugin = format!(
                                    "(allow file-read* file-map-executable (literal {}))",
                                    quoted(PLUGIN)
                                );
                                assert_eq!(rules.next(), Some(plugin.as_str()), "{text}");
                            }
                            assert_eq!(rules.next(), None, "{text}");
                        }
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
            let refused = of(&grants, Code::Plugin(Path::new(PLUGIN)));
            assert!(refused.is_err(), "{bad:?}");
        }
        // Quotes and backslashes are escaped: still one literal.
        let grants = grants(&["/srv/a \"b\" \\c"], &[], false, false);
        let text = generated(&grants);
        assert!(text.contains(r#"(subpath "/srv/a \"b\" \\c")"#), "{text}");
    }
}
