//! Who may call: how callers are told apart ([`Access`]: none on loopback, bearer tokens of
//! the server's own, OAuth), the allowed origins and host names, and the bounds of requests and
//! sessions, resolved from the flags and `[serve]`.

use std::net::SocketAddr;
use std::path::Path;

use axum::extract::Request;
use axum::http::{HeaderMap, header};

use super::auth::{Access, StaticTokens, make_token};
use super::oauth::{OAuthError, OAuthVerifier};

/// How the HTTP endpoint is guarded, resolved from the flags and `[serve]`.
pub struct Guard {
    /// How callers are told apart.
    pub access: Access,
    /// Allowed `Origin`s (never empty: the loopback origins by default).
    pub allowed_origins: Vec<String>,
    /// The bounds of requests and sessions.
    pub limits: Limits,
    /// Serve the live page at `/`.
    pub web: bool,
}

/// The bounds of an endpoint's requests and sessions (`[serve]` states them).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest request body.
    pub max_body_bytes: usize,
    /// Requests in flight at most.
    pub max_requests: usize,
    /// MCP sessions open at once at most, in all and per peer address, and their idle life.
    pub sessions: SessionLimits,
}

impl Limits {
    /// The bounds `config` (`[serve]`) states.
    pub fn of(config: &crate::ServeConfig) -> Limits {
        Limits {
            max_body_bytes: config.max_body_bytes,
            max_requests: config.max_requests,
            sessions: SessionLimits {
                max: config.max_sessions,
                max_per_peer: config.max_sessions_per_peer,
                idle: std::time::Duration::from_millis(config.session_idle_ms),
            },
        }
    }
}

/// The bounds of MCP sessions (see [`super::admission`]).
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Open at once at most.
    pub max: usize,
    /// Open at once per peer address at most.
    pub max_per_peer: usize,
    /// A session with no request for this long is closed.
    pub idle: std::time::Duration,
}

/// The origins a loopback server's own pages have.
const LOOPBACK_ORIGINS: [&str; 3] = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// Why the HTTP endpoint cannot start: one line.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The token file is unusable.
    #[error("token file {path}: {reason}")]
    TokenFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// No token could be made.
    #[error("cannot make a token: {0}")]
    Random(std::io::Error),
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The named tokens' file is unusable.
    #[error("{0}")]
    Tokens(String),
    /// OAuth cannot be put in force (an issuer unreachable, a bad setting).
    #[error(transparent)]
    OAuth(#[from] OAuthError),
    /// Two ways of telling callers apart were asked for.
    #[error(
        "serve: OAuth and bearer tokens of the server's own are not given together (one way per listener)"
    )]
    TwoWays,
}

impl Guard {
    /// The guard for `addr`: the token from `token_file` (owner-only, one line), else one made
    /// now when `addr` is not loopback (returned: the caller shows it once); the origins
    /// allowed (the loopback origins when empty).
    pub fn new(
        addr: SocketAddr,
        token_file: Option<&Path>,
        allowed_origins: &[String],
        limits: Limits,
        web: bool,
    ) -> Result<(Guard, Option<String>), HttpError> {
        let (access, made) = match token_file {
            Some(path) => (Access::Tokens(StaticTokens::one(&read_token(path)?)), None),
            None if addr.ip().is_loopback() => (Access::Open, None),
            None => {
                let made = make_token().map_err(HttpError::Random)?;
                (Access::Tokens(StaticTokens::one(&made)), Some(made))
            }
        };
        Ok((Guard::with(access, allowed_origins, limits, web), made))
    }

    /// The guard `config` (`[serve]`) describes for `addr`: OAuth (`[serve.oauth]`: its
    /// issuers discovered and their keys fetched now), named tokens (`tokens_file`), or as
    /// [`Guard::new`] (`token_file`); its origins, limits and live page. One way per listener:
    /// two given are refused. The token made now, if one was (to show once).
    pub async fn for_config(
        addr: SocketAddr,
        config: &crate::ServeConfig,
    ) -> Result<(Guard, Option<String>), HttpError> {
        let ways = [
            config.oauth.is_some(),
            config.tokens_file.is_some(),
            config.token_file.is_some(),
        ];
        if ways.iter().filter(|w| **w).count() > 1 {
            return Err(HttpError::TwoWays);
        }
        let limits = Limits::of(config);
        let origins = &config.allowed_origins;
        if let Some(oauth) = &config.oauth {
            let verifier = OAuthVerifier::discover(oauth).await?;
            let access = Access::OAuth(std::sync::Arc::new(verifier));
            return Ok((Guard::with(access, origins, limits, config.web), None));
        }
        if let Some(path) = &config.tokens_file {
            let access = Access::Tokens(StaticTokens::named(path).map_err(HttpError::Tokens)?);
            return Ok((Guard::with(access, origins, limits, config.web), None));
        }
        Guard::new(
            addr,
            config.token_file.as_deref(),
            origins,
            limits,
            config.web,
        )
    }

    /// A guard of `access`, the origins allowed (the loopback origins when empty).
    fn with(access: Access, allowed_origins: &[String], limits: Limits, web: bool) -> Guard {
        let allowed_origins = if allowed_origins.is_empty() {
            LOOPBACK_ORIGINS.map(String::from).to_vec()
        } else {
            allowed_origins.to_vec()
        };
        Guard {
            access,
            allowed_origins,
            limits,
            web,
        }
    }
}

/// Reads a token file: a regular file, not readable by group or others, its first line (16 to
/// 4096 characters, no spaces).
fn read_token(path: &Path) -> Result<String, HttpError> {
    use std::os::unix::fs::MetadataExt;
    let failed = |reason: String| HttpError::TokenFile {
        path: path.display().to_string(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| failed(e.to_string()))?;
    if !meta.is_file() || meta.len() > 8192 {
        return Err(failed("not a regular file of at most 8 KiB".into()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(failed(format!(
            "mode {:o}: others can read it (chmod 600)",
            meta.mode() & 0o777
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
    let token = text.lines().next().unwrap_or_default().trim().to_owned();
    if token.len() < 16
        || token.len() > 4096
        || token.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(failed(
            "its first line must be a token of 16 to 4096 characters without spaces".into(),
        ));
    }
    Ok(token)
}

/// The `token=` of a GET's query, if it has one: how the page's `EventSource` and images
/// authenticate (browsers send no headers of their own for them).
pub(super) fn query_token(request: &Request) -> Option<String> {
    request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.strip_prefix("token="))
        .find_map(percent_decoded)
}

/// `%XX` and `+` of a query value decoded (`None` when it is not UTF-8 after decoding).
pub(super) fn percent_decoded(value: &str) -> Option<String> {
    let mut out = Vec::with_capacity(value.len());
    let mut bytes = value.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex: String = bytes.by_ref().take(2).map(char::from).collect();
                out.push(u8::from_str_radix(&hex, 16).ok()?);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).ok()
}

/// Whether `origin` (`scheme://host[:port]`) is one `allowed` names (`scheme://host`,
/// `scheme://host:port` or `scheme://host:*`), scheme and host compared without case.
pub(super) fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.to_ascii_lowercase();
    let (scheme, rest) = origin.split_once("://").unwrap_or(("", &origin));
    let default_port = if scheme == "https" { "443" } else { "80" };
    let (host, port) = split_port(rest).unwrap_or((rest, default_port));
    allowed.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        let Some((e_scheme, e_rest)) = entry.split_once("://") else {
            return false;
        };
        let (e_host, e_port) = split_port(e_rest).unwrap_or((e_rest, "*"));
        e_scheme == scheme && e_host == host && (e_port == "*" || e_port == port)
    })
}

/// `host:port` (or `[v6]:port`) split at its port, if it has one.
fn split_port(authority: &str) -> Option<(&str, &str)> {
    let at = authority.rfind(':')?;
    let (host, port) = (&authority[..at], &authority[at + 1..]);
    (!host.is_empty() && (host.ends_with(']') || !host.contains(':'))).then_some((host, port))
}

/// Whether the `Host` header names this server: a loopback name or the bound address.
pub(super) fn host_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    let name = split_port(&host).map_or(host.as_str(), |(name, _)| name);
    allowed.iter().any(|a| a == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_hosts() {
        let loopback = LOOPBACK_ORIGINS.map(String::from).to_vec();
        assert!(origin_allowed("http://localhost:3000", &loopback));
        assert!(origin_allowed("HTTP://LOCALHOST:3000", &loopback));
        assert!(origin_allowed("http://[::1]:8080", &loopback));
        assert!(!origin_allowed(
            "http://rebind.evil.example:3000",
            &loopback
        ));
        assert!(!origin_allowed("http://localhost.evil.com", &loopback));
        assert!(!origin_allowed("null", &loopback));
        let exact = vec!["https://ide.example.com".to_owned()];
        assert!(origin_allowed("https://ide.example.com", &exact));
        assert!(!origin_allowed("http://ide.example.com", &exact));

        let hosts = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "[::1]".to_owned(),
        ];
        let with = |host: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, host.parse().unwrap());
            host_allowed(&headers, &hosts)
        };
        assert!(with("127.0.0.1:8750") && with("localhost") && with("[::1]:80"));
        assert!(!with("rebind.evil.example:8750") && !with("localhost.evil.com"));

        assert_eq!(percent_decoded("a%2Bb+c").as_deref(), Some("a+b c"));
    }
}
