//! `[serve]`: how a [`RhoServer`](crate::RhoServer) serves the host's tools to MCP clients, over
//! stdio or HTTP; the section of `rho.toml` this crate owns.

use std::path::{Path, PathBuf};

use rho_runtime::{Action, ConfigError, MAX_TIMEOUT_MS, resolve_path};
use serde::{Deserialize, Serialize};

/// `serve`: serving the host's tools to MCP clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// What an "ask" rule does when the client cannot ask its user: deny or allow.
    pub ask_fallback: Action,
    /// Write every event to this JSON-lines journal (`rho serve`, and `rho node`).
    pub journal: Option<PathBuf>,
    /// The largest answer sent to a client, bytes (text, base64 images and structured content
    /// together); a larger one is cut with a note. Below the 10 MiB common clients accept.
    pub max_result_bytes: usize,
    /// Calls running at once at most; further requests wait for a turn.
    pub max_calls: usize,
    /// Serve MCP Streamable HTTP at `/mcp` on this address instead of stdio. Any address but a
    /// loopback one requires a bearer token.
    pub http: Option<std::net::SocketAddr>,
    /// A file holding the bearer token HTTP clients must send (`Authorization: Bearer ...`);
    /// readable by its owner only. Without one, a server on a non-loopback address makes a token
    /// and prints it once.
    pub token_file: Option<PathBuf>,
    /// Named tokens (`rho token add`): a file of `[[token]]` entries, each a principal with its
    /// scopes and the SHA-256 of its token (never the token); owner-only, read again when it
    /// changes. Not with `token_file` or `oauth`.
    pub tokens_file: Option<PathBuf>,
    /// OAuth 2.1 resource server (`[serve.oauth]`): access tokens of these issuers, for this
    /// server. Not with token files.
    #[cfg(feature = "server-http")]
    pub oauth: Option<crate::http::oauth::OAuthConfig>,
    /// Browser origins allowed to call over HTTP (`https://app.example.com`, `http://localhost:*`);
    /// a request with any other `Origin` is refused (DNS rebinding). Empty: the loopback origins.
    pub allowed_origins: Vec<String>,
    /// The largest HTTP request body, bytes.
    pub max_body_bytes: usize,
    /// HTTP requests handled at once at most; more are answered 503.
    pub max_requests: usize,
    /// MCP sessions (of 2025-era clients) open over HTTP at once at most; an `initialize` beyond
    /// closes the session idle longest, and is answered 503 only when every one has a request in
    /// flight.
    pub max_sessions: usize,
    /// MCP sessions one peer address may hold at once; past it, its own idle-longest one closes.
    pub max_sessions_per_peer: usize,
    /// An MCP session with no request for this long closes, milliseconds.
    pub session_idle_ms: u64,
    /// With `http`: serve the live page at `/`.
    pub web: bool,
    /// List two meta-tools besides the tools, for clients that never reread the list after a
    /// reload: `rho_find_tools` (search the tools as they are now) and `rho_call_tool` (call one
    /// by name, under the same gate).
    pub meta_tools: bool,
    /// MCP Tasks (2026-07-28 clients that declare `io.modelcontextprotocol/tasks`): a call of a
    /// tool whose timeout is over this, milliseconds, runs as a task (besides the tools that
    /// declare task support); `None`: only those.
    pub task_after_ms: Option<u64>,
    /// How long a task stays readable after it was created, milliseconds (its `ttlMs`); a task
    /// still running then is cancelled.
    pub task_ttl_ms: u64,
    /// How often a client is told to poll a task, milliseconds (its `pollIntervalMs`).
    pub task_poll_ms: u64,
}

impl Default for ServeConfig {
    /// Deny when nobody can be asked, no journal, 8 MiB answers, 64 calls at once, stdio (no
    /// HTTP), loopback origins, 16 MiB request bodies, 256 HTTP requests and 256 sessions at once
    /// (64 per peer address, each closed after a minute idle), no meta-tools; tasks for tools of
    /// over a minute's timeout, kept an hour, polled every second.
    fn default() -> Self {
        ServeConfig {
            ask_fallback: Action::Deny,
            journal: None,
            max_result_bytes: 8 << 20,
            max_calls: 64,
            http: None,
            token_file: None,
            tokens_file: None,
            #[cfg(feature = "server-http")]
            oauth: None,
            allowed_origins: Vec::new(),
            max_body_bytes: 16 << 20,
            max_requests: 256,
            max_sessions: 256,
            max_sessions_per_peer: 64,
            session_idle_ms: 60_000,
            web: false,
            meta_tools: false,
            task_after_ms: Some(60_000),
            task_ttl_ms: 3_600_000,
            task_poll_ms: 1_000,
        }
    }
}

impl ServeConfig {
    /// Checks every number against its range, and that the fallback is a decision.
    pub fn check(&self) -> Result<(), ConfigError> {
        let within = ConfigError::check_range;
        within("serve.max_calls", self.max_calls as u64, 1, 4096)?;
        within(
            "serve.max_body_bytes",
            self.max_body_bytes as u64,
            1 << 10,
            1 << 30,
        )?;
        within("serve.max_requests", self.max_requests as u64, 1, 1 << 16)?;
        within("serve.max_sessions", self.max_sessions as u64, 1, 1 << 16)?;
        within(
            "serve.max_sessions_per_peer",
            self.max_sessions_per_peer as u64,
            1,
            1 << 16,
        )?;
        within(
            "serve.session_idle_ms",
            self.session_idle_ms,
            1_000,
            MAX_TIMEOUT_MS,
        )?;
        within(
            "serve.max_result_bytes",
            self.max_result_bytes as u64,
            1 << 10,
            1 << 30,
        )?;
        if let Some(after) = self.task_after_ms {
            within("serve.task_after_ms", after, 1, MAX_TIMEOUT_MS)?;
        }
        within("serve.task_ttl_ms", self.task_ttl_ms, 1_000, 7 * 86_400_000)?;
        within("serve.task_poll_ms", self.task_poll_ms, 10, 60_000)?;
        let ways = [
            self.token_file.is_some(),
            self.tokens_file.is_some(),
            self.oauth_configured(),
        ];
        if ways.into_iter().filter(|w| *w).count() > 1 {
            return Err(ConfigError {
                key: "serve".into(),
                problem: "token_file, tokens_file and [serve.oauth] are one way each: give one"
                    .into(),
            });
        }
        if self.web && self.oauth_configured() {
            return Err(ConfigError {
                key: "serve.web".into(),
                problem: "a browser page cannot send an OAuth access token (tokens never go in \
                          a URL): follow the server with `rho watch --attach http://ADDR \
                          --token-file FILE` instead"
                    .into(),
            });
        }
        #[cfg(feature = "server-http")]
        if let Some(oauth) = &self.oauth
            && let Err(crate::OAuthError::Config(problem)) = oauth.check()
        {
            return Err(ConfigError {
                key: "serve.oauth".into(),
                problem,
            });
        }
        if self.ask_fallback == Action::Ask {
            return Err(ConfigError {
                key: "serve.ask_fallback".into(),
                problem: "expected \"deny\" or \"allow\", not \"ask\"".into(),
            });
        }
        Ok(())
    }

    /// Whether `[serve.oauth]` is given.
    fn oauth_configured(&self) -> bool {
        #[cfg(feature = "server-http")]
        return self.oauth.is_some();
        #[cfg(not(feature = "server-http"))]
        false
    }

    /// Makes the journal and the token file relative to `base`, the configuration file's
    /// directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        for path in [
            &mut self.journal,
            &mut self.token_file,
            &mut self.tokens_file,
        ]
        .into_iter()
        .flatten()
        {
            resolve_path(base, path);
        }
    }
}
