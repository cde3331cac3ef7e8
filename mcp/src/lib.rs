//! rho and the Model Context Protocol, both ways, in one crate:
//!
//! - **MCP servers as tool sources** ([`McpSource`], always built): a server's tools join the
//!   host's registry beside the plugins' (origin `mcp:<name>`), behind the same gate, timeouts,
//!   typed outcomes, events, journal, statistics and quarantine, and the server is supervised
//!   (restarted with a backoff, calls failing fast while it is down, a hung server found and
//!   restarted). Streamable HTTP servers too, with the `client-http` feature (on by default).
//! - **A host's tools as an MCP server** ([`RhoServer`], the `server` feature): over stdio
//!   ([`serve_stdio`], [`Stdio`]) and, with the `server-http` feature, over Streamable HTTP
//!   ([`serve_http`], [`Endpoint`]); both spec eras (2025-06-18 / 2025-11-25 sessions and
//!   2026-07-28 requests), MCP Tasks, elicitation, progress, logging and list changes.
//! - **The mapping** between rho's words and MCP's ([`convert`]), one function per direction and
//!   shape, shared by both sides.
//!
//! An MCP server's tools in a host:
//!
//! ```no_run
//! use rho_mcp::{McpServer, McpSource};
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
//! A host's tools to any MCP client over stdio (the `server` feature):
//!
//! ```no_run
//! # #[cfg(feature = "server")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let (host, _reports) = rho_runtime::Host::builder()
//!     .plugin_dir("plugins", rho_runtime::DirOptions::default())
//!     .build()
//!     .await?;
//! rho_mcp::serve_stdio(&host).await?;
//! # Ok(()) }
//! ```
//!
//! A source's server runs in the sandbox of isolated plugins ([`rho_runtime::SandboxedCommand`]),
//! deny by default, with its entry's grants ([`McpServer::grants`]). See [`McpSource`] for the
//! supervision's rules, and [`McpServer::stateless`] for one server process per call.
#![warn(missing_docs)]

pub mod convert;
#[cfg(feature = "server-http")]
mod http;
#[cfg(feature = "server")]
mod server;
mod source;

#[cfg(feature = "server-http")]
pub use http::{
    Endpoint, Guard, HttpError, Limits, SessionLimits, Started,
    auth::{Access, NamedToken, StaticTokens, TokensFile, token_digest},
    oauth::{OAuthConfig, OAuthError, OAuthVerifier},
    refusal::Refusal,
    serve_http,
};
#[cfg(feature = "server")]
pub use server::{
    RequestInfo, RequestObserver, RequestSpan, RhoServer, ServeConfig, Stdio, StdioEnd, StdioError,
    Transport, serve_stdio,
};
pub use source::{McpServer, McpSource, ToolOverride};
