//! An OAuth 2.1 resource server (the MCP authorization spec, 2026-07-28): access tokens are
//! JWTs an issuer signed for this server.
//!
//! At start each issuer's metadata is discovered (RFC 8414 `/.well-known/oauth-authorization-server`,
//! else OpenID `/.well-known/openid-configuration`), its `issuer` checked to be the one
//! configured, and its key set (`jwks_uri`) fetched: an issuer that cannot be reached is one
//! line and the server does not start half-configured. A token is taken when:
//!
//! - its algorithm is one allowed ([`OAuthConfig::algorithms`]: asymmetric only, never `none`
//!   nor an HMAC, so a public key can never be used as a shared secret), and the key's own
//!   `alg`, when it states one, is the same;
//! - its `kid` names a key of its issuer's set: an unknown `kid` fetches the set again (a
//!   rotation), at most once per [`OAuthConfig::jwks_refetch_ms`] per issuer, so tokens with
//!   made-up `kid`s cost a bounded number of fetches; the set is also fetched again when older
//!   than [`OAuthConfig::jwks_max_age_ms`];
//! - its signature verifies, `iss` is a configured issuer, `aud` names this server
//!   ([`OAuthConfig::audience`], default the resource's canonical URL: RFC 8707), and `exp`/`nbf`
//!   hold within [`OAuthConfig::leeway_s`];
//! - its scopes (`scope`, space-separated, or `scp`) hold the required ones, else 403
//!   `insufficient_scope` naming them (per tool too, [`OAuthConfig::tool_scopes`]).
//!
//! Refusals are 401 with `WWW-Authenticate: Bearer resource_metadata="…", scope="…"` (and
//! `error="invalid_token"` with the reason for a token that is not taken), which is how clients
//! find the issuer (RFC 9728 metadata, served by the endpoint). The token never goes further
//! than this check: not to a plugin, a source or NATS.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use rho_runtime::{AuthMethod, Principal};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::refusal::Refusal;

/// `[serve.oauth]`: the issuers whose access tokens a server takes, and what they must say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthConfig {
    /// The issuers (`https://id.example.com`), as their tokens' `iss` and their metadata's
    /// `issuer` say them exactly.
    pub issuers: Vec<String>,
    /// The audience tokens must name (`aud`); default the resource's canonical URL.
    pub audience: Option<String>,
    /// The resource's canonical URL (`https://rho.example.com/mcp`): what clients ask tokens
    /// for and the metadata names; default `http://ADDR/mcp` of the bound address.
    pub resource: Option<String>,
    /// Scopes every token must hold.
    pub scopes: Vec<String>,
    /// Scopes a call of each tool needs, by tool name, besides those.
    pub tool_scopes: BTreeMap<String, Vec<String>>,
    /// The signing algorithms taken (default `RS256`, `RS384`, `RS512`, `PS256`, `PS384`,
    /// `PS512`, `ES256`, `ES384`, `EdDSA`); HMACs and `none` are refused whatever this says.
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, seconds (0 to 300; default 60).
    pub leeway_s: u64,
    /// The least time between two fetches of an issuer's key set for unknown `kid`s,
    /// milliseconds (1,000 to 3,600,000; default 10,000).
    pub jwks_refetch_ms: u64,
    /// How old a fetched key set may get before it is fetched again, milliseconds (60,000 to
    /// 86,400,000; default 3,600,000).
    pub jwks_max_age_ms: u64,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            issuers: Vec::new(),
            audience: None,
            resource: None,
            scopes: Vec::new(),
            tool_scopes: BTreeMap::new(),
            algorithms: DEFAULT_ALGORITHMS.map(String::from).to_vec(),
            leeway_s: 60,
            jwks_refetch_ms: 10_000,
            jwks_max_age_ms: 3_600_000,
        }
    }
}

const DEFAULT_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// Why OAuth cannot be put in force: one line.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// A setting is unusable.
    #[error("serve.oauth: {0}")]
    Config(String),
    /// An issuer's metadata or keys cannot be had.
    #[error("serve.oauth: the issuer {issuer}: {reason}")]
    Issuer {
        /// The issuer.
        issuer: String,
        /// Why.
        reason: String,
    },
}

impl OAuthConfig {
    /// Checks the settings: at least one issuer (an `https://` URL, or `http://` on loopback),
    /// known asymmetric algorithms, the ranges.
    pub fn check(&self) -> Result<(), OAuthError> {
        let bad = |why: String| Err(OAuthError::Config(why));
        if self.issuers.is_empty() {
            return bad("no issuer (issuers = [\"https://...\"])".into());
        }
        for issuer in &self.issuers {
            if !(issuer.starts_with("https://") || loopback_http(issuer)) {
                return bad(format!(
                    "the issuer {issuer} is not an https:// URL (http:// only on loopback)"
                ));
            }
        }
        if self.algorithms.is_empty() {
            return bad("no algorithm".into());
        }
        for name in &self.algorithms {
            algorithm(name).map_err(OAuthError::Config)?;
        }
        for (what, value, low, high) in [
            ("leeway_s", self.leeway_s, 0, 300),
            ("jwks_refetch_ms", self.jwks_refetch_ms, 1_000, 3_600_000),
            ("jwks_max_age_ms", self.jwks_max_age_ms, 60_000, 86_400_000),
        ] {
            if !(low..=high).contains(&value) {
                return bad(format!("{what} is {value}; it must be {low} to {high}"));
            }
        }
        Ok(())
    }
}

/// Whether `url` is `http://` to a loopback address.
fn loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

/// An allowed algorithm by its name; HMACs and unknown names refused.
fn algorithm(name: &str) -> Result<Algorithm, String> {
    let alg: Algorithm = name
        .parse()
        .map_err(|_| format!("no signing algorithm `{name}`"))?;
    match alg {
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => Err(format!(
            "`{name}` is an HMAC: a resource server would share the issuer's secret (refused)"
        )),
        other => Ok(other),
    }
}

/// One issuer: where its keys are, and the keys as last fetched.
struct Issuer {
    issuer: String,
    jwks_uri: String,
    keys: Mutex<Keys>,
    /// Fetches take turns (a burst of unknown `kid`s makes one).
    fetching: tokio::sync::Mutex<()>,
}

impl Issuer {
    /// Issuer `issuer`, its keys at `jwks_uri` fetched now as `set`.
    fn new(issuer: &str, jwks_uri: String, set: JwkSet) -> Issuer {
        let now = Instant::now();
        Issuer {
            issuer: issuer.to_owned(),
            jwks_uri,
            keys: Mutex::new(Keys {
                set,
                fetched: now,
                tried: now,
            }),
            fetching: tokio::sync::Mutex::new(()),
        }
    }
}

struct Keys {
    set: JwkSet,
    fetched: Instant,
    /// When the last fetch was tried, for the bound on refetches.
    tried: Instant,
}

/// Checks access tokens as [`OAuthConfig`] says (see the module doc).
pub struct OAuthVerifier {
    issuers: Vec<Issuer>,
    /// The audience configured, if one was (else the resource).
    audience: Option<String>,
    /// The resource's canonical URL configured, else the one of the address the endpoint
    /// bound (set once it has).
    resource: Option<String>,
    bound: std::sync::OnceLock<String>,
    scopes: Vec<String>,
    tool_scopes: BTreeMap<String, Vec<String>>,
    algorithms: Vec<Algorithm>,
    leeway: u64,
    refetch: Duration,
    max_age: Duration,
    client: reqwest::Client,
    /// How many key sets were fetched (for tests and figures).
    fetches: std::sync::atomic::AtomicU64,
    /// Tokens verified lately (see [`Verified`]).
    verified: Mutex<Verified>,
}

/// Tokens verified lately, by SHA-256: the principal each stands for and its `exp`, so a client
/// sending the same token again costs a digest and a lookup, not a signature check. Taken
/// until `exp` (within the leeway, as a check would); forgotten when a key set changes, and all
/// at once past [`MAX_VERIFIED`] after the expired ones went.
#[derive(Default)]
struct Verified {
    tokens: std::collections::HashMap<String, (std::sync::Arc<Principal>, u64)>,
}

/// Verified tokens remembered at most.
const MAX_VERIFIED: usize = 4096;

/// Seconds since the Unix epoch, now.
fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The claims read off a token (its payload), as JSON.
type Claims = Map<String, Value>;

impl OAuthVerifier {
    /// Discovers each issuer of `config` and fetches its keys. `Err`: one line.
    pub async fn discover(config: &OAuthConfig) -> Result<OAuthVerifier, OAuthError> {
        config.check()?;
        let client = http_client()?;
        let mut issuers = Vec::new();
        for issuer in &config.issuers {
            let failed = |reason: String| OAuthError::Issuer {
                issuer: issuer.clone(),
                reason,
            };
            let jwks_uri = discover_jwks_uri(&client, issuer).await.map_err(failed)?;
            let set = fetch_jwks(&client, &jwks_uri).await.map_err(failed)?;
            issuers.push(Issuer::new(issuer, jwks_uri, set));
        }
        Ok(OAuthVerifier::with(config, issuers, client))
    }

    /// The verifier of `config` over `issuers` as discovered.
    fn with(config: &OAuthConfig, issuers: Vec<Issuer>, client: reqwest::Client) -> OAuthVerifier {
        OAuthVerifier {
            issuers,
            audience: config.audience.clone(),
            resource: config.resource.clone(),
            bound: std::sync::OnceLock::new(),
            scopes: config.scopes.clone(),
            tool_scopes: config.tool_scopes.clone(),
            algorithms: config
                .algorithms
                .iter()
                .filter_map(|a| algorithm(a).ok())
                .collect(),
            leeway: config.leeway_s,
            refetch: Duration::from_millis(config.jwks_refetch_ms),
            max_age: Duration::from_millis(config.jwks_max_age_ms),
            client,
            fetches: std::sync::atomic::AtomicU64::new(config.issuers.len() as u64),
            verified: Mutex::new(Verified::default()),
        }
    }

    /// The resource's canonical URL: the one configured, else `http://ADDR/mcp` of the
    /// address its endpoint bound.
    pub fn resource(&self) -> &str {
        self.resource
            .as_deref()
            .or_else(|| self.bound.get().map(String::as_str))
            .unwrap_or("http://localhost/mcp")
    }

    /// The audience a token must name: the one configured, else the resource.
    fn audience(&self) -> &str {
        self.audience.as_deref().unwrap_or_else(|| self.resource())
    }

    /// Its endpoint bound `addr`: the default resource is `http://ADDR/mcp`.
    pub(crate) fn bound_at(&self, addr: std::net::SocketAddr) {
        let _ = self.bound.set(format!("http://{addr}/mcp"));
    }

    /// How many key sets were fetched since start (the start's included).
    pub fn key_fetches(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The RFC 9728 metadata of the resource (what `/.well-known/oauth-protected-resource`
    /// serves).
    pub fn metadata(&self) -> Value {
        let mut scopes: Vec<&String> = self
            .scopes
            .iter()
            .chain(self.tool_scopes.values().flatten())
            .collect();
        scopes.sort();
        scopes.dedup();
        serde_json::json!({
            "resource": self.resource(),
            "authorization_servers": self.issuers.iter().map(|i| &i.issuer).collect::<Vec<_>>(),
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "rho",
        })
    }

    /// Where the metadata is: `/.well-known/oauth-protected-resource` followed by the
    /// resource's path (RFC 9728 §3.1), on the resource's origin.
    pub fn metadata_url(&self) -> String {
        let (origin, path) = split_url(self.resource());
        let path = path.trim_end_matches('/');
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// The challenge of a refusal: where the metadata is, the scopes wanted, and for a token
    /// that is not taken, `error` and its description.
    fn challenge(&self, error: Option<(&str, &str)>, scopes: &[String]) -> String {
        let mut challenge = format!("Bearer resource_metadata=\"{}\"", self.metadata_url());
        if !scopes.is_empty() {
            challenge.push_str(&format!(", scope=\"{}\"", scopes.join(" ")));
        }
        if let Some((error, description)) = error {
            challenge.push_str(&format!(
                ", error=\"{error}\", error_description=\"{}\"",
                description.replace('"', "'")
            ));
        }
        challenge
    }

    /// The refusal of a request without a token.
    pub fn no_token(&self) -> Refusal {
        Refusal {
            status: 401,
            challenge: self.challenge(None, &self.scopes),
            reason: "no token".into(),
        }
    }

    fn invalid(&self, reason: &str) -> Refusal {
        Refusal {
            status: 401,
            challenge: self.challenge(Some(("invalid_token", reason)), &self.scopes),
            reason: reason.to_owned(),
        }
    }

    /// The principal of `token`, or why it is refused (see the module doc). A token verified
    /// lately is taken again without its signature checked again, until its `exp`.
    pub async fn principal(&self, token: &str) -> Result<std::sync::Arc<Principal>, Refusal> {
        let digest = rho_runtime::sha256_hex(token.as_bytes());
        {
            let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((principal, exp)) = verified.tokens.get(&digest)
                && now_s() <= exp.saturating_add(self.leeway)
            {
                return Ok(principal.clone());
            }
        }
        let (principal, exp) = self.verify(token).await?;
        let principal = std::sync::Arc::new(principal);
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if verified.tokens.len() >= MAX_VERIFIED {
            let now = now_s();
            let leeway = self.leeway;
            verified
                .tokens
                .retain(|_, (_, exp)| now <= exp.saturating_add(leeway));
            if verified.tokens.len() >= MAX_VERIFIED {
                verified.tokens.clear();
            }
        }
        verified.tokens.insert(digest, (principal.clone(), exp));
        Ok(principal)
    }

    /// Checks `token` whole (see the module doc): its principal and its `exp`.
    async fn verify(&self, token: &str) -> Result<(Principal, u64), Refusal> {
        let header = match jsonwebtoken::decode_header(token) {
            Ok(header) if self.algorithms.contains(&header.alg) => header,
            // What it says it is signed with, even one no library takes (`none`).
            _ => match stated_algorithm(token) {
                Some(alg) => return Err(self.invalid(&format!("algorithm {alg} not allowed"))),
                None => return Err(self.invalid("not a JWT")),
            },
        };
        let kid = header
            .kid
            .as_deref()
            .ok_or_else(|| self.invalid("no key id (kid)"))?;
        // The issuer it claims picks the keys; the signature and `iss` are checked after.
        let claimed = unverified_issuer(token).ok_or_else(|| self.invalid("no issuer (iss)"))?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.issuer == claimed)
            .ok_or_else(|| self.invalid("wrong issuer"))?;
        let jwk = self
            .key(issuer, kid)
            .await
            .ok_or_else(|| self.invalid("unknown key"))?;
        if let Some(stated) = jwk.common.key_algorithm
            && format!("{stated:?}") != format!("{:?}", header.alg)
        {
            return Err(self.invalid("the key is for another algorithm"));
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|_| self.invalid("unusable key"))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&issuer.issuer]);
        validation.set_audience(&[self.audience()]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            self.invalid(match e.kind() {
                ErrorKind::ExpiredSignature => "token expired",
                ErrorKind::ImmatureSignature => "token not yet valid",
                ErrorKind::InvalidAudience => "wrong audience",
                ErrorKind::InvalidIssuer => "wrong issuer",
                ErrorKind::InvalidSignature => "bad signature",
                ErrorKind::InvalidAlgorithm => "algorithm not allowed",
                ErrorKind::MissingRequiredClaim(_) => "a required claim is missing",
                _ => "invalid token",
            })
        })?;
        let exp = data.claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        let principal = principal_of(&issuer.issuer, data.claims);
        let missing: Vec<String> = self
            .scopes
            .iter()
            .filter(|s| !principal.has_scope(s))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(self.insufficient(&missing));
        }
        Ok((principal, exp))
    }

    /// The refusal of `principal`'s call of `tool` when it lacks a scope the tool needs.
    pub fn tool_refusal(&self, principal: &Principal, tool: &str) -> Option<Refusal> {
        let needed = self.tool_scopes.get(tool)?;
        let missing: Vec<String> = needed
            .iter()
            .filter(|s| !principal.has_scope(s))
            .cloned()
            .collect();
        // The challenge names every scope this request needs (the ones every token must hold
        // too): a client that steps up asks for them all, not for the tool's alone.
        let mut wanted = self.scopes.clone();
        wanted.extend(needed.iter().filter(|s| !self.scopes.contains(s)).cloned());
        (!missing.is_empty()).then(|| self.insufficient(&wanted))
    }

    /// Whether any tool needs scopes of its own (a call's tool is then read off its request).
    pub fn scopes_per_tool(&self) -> bool {
        !self.tool_scopes.is_empty()
    }

    fn insufficient(&self, scopes: &[String]) -> Refusal {
        Refusal {
            status: 403,
            challenge: self.challenge(
                Some(("insufficient_scope", "the token lacks a scope this needs")),
                scopes,
            ),
            reason: format!("insufficient scope (needs {})", scopes.join(" ")),
        }
    }

    /// The key `kid` of `issuer`: from the set as fetched, else after fetching it again (at
    /// most once per `refetch`), or when the set is older than `max_age`.
    async fn key(&self, issuer: &Issuer, kid: &str) -> Option<Jwk> {
        let lookup = |keys: &Keys| keys.set.find(kid).cloned();
        {
            let keys = issuer.keys.lock().unwrap_or_else(PoisonError::into_inner);
            let fresh = keys.fetched.elapsed() < self.max_age;
            if let Some(jwk) = lookup(&keys).filter(|_| fresh) {
                return Some(jwk);
            }
        }
        let _turn = issuer.fetching.lock().await;
        {
            let keys = issuer.keys.lock().unwrap_or_else(PoisonError::into_inner);
            // Another request fetched meanwhile, or fetched too recently to try again.
            if let Some(jwk) = lookup(&keys).filter(|_| keys.fetched.elapsed() < self.max_age) {
                return Some(jwk);
            }
            if keys.tried.elapsed() < self.refetch {
                return lookup(&keys);
            }
        }
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let fetched = fetch_jwks(&self.client, &issuer.jwks_uri).await;
        let mut keys = issuer.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.tried = Instant::now();
        match fetched {
            Ok(set) => {
                // A key gone from the set takes its tokens with it: each is checked again.
                if set != keys.set {
                    self.verified
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .tokens
                        .clear();
                }
                keys.set = set;
                keys.fetched = Instant::now();
            }
            Err(e) => {
                tracing::warn!(issuer = %issuer.issuer, "its keys could not be fetched again: {e}")
            }
        }
        lookup(&keys)
    }
}

/// The `alg` a token's header states, read without checking anything (for saying why it is
/// refused); `None` when the header is not a JWT's.
fn stated_algorithm(token: &str) -> Option<String> {
    let header: Claims = serde_json::from_slice(&base64_url(token.split('.').next()?)?).ok()?;
    let alg = header.get("alg")?.as_str()?;
    // Said in a journal line: a name, not whatever a client wrote.
    (alg.len() <= 16 && alg.chars().all(|c| c.is_ascii_alphanumeric())).then(|| alg.to_owned())
}

/// A base64url segment of a token, decoded.
fn base64_url(segment: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(segment.trim_end_matches('='))
        .ok()
}

/// `iss` of a token's payload, read without checking anything (it only picks the keys).
fn unverified_issuer(token: &str) -> Option<String> {
    let claims: Claims = serde_json::from_slice(&base64_url(token.split('.').nth(1)?)?).ok()?;
    claims.get("iss")?.as_str().map(str::to_owned)
}

/// The principal a verified token's `claims` stand for: `sub` (else `client_id`, `azp`), the
/// issuer, its scopes, and the other claims but the registered ones.
fn principal_of(issuer: &str, mut claims: Claims) -> Principal {
    let text =
        |claims: &Claims, key: &str| claims.get(key).and_then(Value::as_str).map(str::to_owned);
    let id = text(&claims, "sub")
        .or_else(|| text(&claims, "client_id"))
        .or_else(|| text(&claims, "azp"))
        .unwrap_or_else(|| "unnamed".into());
    let mut scopes: Vec<String> = match claims.get("scope") {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    if let Some(Value::Array(scp)) = claims.get("scp") {
        scopes.extend(scp.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    for registered in [
        "iss", "sub", "aud", "exp", "nbf", "iat", "jti", "scope", "scp",
    ] {
        claims.remove(registered);
    }
    let mut principal = Principal::new(id, AuthMethod::OAuth).with_scopes(scopes);
    principal.issuer = Some(issuer.to_owned());
    principal.claims = claims;
    principal
}

/// The client of discovery and key fetches: 10 s per request, no redirects.
fn http_client() -> Result<reqwest::Client, OAuthError> {
    // reqwest builds with the process's rustls provider: ring, the one in rho's tree.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| OAuthError::Config(format!("no HTTP client: {e}")))
}

/// `scheme://authority` and the path of `url`.
fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    }
}

/// The `jwks_uri` of `issuer`, from its RFC 8414 metadata, else its OpenID configuration; the
/// metadata must name the same issuer.
async fn discover_jwks_uri(client: &reqwest::Client, issuer: &str) -> Result<String, String> {
    let (origin, path) = split_url(issuer);
    let path = path.trim_end_matches('/');
    let candidates = [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ),
    ];
    let mut tried: Vec<(String, String)> = Vec::new();
    for url in candidates {
        match get_json(client, &url).await {
            Ok(metadata) => {
                let named = metadata.get("issuer").and_then(Value::as_str).unwrap_or("");
                if named != issuer {
                    return Err(format!("{url} names the issuer {named:?}, not this one"));
                }
                return metadata
                    .get("jwks_uri")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{url} names no jwks_uri"));
            }
            Err(reason) => tried.push((url, reason)),
        }
    }
    // One reason said once (a refused connection refuses both).
    let urls: Vec<&str> = tried.iter().map(|(url, _)| url.as_str()).collect();
    match &tried[..] {
        [(_, first), rest @ ..] if rest.iter().all(|(_, r)| r == first) => {
            Err(format!("{first} (tried {})", urls.join(" and ")))
        }
        _ => Err(tried
            .iter()
            .map(|(url, reason)| format!("{url}: {reason}"))
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

/// The key set at `url`.
async fn fetch_jwks(client: &reqwest::Client, url: &str) -> Result<JwkSet, String> {
    let value = get_json(client, url)
        .await
        .map_err(|reason| format!("{url}: {reason}"))?;
    serde_json::from_value(value).map_err(|e| format!("{url}: not a key set: {e}"))
}

/// GET `url` as JSON of at most 1 MiB; `Err` says why in a few words (the cause chain's end:
/// `Connection refused (os error 111)`, `HTTP 404 Not Found`).
async fn get_json(client: &reqwest::Client, url: &str) -> Result<Value, String> {
    let cause = |e: reqwest::Error| {
        let mut root: &dyn std::error::Error = &e;
        while let Some(below) = root.source() {
            root = below;
        }
        match e.is_timeout() {
            true => "no answer within 10 s".to_owned(),
            false => root.to_string(),
        }
    };
    let response = client.get(url).send().await.map_err(cause)?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let bytes = response.bytes().await.map_err(cause)?;
    if bytes.len() > 1 << 20 {
        return Err("more than 1 MiB".into());
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_refuse_hmacs_plain_http_and_no_issuer() {
        let mut config = OAuthConfig {
            issuers: vec!["https://id.example.com".into()],
            ..OAuthConfig::default()
        };
        assert!(config.check().is_ok());
        config.algorithms = vec!["HS256".into()];
        assert!(config.check().unwrap_err().to_string().contains("HMAC"));
        config.algorithms = vec!["RS256".into()];
        config.issuers = vec!["http://id.example.com".into()];
        assert!(config.check().is_err());
        config.issuers = vec!["http://127.0.0.1:4000".into()];
        assert!(config.check().is_ok());
        config.issuers.clear();
        assert!(config.check().is_err());
    }

    #[test]
    fn a_principal_is_its_subject_scopes_and_other_claims() {
        let claims: Claims = serde_json::from_value(serde_json::json!({
            "iss": "https://id", "sub": "alice", "aud": "x", "exp": 1, "scope": "tools:call read",
            "groups": ["eng"]
        }))
        .unwrap();
        let p = principal_of("https://id", claims);
        assert_eq!((p.id.as_str(), p.auth), ("alice", AuthMethod::OAuth));
        assert_eq!(p.scopes, ["tools:call", "read"]);
        assert_eq!(p.issuer.as_deref(), Some("https://id"));
        assert_eq!(p.claims.keys().collect::<Vec<_>>(), ["groups"]);
    }

    /// A verifier of issuer `https://id.test` whose one key is Ed25519 `kid` `k1`, with
    /// `leeway_s` 0; and a signer of tokens by that key.
    fn ed25519_verifier() -> (OAuthVerifier, impl Fn(Value) -> String) {
        use base64::Engine;
        use ed25519_dalek::Signer;
        let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let x = b64(key.verifying_key().as_bytes());
        let set: JwkSet = serde_json::from_value(serde_json::json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "k1", "alg": "EdDSA"}]}))
        .unwrap();
        let config = OAuthConfig {
            issuers: vec!["https://id.test".into()],
            audience: Some("rho".into()),
            leeway_s: 0,
            ..OAuthConfig::default()
        };
        let issuer = Issuer::new("https://id.test", "https://id.test/jwks".into(), set);
        let verifier = OAuthVerifier::with(&config, vec![issuer], http_client().unwrap());
        let sign = move |claims: Value| {
            let header = serde_json::json!({"alg": "EdDSA", "kid": "k1"});
            let input = format!(
                "{}.{}",
                b64(header.to_string().as_bytes()),
                b64(claims.to_string().as_bytes())
            );
            format!("{input}.{}", b64(&key.sign(input.as_bytes()).to_bytes()))
        };
        (verifier, sign)
    }

    #[tokio::test]
    async fn a_token_verified_once_is_taken_again_until_its_exp_and_no_longer() {
        let (verifier, sign) = ed25519_verifier();
        let now = now_s();
        let token = sign(serde_json::json!({
            "iss": "https://id.test", "sub": "alice", "aud": "rho", "exp": now + 2}));
        let first = verifier.principal(&token).await.unwrap();
        let again = verifier.principal(&token).await.unwrap();
        assert!(
            std::sync::Arc::ptr_eq(&first, &again),
            "not taken from the cache"
        );
        assert_eq!(first.id, "alice");
        // Past its exp the remembered token is checked again, and refused.
        tokio::time::sleep(Duration::from_millis(
            (now + 3).saturating_sub(now_s()) * 1000 + 100,
        ))
        .await;
        let refused = verifier.principal(&token).await.unwrap_err();
        assert_eq!(refused.reason, "token expired");
        // Another audience is refused whatever it is signed with.
        let other = sign(serde_json::json!({
            "iss": "https://id.test", "sub": "alice", "aud": "other", "exp": now + 60}));
        assert_eq!(
            verifier.principal(&other).await.unwrap_err().reason,
            "wrong audience"
        );
    }

    #[test]
    fn the_metadata_url_follows_the_resource_path() {
        assert_eq!(
            split_url("https://rho.example.com/mcp"),
            ("https://rho.example.com", "/mcp")
        );
        assert_eq!(
            split_url("http://127.0.0.1:8750"),
            ("http://127.0.0.1:8750", "")
        );
    }
}
