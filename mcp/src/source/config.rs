//! An MCP server as configured: `[[mcp]]` in `rho.toml`, or built in code.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use rho_runtime::{ConfigError, Grants, SandboxedCommand, WorkerLimits, WorkerOptions};
use serde::{Deserialize, Serialize};

/// One MCP server as a tool source: the command that starts it (a stdio server, run in the
/// sandbox) or the URL of a Streamable HTTP server (run elsewhere), what it may do, and what rho
/// says of its tools beyond what the server declares.
///
/// ```
/// use rho_mcp::McpServer;
/// let server = McpServer::command("everything", "npx", ["-y", "@modelcontextprotocol/server-everything"]);
/// assert_eq!(server.name, "everything");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// The server's name: its tools' origin is `mcp:<name>`, and events and views name it so.
    pub name: String,
    /// The program to start (found on the `PATH` its grants pass when it has no slash); empty
    /// for a server at [`url`](Self::url).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// A Streamable HTTP server's endpoint (`http://127.0.0.1:3001/mcp`) instead of a command:
    /// rho neither starts nor confines it, and gives it everything else (supervision by ping,
    /// reconnection with the backoff, timeouts, accounting). Needs the `client-http` feature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A file holding the bearer token sent to the [`url`](Self::url) server; only its owner may
    /// read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// What the server may do beyond the sandbox's defaults, as for isolated plugins: paths to
    /// read and write, the network, the host's environment keys it gets (`env`: by default
    /// `PATH`, `LANG`, `LC_ALL`, `TZ`, `RUST_LOG`; every other variable is cleared). Child
    /// processes are always granted to a server.
    #[serde(default)]
    pub grants: Grants,
    /// Read access to the host user's package caches that exist (`~/.npm`, `~/.cache/uv`,
    /// `~/.cache/pip`), for `npx` and `uvx` of packages already fetched.
    #[serde(default, skip_serializing_if = "is_false")]
    pub package_caches: bool,
    /// The directory it starts in, granted to read (default: its `HOME`, see
    /// [`home_mb`](Self::home_mb)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Run it in the sandbox (default). `false` gives it the host's rights and file system (the
    /// resource limits still apply, and its process group is killed with it; a process that
    /// leaves the group can then outlive it): for servers the sandbox cannot run.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub sandbox: bool,
    /// The writable memory of each of its processes, MiB (`RLIMIT_DATA`: heap and private
    /// writable mappings; address space only reserved, as V8 reserves gigabytes, does not
    /// count). Default 4096.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
    /// Its processes and threads together, at most (default 512: `npx` starts `npm`, `sh` and
    /// `node`, each with a dozen threads).
    #[serde(default = "default_processes")]
    pub processes: u64,
    /// One server process per call (started for the call, its tools listed from a first one
    /// kept for listing): for servers that keep no state between calls and may crash or hang
    /// on some input; a hang or crash then touches that call alone.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stateless: bool,
    /// How long starting and initializing may take, milliseconds (default 30 s: `npx` of an
    /// installed package takes seconds).
    #[serde(default = "default_start_ms")]
    pub start_timeout_ms: u64,
    /// The size of its `HOME`, MiB (default 256). In the sandbox its `HOME` is its `/tmp`, an
    /// in-memory file system of its own of this size: what it writes there (caches,
    /// downloads) never reaches the host's disk, a write past it fails with "no space left on
    /// device", and it starts empty at each start of the server (read the host's package caches
    /// with `package_caches`). Without the sandbox, its `HOME` is a private directory of the
    /// host's, unbounded.
    #[serde(default = "default_home_mb")]
    pub home_mb: u64,
    /// What rho says of some of its tools instead of what the server declares, by tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolOverride>,
}

fn default_start_ms() -> u64 {
    30_000
}

fn default_home_mb() -> u64 {
    256
}

fn default_memory_mb() -> u64 {
    4096
}

fn default_processes() -> u64 {
    512
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What rho says of one tool of a server instead of what the server declares.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// MCP `readOnlyHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// MCP `destructiveHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// MCP `idempotentHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// MCP `openWorldHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
    /// A title for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool's timeout, milliseconds (the host's overrides still win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The tool's idle limit, milliseconds: a call without progress notifications for this long
    /// ends `timed_out` (the host's overrides still win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
}

impl McpServer {
    /// A server named `name` started as `command args...`, with the defaults.
    pub fn command<I, S>(name: &str, command: &str, args: I) -> McpServer
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        McpServer {
            name: name.to_owned(),
            command: command.to_owned(),
            url: None,
            token_file: None,
            args: args.into_iter().map(Into::into).collect(),
            grants: Grants::default(),
            package_caches: false,
            cwd: None,
            sandbox: true,
            memory_mb: default_memory_mb(),
            processes: default_processes(),
            stateless: false,
            start_timeout_ms: default_start_ms(),
            home_mb: default_home_mb(),
            tools: BTreeMap::new(),
        }
    }

    /// A Streamable HTTP server named `name` at `url`, with the defaults.
    ///
    /// ```
    /// use rho_mcp::McpServer;
    /// let server = McpServer::url("everything", "http://127.0.0.1:3001/mcp");
    /// assert!(server.check().is_ok());
    /// ```
    pub fn url(name: &str, url: &str) -> McpServer {
        McpServer {
            url: Some(url.to_owned()),
            ..McpServer::command(name, "", Vec::<String>::new())
        }
    }

    /// A server from a command line, split at white space: `NAME=COMMAND ARGS...` names it, else
    /// it is named after the package or script it runs (`npx -y
    /// @modelcontextprotocol/server-everything` is `server-everything`, `uvx mcp-server-fetch`
    /// is `mcp-server-fetch`, `python3 /srv/tools.py` is `tools`); `None` for a blank line. A
    /// line that is an `http://` or `https://` URL is a Streamable HTTP server, named after its
    /// host and port unless named.
    ///
    /// ```
    /// use rho_mcp::McpServer;
    /// let s = McpServer::from_command_line("npx -y @modelcontextprotocol/server-everything").unwrap();
    /// assert_eq!((s.name.as_str(), s.command.as_str()), ("server-everything", "npx"));
    /// let s = McpServer::from_command_line("fs=npx -y @modelcontextprotocol/server-filesystem /").unwrap();
    /// assert_eq!((s.name.as_str(), s.args.len()), ("fs", 3));
    /// ```
    pub fn from_command_line(line: &str) -> Option<McpServer> {
        let line = line.trim();
        let (name, line) = match line.split_once('=') {
            Some((name, rest))
                if !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
            {
                (Some(name.to_owned()), rest)
            }
            _ => (None, line),
        };
        let mut words = line.split_whitespace();
        let command = words.next()?;
        if command.starts_with("http://") || command.starts_with("https://") {
            let authority = command.split("://").nth(1).unwrap_or("").split('/').next();
            let derived = sanitized(authority.unwrap_or("http"));
            return Some(McpServer::url(&name.unwrap_or(derived), command));
        }
        let args: Vec<&str> = words.collect();
        let runs = args
            .iter()
            .rev()
            .find(|w| {
                !w.starts_with('-') && !w.contains('=') && (w.contains('/') || w.contains('@'))
            })
            .or_else(|| {
                args.iter()
                    .find(|w| !w.starts_with('-') && !w.contains('='))
            })
            .copied()
            .unwrap_or(command);
        let derived: &str = runs
            .rsplit('/')
            .next()
            .unwrap_or(runs)
            .split('@')
            .find(|part| !part.is_empty())
            .and_then(|part| part.split('.').next())
            .filter(|part| !part.is_empty())
            .unwrap_or("mcp");
        Some(McpServer::command(
            &name.unwrap_or(sanitized(derived)),
            command,
            args,
        ))
    }

    /// How long starting and initializing may take.
    pub fn start_timeout(&self) -> Duration {
        Duration::from_millis(self.start_timeout_ms)
    }

    /// Checks the entry: its name (1 to 64 letters, digits, `-` or `_`), a command, the start
    /// bound (100 ms to 10 minutes); an error names the key.
    pub fn check(&self) -> Result<(), ConfigError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(ConfigError {
                key: "mcp.name".into(),
                problem: format!(
                    "{:?} must be 1 to 64 letters, digits, `-` or `_`",
                    self.name
                ),
            });
        }
        let key = |field: &str| format!("mcp.{}.{field}", self.name);
        let problem = |field: &str, problem: &str| ConfigError {
            key: key(field),
            problem: problem.into(),
        };
        match &self.url {
            None if self.command.trim().is_empty() => {
                return Err(problem("command", "empty (give a command, or a url)"));
            }
            Some(_) if !self.command.is_empty() => {
                return Err(problem("url", "a server has a command or a url, not both"));
            }
            Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                return Err(problem("url", "must start with http:// or https://"));
            }
            Some(_) if self.stateless => {
                return Err(problem(
                    "stateless",
                    "only for a server started by a command",
                ));
            }
            Some(_) if !cfg!(feature = "client-http") => {
                return Err(problem(
                    "url",
                    "this build has no Streamable HTTP client (rho-mcp's `client-http` feature)",
                ));
            }
            None if self.token_file.is_some() => {
                return Err(problem("token_file", "only for a server at a url"));
            }
            _ => {}
        }
        ConfigError::check_range(
            &format!("mcp.{}.start_timeout_ms", self.name),
            self.start_timeout_ms,
            100,
            600_000,
        )?;
        ConfigError::check_range(
            &format!("mcp.{}.memory_mb", self.name),
            self.memory_mb,
            16,
            1 << 20,
        )?;
        ConfigError::check_range(
            &format!("mcp.{}.home_mb", self.name),
            self.home_mb,
            1,
            1 << 16,
        )?;
        ConfigError::check_range(
            &format!("mcp.{}.processes", self.name),
            self.processes,
            8,
            1 << 16,
        )?;
        for (tool, over) in &self.tools {
            for (field, ms) in [
                ("timeout_ms", over.timeout_ms),
                ("idle_timeout_ms", over.idle_timeout_ms),
            ] {
                if let Some(ms) = ms {
                    let key = format!("mcp.{}.tools.{tool}.{field}", self.name);
                    ConfigError::check_range(&key, ms, 1, rho_runtime::MAX_TIMEOUT_MS)?;
                }
            }
        }
        Ok(())
    }

    /// The options of its sandbox, from `workers` (the worker executable, the identity, the
    /// start bound) and this entry (grants, limits, the sandbox itself).
    pub fn sandbox_options(&self, workers: &WorkerOptions) -> WorkerOptions {
        let mut grants = self.grants.clone();
        if self.package_caches
            && let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
        {
            grants.read.extend(
                [".npm", ".cache/uv", ".cache/pip"]
                    .map(|dir| home.join(dir))
                    .into_iter()
                    .filter(|dir| dir.is_dir()),
            );
        }
        WorkerOptions {
            grants,
            limits: WorkerLimits {
                data_bytes: Some(self.memory_mb << 20),
                processes: Some(self.processes),
                // Its HOME is its /tmp: one bounded tmpfs (see `home_mb`).
                scratch_bytes: self.home_mb << 20,
                ..SandboxedCommand::default_limits()
            },
            sandbox: self.sandbox,
            start_timeout: self.start_timeout(),
            ..workers.clone()
        }
    }

    /// Makes the entry's relative paths (its `cwd`, grants and token file) relative to `base`,
    /// its file's directory.
    pub fn resolve_paths(&mut self, base: &std::path::Path) {
        for path in self.cwd.iter_mut().chain(&mut self.token_file) {
            rho_runtime::resolve_path(base, path);
        }
        for path in self.grants.read.iter_mut().chain(&mut self.grants.write) {
            rho_runtime::resolve_path(base, path);
        }
    }
}

/// `text` as a server name: letters, digits, `-` and `_` (others become `_`), at most 64.
fn sanitized(text: &str) -> String {
    text.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_zero_timeout_or_idle_limit_is_refused() {
        let mut server = McpServer::command("s", "srv", ["--stdio"]);
        assert!(server.check().is_ok());
        let over = ToolOverride {
            idle_timeout_ms: Some(0),
            ..ToolOverride::default()
        };
        server.tools.insert("crawl".into(), over);
        let err = server.check().unwrap_err().to_string();
        assert!(
            err.starts_with("`mcp.s.tools.crawl.idle_timeout_ms`: 0 is out of range"),
            "{err}"
        );
    }

    #[test]
    fn a_command_line_names_its_server() {
        let name = |line: &str| McpServer::from_command_line(line).unwrap().name;
        assert_eq!(
            name("npx -y @modelcontextprotocol/server-everything@2.1.0"),
            "server-everything"
        );
        assert_eq!(name("uvx mcp-server-fetch"), "mcp-server-fetch");
        assert_eq!(
            name("env PYTHONPATH=/x python3 /srv/tools.py --fast 3"),
            "tools"
        );
        assert_eq!(name("mine=python3 /srv/tools.py"), "mine");
        assert_eq!(name("./server"), "server");
        assert_eq!(name("http://127.0.0.1:3001/mcp"), "127_0_0_1_3001");
        let remote = McpServer::from_command_line("api=https://example.com/mcp").unwrap();
        assert_eq!(remote.url.as_deref(), Some("https://example.com/mcp"));
        assert_eq!(remote.name, "api");
        assert!(remote.command.is_empty() && remote.check().is_ok());
        let s =
            McpServer::from_command_line("npx -y @modelcontextprotocol/server-everything").unwrap();
        assert_eq!(s.args, ["-y", "@modelcontextprotocol/server-everything"]);
        assert!(McpServer::from_command_line("   ").is_none());
        assert!(s.check().is_ok());
        let bad = McpServer::command("a b", "x", Vec::<String>::new());
        assert_eq!(bad.check().unwrap_err().key, "mcp.name");
    }
}
