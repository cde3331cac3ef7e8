//! `rho.toml`: the host's configuration. Every command takes `--config PATH`; flags override the
//! file; without a file the documented defaults apply. A bad file is one line naming the key and
//! what was expected.
//!
//! ```toml
//! [[plugins]]
//! dir = "target/plugins"
//! isolate = true             # false: in this process (trusted plugins only)
//! trust_any_writer = false   # true: load files other users can write
//!
//! [runner]
//! default_timeout_ms = 60000
//! max_parallel = 8
//! keep_details = "all"       # "none", "all", or { up_to = 4096 }
//!
//! [timeouts]                 # per tool, win over the tool's own
//! spin = 500
//!
//! [quarantine]
//! max_failures = 3
//! window_ms = 300000
//!
//! [workers]                  # isolated plugins
//! spares = 1
//! idle_timeout_ms = 60000
//! limits = { memory_bytes = 2147483648, open_files = 256, processes = 64 }
//! grants = { read = ["data"], write = [], network = false, processes = false }
//!
//! [[gate]]                   # first matching rule wins; no match: allow
//! tool = "exit_*"
//! action = "deny"            # "allow", "deny" or "ask"
//!
//! [serve]
//! ask_fallback = "deny"      # when "ask" cannot reach a person: "deny" or "allow"
//! journal = "/tmp/rho-serve.jsonl"
//! ```

use std::path::Path;

use rho_runtime::HostConfig;

/// Reads `path` (a regular file of at most [`MAX_CONFIG_BYTES`]) as a [`HostConfig`], checks its
/// ranges and makes its relative paths relative to the file's directory; an error is one line:
/// the file, the key, what was expected.
pub fn load(path: &Path) -> Result<HostConfig, String> {
    let text = read_regular(path, MAX_CONFIG_BYTES)?;
    let mut config = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    config
        .check()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    config.resolve_paths(path.parent().unwrap_or(Path::new(".")));
    Ok(config)
}

/// Parses a configuration text; an error names the line and the key.
pub fn parse(text: &str) -> Result<HostConfig, String> {
    let deserializer = toml::Deserializer::parse(text).map_err(|e| one_line(text, &e, ""))?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key = e.path().to_string();
        one_line(text, e.inner(), &key)
    })
}

/// The largest configuration file read: 1 MiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads `path` as text if it is a regular file of at most `max` bytes: a FIFO, a device (say
/// `/dev/zero`) or a huge file is one line, never a hang or unbounded memory.
pub fn read_regular(path: &Path, max: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{shown}: cannot read: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{shown}: cannot read: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown}: not a regular file"));
    }
    if meta.len() > max {
        return Err(format!("{shown}: {} bytes, larger than {max}", meta.len()));
    }
    let mut text = String::new();
    file.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{shown}: cannot read: {e}"))?;
    if text.len() as u64 > max {
        return Err(format!("{shown}: larger than {max} bytes"));
    }
    Ok(text)
}

fn one_line(text: &str, error: &toml::de::Error, key: &str) -> String {
    let line = error
        .span()
        .map(|span| text[..span.start.min(text.len())].lines().count().max(1))
        .map(|n| format!("line {n}: "))
        .unwrap_or_default();
    let key = if key.is_empty() || key == "." {
        String::new()
    } else {
        format!("`{key}`: ")
    };
    let message = error.message().lines().next().unwrap_or("").trim();
    format!("{line}{key}{message}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_runtime::{Action, Grants, KeepDetails};
    use std::path::PathBuf;

    /// The README's `rho.toml` (its Configuration section) parses and passes the range checks,
    /// so a user who copies it starts from a valid file.
    #[test]
    fn the_readme_configuration_is_valid() {
        let readme = include_str!("../../README.md");
        let section = &readme[readme.find("## Configuration").unwrap()..];
        let start = section.find("```toml\n").unwrap() + "```toml\n".len();
        let block = &section[start..start + section[start..].find("```").unwrap()];
        let config = parse(block).unwrap_or_else(|e| panic!("{e}"));
        config.check().unwrap();
        assert_eq!(config.runner.load_wait_ms, 2000);
        assert_eq!(config.serve.session_idle_ms, 60_000);
    }

    #[test]
    fn grants_per_directory_and_for_all_with_paths_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rho.toml");
        std::fs::write(
            &path,
            r#"
            [[plugins]]
            dir = "untrusted"
            isolate = true
            grants = { write = ["out"], network = true }
            [[plugins]]
            dir = "other"
            isolate = true
            [workers]
            identity = { user = { uid = 1000, gid = 1000 } }
            [workers.grants]
            read = ["/srv/data", "data"]
            processes = true
            "#,
        )
        .unwrap();
        let config = load(&path).unwrap();
        let own = config.plugins[0].grants.as_ref().unwrap();
        assert_eq!(own.write, [dir.path().join("out")]);
        assert!(own.network && !own.processes);
        assert!(config.plugins[1].grants.is_none());
        let all = &config.workers.grants;
        assert_eq!(
            all.read,
            [PathBuf::from("/srv/data"), dir.path().join("data")]
        );
        assert!(all.processes && !all.network);
        assert_eq!(all.env, Grants::default().env);
        assert_eq!(
            config.workers.identity,
            rho_runtime::Identity::User {
                uid: 1000,
                gid: 1000
            }
        );
        let err = parse("[workers.grants]\nnetwork = \"yes\"\n").unwrap_err();
        assert!(
            err.starts_with("line 2: `workers.grants.network`: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn parses_the_documented_example_and_defaults() {
        let text = r#"
            [[plugins]]
            dir = "target/plugins"
            isolate = true
            [runner]
            default_timeout_ms = 5000
            keep_details = { up_to = 4096 }
            [timeouts]
            spin = 500
            [quarantine]
            max_failures = 2
            window_ms = 1000
            [workers]
            spares = 0
            [[gate]]
            tool = "exit_*"
            action = "deny"
            [[gate]]
            tool = "*"
            action = "ask"
            [serve]
            ask_fallback = "allow"
        "#;
        let config = parse(text).unwrap();
        assert!(config.plugins[0].isolate);
        assert_eq!(config.runner.keep_details, KeepDetails::UpTo(4096));
        assert_eq!(config.timeouts["spin"], 500);
        assert_eq!(config.quarantine.max_failures, 2);
        assert_eq!(config.workers.spares, 0);
        assert_eq!(
            config.workers.max_frame,
            64 << 20,
            "unset worker keys keep their defaults"
        );
        let action = |tool: &str| {
            config
                .gate
                .iter()
                .find(|r| rho_runtime::pattern_matches(&r.tool, tool))
                .map(|r| r.action)
        };
        assert_eq!(action("exit_process"), Some(Action::Deny));
        assert_eq!(action("echo"), Some(Action::Ask));
        assert_eq!(config.serve.ask_fallback, Action::Allow);
        let empty = parse("").unwrap();
        assert_eq!(empty.runner.default_timeout_ms, 60_000);
        assert!(empty.gate.is_empty());
    }

    #[test]
    fn a_bad_file_is_one_line_naming_the_key() {
        let err = parse("[runner]\ndefault_timeout_ms = \"soon\"\n").unwrap_err();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("runner.default_timeout_ms"), "{err}");
        assert!(err.contains("expected u64"), "{err}");
        let err = parse("[runner]\ntimeout = 5\n").unwrap_err();
        assert!(err.contains("unknown field `timeout`"), "{err}");
        let err = parse("[[gate]]\ntool = \"x\"\naction = \"maybe\"\n").unwrap_err();
        assert!(
            err.contains("gate[0].action") && err.contains("unknown variant `maybe`"),
            "{err}"
        );
        let err = parse("[runner\n").unwrap_err();
        assert!(err.starts_with("line 1: "), "{err}");
    }
}
