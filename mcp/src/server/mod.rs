//! The MCP server over a host ([`RhoServer`], an rmcp `ServerHandler`): its tool list, its
//! calls (each in a task of its own behind the gate, asking the client's user when a rule asks),
//! MCP Tasks, the meta-tools, logging, list-change notices; served over stdio by [`Stdio`]
//! (and over HTTP by the `http` module).

mod asking;
mod handler;
pub(crate) mod jsonrpc;
mod logging;
pub(crate) mod meta_tools;
mod notes;
mod observe;
mod settings;
mod stdio;
mod tasks;

pub use handler::RhoServer;
pub use observe::{RequestInfo, RequestObserver, RequestSpan, Transport};
pub use settings::ServeConfig;
pub use stdio::{Stdio, StdioEnd, StdioError, serve_stdio};

/// Now, Unix milliseconds.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
