//! An MCP server as configured: `[[mcp]]` in `rho.toml`, or built in code.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

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

    /// A server from a command line (`npx -y @modelcontextprotocol/server-everything`), split at
    /// white space, named after its last word's last path segment (`server-everything`) unless
    /// `name` is given; `None` for a blank line.
    pub fn from_command_line(line: &str, name: Option<&str>) -> Option<McpServer> {
        let mut words = line.split_whitespace();
        let command = words.next()?;
        let args: Vec<&str> = words.collect();
        let last = args.last().copied().unwrap_or(command);
        let derived: String = last
            .rsplit('/')
            .next()
            .unwrap_or(last)
            .split('@')
            .find(|part| !part.is_empty())
            .unwrap_or("mcp")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Some(McpServer::command(name.unwrap_or(&derived), command, args))
    }

    /// How long starting and initializing may take.
    pub fn start_timeout(&self) -> Duration {
        Duration::from_millis(self.start_timeout_ms)
    }

    /// Why this entry cannot serve, in one line naming the key; `None` when it can.
    pub fn problem(&self) -> Option<String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Some(format!(
                "`mcp.name`: {:?} must be 1 to 64 letters, digits, `-` or `_`",
                self.name
            ));
        }
        if self.command.trim().is_empty() {
            return Some(format!("`mcp.command` of `{}` is empty", self.name));
        }
        if !(100..=600_000).contains(&self.start_timeout_ms) {
            return Some(format!(
                "`mcp.start_timeout_ms` of `{}`: {} is outside 100..=600000",
                self.name, self.start_timeout_ms
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_names_its_server() {
        let s =
            McpServer::from_command_line("npx -y @modelcontextprotocol/server-everything", None)
                .unwrap();
        assert_eq!(
            (s.name.as_str(), s.command.as_str()),
            ("server-everything", "npx")
        );
        assert_eq!(s.args, ["-y", "@modelcontextprotocol/server-everything"]);
        let s = McpServer::from_command_line("python3 /srv/my server.py", Some("mine")).unwrap();
        assert_eq!(s.name, "mine");
        assert!(McpServer::from_command_line("   ", None).is_none());
        assert!(s.problem().is_none());
        let bad = McpServer::command("a b", "x", Vec::<String>::new());
        assert!(bad.problem().unwrap().contains("mcp.name"));
    }
}
