//! MCP servers in any language as rho tool sources: a server's tools join the host's registry
//! beside the plugins' (origin `mcp:<name>`), behind the same gate, timeouts, typed outcomes,
//! events, journal, statistics and quarantine, and the server is supervised (restarted with a
//! backoff, calls failing fast while it is down, a hung server found and restarted).
//!
//! ```no_run
//! use rho_mcp_source::{McpServer, McpSource};
//! use rho_runtime::Host;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let server = McpServer::command("everything", "npx", ["-y", "@modelcontextprotocol/server-everything"]);
//! let (host, _reports) = Host::builder()
//!     .source("mcp:everything", McpSource::new(server))
//!     .build()
//!     .await?;
//! let result = host.call("echo", serde_json::json!({"message": "hi"})).await;
//! println!("{}: {}", result.outcome, result.text());
//! # Ok(()) }
//! ```
//!
//! The server runs in the sandbox of isolated plugins ([`rho_runtime::SandboxedCommand`]), deny
//! by default, with its entry's grants ([`McpServer::grants`]). See [`McpSource`] for the
//! supervision's rules, and [`McpServer::stateless`] for one server process per call.
#![warn(missing_docs)]

mod call;
mod config;
mod convert;
mod handler;
mod http;
pub mod logs;
mod shared;
mod source;
mod stdout;

pub use config::{McpServer, ToolOverride};
pub use source::McpSource;
