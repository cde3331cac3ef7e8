//! An MCP server as configured: `[[mcp]]` in `rho.toml`, or built in code.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use rho_runtime::ConfigError;
use serde::{Deserialize, Serialize};

/// One MCP server run over stdio as a tool source: the command that starts it, what of the
/// host's environment it gets, and what rho says of its tools beyond what the server declares.
///
/// ```
/// use rho_mcp_source::McpServer;
/// let server = McpServer::command("everything", "npx", ["-y", "@modelcontextprotocol/server-everything"]);
/// assert_eq!(server.name, "everything");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// The server's name: its tools' origin is `mcp:<name>`, and events and views name it so.
    pub name: String,
    /// The program to start (found on `PATH` when it has no slash).
    pub command: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The names of the host's environment variables the server gets (`PATH` always); every
    /// other variable is cleared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The directory it starts in (default: the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// How long starting and initializing may take, milliseconds (default 30 s: `npx` of an
    /// installed package takes seconds).
    #[serde(default = "default_start_ms")]
    pub start_timeout_ms: u64,
    /// What rho says of some of its tools instead of what the server declares, by tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolOverride>,
}

fn default_start_ms() -> u64 {
    30_000
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
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cwd: None,
            start_timeout_ms: default_start_ms(),
            tools: BTreeMap::new(),
        }
    }

    /// A server from a command line, split at white space: `NAME=COMMAND ARGS...` names it, else
    /// it is named after the package or script it runs (`npx -y
    /// @modelcontextprotocol/server-everything` is `server-everything`, `uvx mcp-server-fetch`
    /// is `mcp-server-fetch`, `python3 /srv/tools.py` is `tools`); `None` for a blank line.
    ///
    /// ```
    /// use rho_mcp_source::McpServer;
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
        let derived: String = runs
            .rsplit('/')
            .next()
            .unwrap_or(runs)
            .split('@')
            .find(|part| !part.is_empty())
            .and_then(|part| part.split('.').next())
            .filter(|part| !part.is_empty())
            .unwrap_or("mcp")
            .chars()
            .take(64)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Some(McpServer::command(&name.unwrap_or(derived), command, args))
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
        if self.command.trim().is_empty() {
            return Err(ConfigError {
                key: format!("mcp.{}.command", self.name),
                problem: "empty".into(),
            });
        }
        ConfigError::check_range(
            &format!("mcp.{}.start_timeout_ms", self.name),
            self.start_timeout_ms,
            100,
            600_000,
        )
    }

    /// Makes the entry's relative paths (its `cwd`) relative to `base`, its file's directory.
    pub fn resolve_paths(&mut self, base: &std::path::Path) {
        if let Some(cwd) = &mut self.cwd {
            rho_runtime::resolve_path(base, cwd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let s =
            McpServer::from_command_line("npx -y @modelcontextprotocol/server-everything").unwrap();
        assert_eq!(s.args, ["-y", "@modelcontextprotocol/server-everything"]);
        assert!(McpServer::from_command_line("   ").is_none());
        assert!(s.check().is_ok());
        let bad = McpServer::command("a b", "x", Vec::<String>::new());
        assert_eq!(bad.check().unwrap_err().key, "mcp.name");
    }
}
