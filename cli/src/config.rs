//! `rho.toml`, composed by its reader: the host's sections are `rho-runtime`'s ([`HostConfig`]),
//! `[serve]` is `rho serve`'s, `[nats]` and `[[remote]]` are `rho-bridge-nats`', `[[mcp]]` is
//! `rho-mcp`'s, `[wasm]` is the component engine's settings; this module hands
//! each section to its owner. Every command takes `--config PATH`; flags override the file;
//! without a file the documented defaults apply. A bad file is one line naming the key (or the
//! unknown section), the file and what was expected.
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
//! [idle_timeouts]            # per tool: ended after this long without a partial update
//! crawl = 30000
//!
//! [quarantine]
//! max_failures = 3
//! window_ms = 300000
//! cool_down_ms = 120000      # then a call probes the tool; failed probes double it
//! cool_down_growth = 2
//! max_cool_down_ms = 1800000
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
//!
//! [wasm]                     # components (.wasm files) in plugin directories
//! memory_mb = 256
//!
//! [policy]                   # Cedar policies: who may list and call what (reloaded on change)
//! file = "policy.cedar"
//!
//! [[limit]]                  # per principal and tool; over the rate: rate_limited at once
//! tool = "write_*"
//! rate = "5/s"
//! concurrency = 2
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use rho_bridge_nats::{NatsConfig, RemoteConfig};
use rho_runtime::{ConfigError, HostConfig};
use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::DeTable;

use crate::wasm::WasmConfig;
use rho_mcp::ServeConfig;

/// `rho.toml` as `rho` reads it: the host's sections, read by `rho-runtime`
/// ([`HostConfig::SECTIONS`]), and the sections of the parts `rho` links, each read by its owner.
/// A key no part reads is an error.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `[[plugins]]`, `[runner]`, `[timeouts]`, `[idle_timeouts]`, `[quarantine]`, `[workers]`,
    /// `[[gate]]`.
    pub host: HostConfig,
    /// `[serve]`: `rho serve` over stdio and HTTP.
    pub serve: ServeConfig,
    /// `[nats]`: the NATS server of the export and of `rho node` (rho-bridge-nats).
    pub nats: NatsConfig,
    /// `[[remote]]`: other hosts' tools served too, in rank order after the plugin directories
    /// (rho-bridge-nats).
    pub remote: Vec<RemoteConfig>,
    /// `[[mcp]]`: MCP servers whose tools are served too (rho-mcp).
    pub mcp: Vec<rho_mcp::McpServer>,
    /// `[wasm]`: the engine of the components in plugin directories.
    pub wasm: WasmConfig,
    /// `[otel]`: the calls as OpenTelemetry spans and metrics over OTLP (rho-otel), with the
    /// standard `OTEL_*` environment variables applied when a command starts.
    pub otel: rho_otel::OtelConfig,
    /// `[trust]`: the public keys plugin installs accept signatures from (rho-distribution).
    pub trust: rho_distribution::TrustConfig,
    /// `[policy]`: the Cedar policies in force (rho-policy).
    pub policy: rho_policy::PolicyConfig,
}

/// The sections the parts `rho` links read, besides the host's.
const PARTS: [&str; 8] = [
    "serve", "nats", "remote", "mcp", "wasm", "otel", "trust", "policy",
];

impl Config {
    /// Checks every section's ranges and names.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.host.check()?;
        self.serve.check()?;
        self.nats.check()?;
        self.wasm.check()?;
        self.otel.check().map_err(|e| ConfigError {
            key: "otel".into(),
            problem: e.to_string().trim_start_matches("otel: ").to_owned(),
        })?;
        self.trust.check().map_err(|e| ConfigError {
            key: "trust.keys".into(),
            problem: e.to_string(),
        })?;
        let mut names = std::collections::BTreeSet::new();
        for server in &self.mcp {
            server.check()?;
            if !names.insert(&server.name) {
                return Err(ConfigError {
                    key: format!("mcp.{}", server.name),
                    problem: "two servers have this name".into(),
                });
            }
        }
        Ok(())
    }

    /// Makes every relative path of every section relative to `base`, the file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        self.host.resolve_paths(base);
        self.serve.resolve_paths(base);
        self.nats.resolve_paths(base);
        self.wasm.resolve_paths(base);
        self.trust.resolve_paths(base);
        self.policy.resolve_paths(base);
        for remote in &mut self.remote {
            remote.resolve_paths(base);
        }
        for server in &mut self.mcp {
            server.resolve_paths(base);
        }
    }
}

/// Reads `path` (a regular file of at most [`MAX_CONFIG_BYTES`]) as a [`Config`], checks its
/// ranges and makes its relative paths relative to the file's directory; an error is one line:
/// the file, the key, what was expected.
pub fn load(path: &Path) -> Result<Config, String> {
    let text = read_regular(path, MAX_CONFIG_BYTES)?;
    let mut config = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    config
        .check()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    config.resolve_paths(path.parent().unwrap_or(Path::new(".")));
    Ok(config)
}

/// Parses a configuration text, each section by the part that reads it; an error names the line
/// and the key.
pub fn parse(text: &str) -> Result<Config, String> {
    let root = DeTable::parse(text).map_err(|e| one_line(text, &e, ""))?;
    let span = root.span();
    let mut table = root.into_inner();
    if let Some((key, _)) = table.iter().find(|(key, _)| {
        let key: &str = key.get_ref();
        !HostConfig::SECTIONS.contains(&key) && !PARTS.contains(&key)
    }) {
        let line = text[..key.span().start.min(text.len())]
            .lines()
            .count()
            .max(1);
        let known: Vec<&str> = HostConfig::SECTIONS.iter().copied().chain(PARTS).collect();
        return Err(format!(
            "line {line}: unknown section `{}`, expected one of {}",
            key.get_ref(),
            known.join(", ")
        ));
    }
    let serve = section(&mut table, "serve", text)?;
    let nats = section(&mut table, "nats", text)?;
    let remote = section(&mut table, "remote", text)?;
    let mcp = section(&mut table, "mcp", text)?;
    let wasm = section(&mut table, "wasm", text)?;
    let otel = section(&mut table, "otel", text)?;
    let trust = section(&mut table, "trust", text)?;
    let policy = section(&mut table, "policy", text)?;
    let host = deserialize(Spanned::new(span, table), text)?;
    Ok(Config {
        host,
        serve,
        nats,
        remote,
        mcp,
        wasm,
        otel,
        trust,
        policy,
    })
}

/// The section `name` of `table`, taken out of it and read by its own type (its default when the
/// file has none).
fn section<T: DeserializeOwned + Default>(
    table: &mut DeTable<'_>,
    name: &str,
    text: &str,
) -> Result<T, String> {
    let Some((key, value)) = table.remove_entry(name) else {
        return Ok(T::default());
    };
    let span = key.span().start..value.span().end;
    let mut alone = DeTable::new();
    alone.insert(key, value);
    // Read as a map of one entry, so that errors name the key with its section.
    let read: BTreeMap<String, T> = deserialize(Spanned::new(span, alone), text)?;
    Ok(read.into_values().next().unwrap_or_default())
}

/// `table` read as a `T`; an error is one line naming the line and the key.
fn deserialize<T: DeserializeOwned>(table: Spanned<DeTable<'_>>, text: &str) -> Result<T, String> {
    let deserializer = toml::de::Deserializer::from(table);
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

/// The line (from 1) of the byte at `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let before = &text.as_bytes()[..offset.min(text.len())];
    before.iter().filter(|b| **b == b'\n').count() + 1
}

fn one_line(text: &str, error: &toml::de::Error, key: &str) -> String {
    let line = error
        .span()
        .map(|span| format!("line {}: ", line_of(text, span.start)))
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
        assert_eq!(config.host.runner.load_wait_ms, 2000);
        assert_eq!(config.host.runner.ask_timeout_ms, 600_000);
        assert_eq!(config.serve.session_idle_ms, 60_000);
        assert_eq!(config.nats, rho_bridge_nats::NatsConfig::default());
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
        let own = config.host.plugins[0].grants.as_ref().unwrap();
        assert_eq!(own.write, [dir.path().join("out")]);
        assert!(own.network && !own.processes);
        assert!(config.host.plugins[1].grants.is_none());
        let all = &config.host.workers.grants;
        assert_eq!(
            all.read,
            [PathBuf::from("/srv/data"), dir.path().join("data")]
        );
        assert!(all.processes && !all.network);
        assert_eq!(all.env, Grants::default().env);
        assert_eq!(
            config.host.workers.identity,
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
        let text = EVERY_SECTION;
        let config = parse(text).unwrap();
        assert!(!config.host.plugins[0].isolate);
        assert_eq!(config.host.runner.keep_details, KeepDetails::UpTo(4096));
        assert_eq!(config.host.timeouts["spin"], 500);
        assert_eq!(
            config.host.runner_config().idle_timeout_overrides["crawl"],
            std::time::Duration::from_secs(30)
        );
        assert_eq!(config.host.quarantine.max_failures, 2);
        assert_eq!(config.host.workers.spares, 0);
        assert_eq!(
            config.host.workers.max_frame,
            64 << 20,
            "unset worker keys keep their defaults"
        );
        let action = |tool: &str| {
            config
                .host
                .gate
                .iter()
                .find(|r| rho_runtime::pattern_matches(&r.tool, tool))
                .map(|r| r.action)
        };
        assert_eq!(action("exit_process"), Some(Action::Deny));
        assert_eq!(action("echo"), Some(Action::Ask));
        assert_eq!(config.serve.ask_fallback, Action::Allow);
        let empty = parse("").unwrap();
        assert_eq!(empty.host.runner.default_timeout_ms, 60_000);
        assert!(empty.host.gate.is_empty());
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

    /// A file with every section set away from its defaults.
    const EVERY_SECTION: &str = r#"
        [[plugins]]
        dir = "/srv/plugins"
        isolate = false
        max_versions = 3
        grants = { read = ["/srv/data"], network = true }
        locked = true
        [runner]
        default_timeout_ms = 5000
        ask_timeout_ms = 90000
        keep_details = { up_to = 4096 }
        [timeouts]
        spin = 500
        [idle_timeouts]
        crawl = 30000
        [quarantine]
        max_failures = 2
        window_ms = 1000
        [workers]
        spares = 0
        limits = { memory_bytes = 1073741824 }
        [[gate]]
        tool = "exit_*"
        action = "deny"
        [[gate]]
        tool = "*"
        action = "ask"
        [serve]
        ask_fallback = "allow"
        http = "127.0.0.1:8750"
        allowed_origins = ["https://ide.example.com"]
        max_sessions = 8
        web = true
        [nats]
        url = "nats://127.0.0.1:4222"
        host = "build-1"
        stream = "EVENTS"
        export = false
        [[remote]]
        nats = "nats://10.0.0.2:4222"
        token_file = "/etc/rho/token"
        [[mcp]]
        name = "everything"
        command = "npx"
        args = ["-y", "@modelcontextprotocol/server-everything"]
        grants = { read = ["/srv/mcp"], network = true, env = ["PATH", "HOME"] }
        package_caches = true
        cwd = "/srv/mcp"
        memory_mb = 2048
        processes = 256
        stateless = true
        sandbox = false
        start_timeout_ms = 60000
        tools.echo = { read_only = true, title = "Echo", timeout_ms = 5000 }

        [[mcp]]
        name = "remote"
        url = "https://example.com/mcp"
        token_file = "/srv/mcp/token"

        [wasm]
        memory_mb = 64
        scratch_mb = 8
        fuel = 1000000
        cache_dir = "/var/cache/rho/wasm"

        [otel]
        endpoint = "http://collector:4317"
        protocol = "grpc"
        service_name = "agent-tools"
        resource_attributes = { "deployment.environment" = "test" }
        export_arguments = true
        queue = 1024
        metric_interval_ms = 5000
        timeout_ms = 2000

        [trust]
        keys = ["RWTG7/F3IHHR67K3LBaN/Y/ZkFzmWmwCmsYf3z+Ncx0IFK3t/S7g+0iY"]
        key_files = ["/etc/rho/publisher.pub"]
        allow_unsigned = true

        [policy]
        file = "/etc/rho/policy.cedar"

        [[limit]]
        tool = "write_*"
        source = "files"
        principal = "ci"
        scope = "tools:write"
        rate = "100/min"
        burst = 10
        concurrency = 2
    "#;

    /// `config` as a `rho.toml` text, each section serialised by its own type.
    fn to_toml(config: &Config) -> String {
        let mut table = toml::Table::try_from(&config.host).unwrap();
        table.insert(
            "serve".into(),
            toml::Value::try_from(&config.serve).unwrap(),
        );
        table.insert("nats".into(), toml::Value::try_from(&config.nats).unwrap());
        table.insert(
            "remote".into(),
            toml::Value::try_from(&config.remote).unwrap(),
        );
        table.insert("mcp".into(), toml::Value::try_from(&config.mcp).unwrap());
        table.insert("wasm".into(), toml::Value::try_from(&config.wasm).unwrap());
        table.insert("otel".into(), toml::Value::try_from(&config.otel).unwrap());
        table.insert(
            "trust".into(),
            toml::Value::try_from(&config.trust).unwrap(),
        );
        table.insert(
            "policy".into(),
            toml::Value::try_from(&config.policy).unwrap(),
        );
        toml::to_string(&table).unwrap()
    }

    #[test]
    fn every_section_round_trips() {
        let config = parse(EVERY_SECTION).unwrap_or_else(|e| panic!("{e}"));
        config.check().unwrap();
        let defaults = Config::default();
        assert_ne!(config.host.plugins, defaults.host.plugins);
        assert_ne!(config.host.runner, defaults.host.runner);
        assert_eq!(
            config.host.runner_config().ask_timeout,
            std::time::Duration::from_secs(90)
        );
        assert_ne!(config.host.timeouts, defaults.host.timeouts);
        assert_ne!(config.host.quarantine, defaults.host.quarantine);
        assert_ne!(config.host.workers, defaults.host.workers);
        assert_ne!(config.host.gate, defaults.host.gate);
        assert_ne!(config.serve, defaults.serve);
        assert_ne!(config.nats, defaults.nats);
        assert_ne!(config.remote, defaults.remote);
        assert_ne!(config.mcp, defaults.mcp);
        assert_ne!(config.wasm, defaults.wasm);
        assert_ne!(config.otel, defaults.otel);
        assert_ne!(config.trust, defaults.trust);
        assert_ne!(config.policy, defaults.policy);
        assert_ne!(config.host.limit, defaults.host.limit);
        assert_eq!(config.mcp[0].tools["echo"].read_only, Some(true));
        let text = to_toml(&config);
        let again = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(again, config, "{text}");
        // Every section the file may hold is one some part reads, and only one.
        for section in HostConfig::SECTIONS {
            assert!(!PARTS.contains(section), "{section}");
        }
        let written: toml::Table = toml::from_str(&text).unwrap();
        let mut keys: Vec<&str> = written.keys().map(String::as_str).collect();
        let mut known: Vec<&str> = HostConfig::SECTIONS.iter().copied().chain(PARTS).collect();
        keys.sort_unstable();
        known.sort_unstable();
        assert_eq!(keys, known);
    }

    #[test]
    fn quarantine_cool_downs_parse_and_a_cap_below_the_first_is_refused() {
        let config = parse(
            "[quarantine]\ncool_down_ms = 60000\ncool_down_growth = 3\nmax_cool_down_ms = 600000\n",
        )
        .unwrap();
        let q = config.host.quarantine;
        assert_eq!(q.cool_down, std::time::Duration::from_secs(60));
        assert_eq!(q.cool_down_after(2), std::time::Duration::from_secs(540));
        let checked = |text: &str| parse(text).unwrap().check().unwrap_err().to_string();
        let err = checked("[quarantine]\ncool_down_ms = 60000\nmax_cool_down_ms = 1000\n");
        assert!(
            err.starts_with("`quarantine.max_cool_down_ms`: 1000 is out of range"),
            "{err}"
        );
        let err = checked("[quarantine]\ncool_down_growth = 0\n");
        assert!(err.contains("`quarantine.cool_down_growth`"), "{err}");
    }

    #[test]
    fn an_unknown_key_in_any_section_is_one_line_naming_it_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rho.toml");
        // `[timeouts]` maps any tool name to a timeout: it has no unknown keys.
        let cases = [
            (
                "[[plugins]]\ndir = \"p\"\nisolated = true\n",
                "plugins[0]",
                "isolated",
            ),
            ("[runner]\ntimeout = 5\n", "runner", "timeout"),
            (
                "[quarantine]\nmax_failure = 5\n",
                "quarantine",
                "max_failure",
            ),
            ("[workers]\nspare = 1\n", "workers", "spare"),
            ("[workers.limits]\nmemory = 1\n", "workers.limits", "memory"),
            ("[workers.grants]\nnet = true\n", "workers.grants", "net"),
            (
                "[[gate]]\ntool = \"x\"\nverdict = \"deny\"\n",
                "gate[0]",
                "verdict",
            ),
            (
                "[serve]\nhttp_addr = \"127.0.0.1:1\"\n",
                "serve",
                "http_addr",
            ),
            ("[nats]\nurls = \"nats://x\"\n", "nats", "urls"),
            ("[wasm]\nmemory = 1\n", "wasm", "memory"),
            (
                "[[remote]]\nnats = \"nats://x\"\ncreds = \"c\"\n",
                "remote[0]",
                "creds",
            ),
            (
                "[[mcp]]\nname = \"m\"\ncommand = \"x\"\nenvs = []\n",
                "mcp[0]",
                "envs",
            ),
        ];
        for (text, section, key) in cases {
            std::fs::write(&path, text).unwrap();
            let err = load(&path).unwrap_err();
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.starts_with(&path.display().to_string()), "{err}");
            // The unknown key is each case's last line.
            let line = text.lines().count();
            assert!(err.contains(&format!(": line {line}: ")), "{err}");
            assert!(err.contains(&format!("`{section}.{key}`")), "{err}");
            assert!(err.contains(&format!("unknown field `{key}`")), "{err}");
        }
        std::fs::write(&path, "[runner]\nmax_turns = 3\n\n[plugin]\ndir = \"p\"\n").unwrap();
        let err = load(&path).unwrap_err();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("line 4: unknown section `plugin`, expected one of plugins, runner"),
            "{err}"
        );
        assert!(
            err.ends_with("serve, nats, remote, mcp, wasm, otel, trust, policy"),
            "{err}"
        );
    }

    #[test]
    fn every_section_makes_its_paths_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rho.toml");
        let text = "[serve]\njournal = \"j.jsonl\"\ntoken_file = \"t\"\n\
                    [nats]\nnkey_file = \"n\"\ncredentials = \"c\"\n\
                    [[remote]]\nnats = \"nats://x\"\nnkey_file = \"rn\"\n\
                    [[mcp]]\nname = \"m\"\ncommand = \"x\"\ncwd = \"srv\"\n";
        std::fs::write(&path, text).unwrap();
        let config = load(&path).unwrap();
        let at = |name: &str| Some(dir.path().join(name));
        assert_eq!(config.serve.journal, at("j.jsonl"));
        assert_eq!(config.serve.token_file, at("t"));
        assert_eq!(config.nats.nkey_file, at("n"));
        assert_eq!(config.nats.credentials, at("c"));
        assert_eq!(config.remote[0].nkey_file, at("rn"));
        assert_eq!(config.mcp[0].cwd, at("srv"));
    }

    #[test]
    fn mcp_servers_are_checked() {
        let err = parse("[[mcp]]\nname = \"a b\"\ncommand = \"x\"\n")
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(err.key, "mcp.name");
        let two =
            "[[mcp]]\nname = \"a\"\ncommand = \"x\"\n[[mcp]]\nname = \"a\"\ncommand = \"y\"\n";
        assert_eq!(parse(two).unwrap().check().unwrap_err().key, "mcp.a");
    }
}
