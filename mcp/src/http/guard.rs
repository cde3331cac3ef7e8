//! Who may call: the bearer token, the allowed origins and host names, and the bounds of
//! requests and sessions, resolved from the flags and `[serve]`.

use std::net::SocketAddr;
use std::path::Path;

use axum::extract::Request;
use axum::http::{HeaderMap, header};

/// How the HTTP endpoint is guarded, resolved from the flags and `[serve]`.
pub struct Guard {
    /// The bearer token every request must carry, if any.
    pub token: Option<String>,
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
}

impl Guard {
    /// The guard for `addr`: the token from `token_file` (owner-only, one line), else one made
    /// now when `addr` is not loopback (the caller prints it: `true` says it was made); the
    /// origins allowed (the loopback origins when empty).
    pub fn new(
        addr: SocketAddr,
        token_file: Option<&Path>,
        allowed_origins: &[String],
        limits: Limits,
        web: bool,
    ) -> Result<(Guard, bool), HttpError> {
        let (token, made) = match token_file {
            Some(path) => (Some(read_token(path)?), false),
            None if addr.ip().is_loopback() => (None, false),
            None => (Some(make_token().map_err(HttpError::Random)?), true),
        };
        let allowed_origins = if allowed_origins.is_empty() {
            LOOPBACK_ORIGINS.map(String::from).to_vec()
        } else {
            allowed_origins.to_vec()
        };
        Ok((
            Guard {
                token,
                allowed_origins,
                limits,
                web,
            },
            made,
        ))
    }
}

impl Guard {
    /// The guard `config` (`[serve]`) describes for `addr`: its token file, origins, limits and
    /// live page (see [`Guard::new`]).
    pub fn for_config(
        addr: SocketAddr,
        config: &crate::ServeConfig,
    ) -> Result<(Guard, bool), HttpError> {
        Guard::new(
            addr,
            config.token_file.as_deref(),
            &config.allowed_origins,
            Limits::of(config),
            config.web,
        )
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

/// 32 random bytes from the kernel, hex.
fn make_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether a GET's query carries `token=<token>`: how the page's `EventSource` and images
/// authenticate (browsers send no headers of their own for them).
pub(super) fn query_token(request: &Request, token: &str) -> bool {
    request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.strip_prefix("token="))
        .filter_map(percent_decoded)
        .any(|given| same(&given, token))
}

/// `a == b` in time independent of where they differ and of their lengths (their SHA-256
/// digests are compared).
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (
        rho_runtime::sha256_hex(a.as_bytes()),
        rho_runtime::sha256_hex(b.as_bytes()),
    );
    a.bytes()
        .zip(b.bytes())
        .fold(0u8, |diff, (x, y)| diff | (x ^ y))
        == 0
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

/// Whether `headers` carry `Authorization: Bearer <token>` (compared in constant time).
pub(super) fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, given) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then_some(given.trim())
        })
    else {
        return false;
    };
    same(given, token)
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
    fn origins_hosts_and_tokens() {
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
        assert!(same("token", "token") && !same("token", "tokens"));
    }
}
