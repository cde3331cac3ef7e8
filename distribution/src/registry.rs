//! Talking to an OCI registry: where an artifact is ([`PluginRef`], `oci://REGISTRY/REPO[:TAG|@DIGEST]`),
//! with which credentials ([`Credentials`]: the docker config file or a token file), over HTTPS
//! (plain HTTP only for a registry on a loopback address), every blob checked against its digest.

use std::path::{Path, PathBuf};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::Digest as _;

use crate::DistributionError;

/// An artifact's place: `oci://REGISTRY/REPOSITORY[:TAG|@DIGEST]` (`oci://` may be left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    reference: Reference,
    text: String,
}

impl PluginRef {
    /// Parses `text`. A reference with neither tag nor digest means the tag `latest`.
    pub fn parse(text: &str) -> Result<PluginRef, DistributionError> {
        let bare = text.strip_prefix("oci://").unwrap_or(text);
        let bad = |reason: String| DistributionError::Reference {
            reference: text.to_owned(),
            reason,
        };
        if bare.contains("://") {
            return Err(bad("only oci:// references are understood".into()));
        }
        if !bare
            .split('/')
            .next()
            .is_some_and(|r| r.contains(['.', ':']) || r == "localhost")
        {
            return Err(bad(
                "name the registry: oci://REGISTRY/REPOSITORY[:TAG|@DIGEST]".into(),
            ));
        }
        let reference: Reference = bare.parse().map_err(|e| bad(format!("{e}")))?;
        Ok(PluginRef::from(reference))
    }

    fn from(reference: Reference) -> PluginRef {
        PluginRef {
            text: format!("oci://{}", reference.whole()),
            reference,
        }
    }

    /// The registry's host (and port).
    pub fn registry(&self) -> &str {
        self.reference.registry()
    }

    /// The repository.
    pub fn repository(&self) -> &str {
        self.reference.repository()
    }

    /// The tag, if the reference names one.
    pub fn tag(&self) -> Option<&str> {
        self.reference.tag()
    }

    /// The digest, if the reference names one.
    pub fn digest(&self) -> Option<&str> {
        self.reference.digest()
    }

    /// The same repository at `digest`.
    pub fn at_digest(&self, digest: &str) -> PluginRef {
        PluginRef::from(Reference::with_digest(
            self.registry().to_owned(),
            self.repository().to_owned(),
            digest.to_owned(),
        ))
    }

    /// The same repository at `tag`.
    pub fn at_tag(&self, tag: &str) -> PluginRef {
        PluginRef::from(Reference::with_tag(
            self.registry().to_owned(),
            self.repository().to_owned(),
            tag.to_owned(),
        ))
    }

    pub(crate) fn oci(&self) -> &Reference {
        &self.reference
    }

    /// Whether the registry is on a loopback address (`127.0.0.0/8`, `[::1]`, `localhost`): the
    /// only registries spoken to over plain HTTP.
    pub fn is_loopback(&self) -> bool {
        let host = self.registry();
        let host = match host.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
            _ => host,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl std::fmt::Display for PluginRef {
    /// `oci://REGISTRY/REPOSITORY:TAG` or `…@DIGEST`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Where registry credentials come from.
#[derive(Debug, Clone, Default)]
pub enum Credentials {
    /// The docker config file (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`):
    /// its `auths` entry for the registry (`auth`, `username`/`password`, or
    /// `identitytoken`); anonymous when it has none (the default).
    #[default]
    DockerConfig,
    /// A file holding a bearer token (its first line).
    TokenFile(PathBuf),
    /// No credentials.
    Anonymous,
}

impl Credentials {
    /// The credentials for `registry`.
    pub(crate) fn auth(&self, registry: &str) -> Result<RegistryAuth, DistributionError> {
        match self {
            Credentials::Anonymous => Ok(RegistryAuth::Anonymous),
            Credentials::TokenFile(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|e| DistributionError::Credentials {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                let token = text.lines().next().unwrap_or("").trim().to_owned();
                if token.is_empty() {
                    return Err(DistributionError::Credentials {
                        path: path.clone(),
                        reason: "the file holds no token".into(),
                    });
                }
                Ok(RegistryAuth::Bearer(token))
            }
            Credentials::DockerConfig => {
                let Some(path) = docker_config() else {
                    return Ok(RegistryAuth::Anonymous);
                };
                let Ok(text) = std::fs::read_to_string(&path) else {
                    return Ok(RegistryAuth::Anonymous);
                };
                docker_auth(&text, registry)
                    .map_err(|reason| DistributionError::Credentials { path, reason })
            }
        }
    }
}

/// How to reach a registry: with which credentials, and whether plain HTTP was asked for.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The credentials.
    pub credentials: Credentials,
    /// Plain HTTP: refused unless the registry is on a loopback address, which is spoken to
    /// over plain HTTP anyway (every other registry over HTTPS).
    pub plain_http: bool,
}

impl From<Credentials> for Access {
    /// These credentials, HTTPS except on loopback.
    fn from(credentials: Credentials) -> Self {
        Access {
            credentials,
            plain_http: false,
        }
    }
}

/// The docker config file's path.
fn docker_config() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
        return Some(Path::new(&dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|home| Path::new(&home).join(".docker/config.json"))
}

/// The credentials docker config `text` holds for `registry`.
fn docker_auth(text: &str, registry: &str) -> Result<RegistryAuth, String> {
    use base64::Engine as _;
    let config: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let auths = config.get("auths").and_then(|a| a.as_object());
    let entry = auths.and_then(|auths| {
        auths.iter().find_map(|(key, value)| {
            let key = key
                .trim_start_matches("https://")
                .trim_start_matches("http://")
                .trim_end_matches('/');
            let key = key.strip_suffix("/v1").unwrap_or(key);
            let key = key.strip_suffix("/v2").unwrap_or(key);
            (key == registry).then_some(value)
        })
    });
    let Some(entry) = entry else {
        return Ok(RegistryAuth::Anonymous);
    };
    let field = |name: &str| {
        entry
            .get(name)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    if let Some(token) = field("identitytoken").or(field("registrytoken")) {
        return Ok(RegistryAuth::Bearer(token.to_owned()));
    }
    if let (Some(user), Some(password)) = (field("username"), field("password")) {
        return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    if let Some(auth) = field("auth") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .map_err(|e| format!("auths.{registry}.auth is not base64: {e}"))?;
        let decoded =
            String::from_utf8(decoded).map_err(|_| format!("auths.{registry}.auth is not text"))?;
        let (user, password) = decoded
            .split_once(':')
            .ok_or_else(|| format!("auths.{registry}.auth is not USER:PASSWORD"))?;
        return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    Ok(RegistryAuth::Anonymous)
}

/// A client for one registry, with its credentials.
pub(crate) struct Registry {
    pub(crate) client: Client,
    pub(crate) auth: RegistryAuth,
}

impl Registry {
    /// A client for `at`'s registry: HTTPS, or plain HTTP for a loopback registry. Plain HTTP
    /// asked for any other registry is refused.
    pub(crate) async fn connect(
        at: &PluginRef,
        access: &Access,
    ) -> Result<Registry, DistributionError> {
        if access.plain_http && !at.is_loopback() {
            return Err(DistributionError::Reference {
                reference: at.to_string(),
                reason: "plain HTTP is only for registries on a loopback address".into(),
            });
        }
        // reqwest's rustls has no provider of its own here: ring is rho's one provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let protocol = if at.is_loopback() {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        };
        let client = Client::new(ClientConfig {
            protocol,
            connect_timeout: Some(std::time::Duration::from_secs(30)),
            read_timeout: Some(std::time::Duration::from_secs(60)),
            ..ClientConfig::default()
        });
        let auth = access.credentials.auth(at.registry())?;
        // The client sends credentials only to registries it was told them for (by the name
        // it resolves the registry to), and only after this for requests that do not pass them.
        client
            .store_auth_if_needed(at.oci().resolve_registry(), &auth)
            .await;
        Ok(Registry { client, auth })
    }

    /// The manifest at `at` (a tag or a digest): its bytes, checked against its digest, and the
    /// digest. A manifest over [`MAX_SMALL_BLOB_BYTES`](crate::artifact::MAX_SMALL_BLOB_BYTES)
    /// is refused.
    pub(crate) async fn manifest(
        &self,
        at: &PluginRef,
        media_types: &[&str],
    ) -> Result<(Vec<u8>, String), DistributionError> {
        let pulled = self
            .client
            .pull_manifest_raw(at.oci(), &self.auth, media_types)
            .await
            .map_err(|e| registry_error(at, e))?;
        checked_manifest(at, pulled)
    }

    /// [`manifest`](Self::manifest), or `None` when the registry has none at `at`; any other
    /// failure is an error.
    pub(crate) async fn manifest_if_exists(
        &self,
        at: &PluginRef,
        media_types: &[&str],
    ) -> Result<Option<(Vec<u8>, String)>, DistributionError> {
        use oci_client::errors::{OciDistributionError, OciErrorCode};
        match self
            .client
            .pull_manifest_raw(at.oci(), &self.auth, media_types)
            .await
        {
            Ok(pulled) => checked_manifest(at, pulled).map(Some),
            Err(OciDistributionError::ImageManifestNotFoundError(_)) => Ok(None),
            Err(OciDistributionError::RegistryError { envelope, .. })
                if envelope.errors.iter().all(|e| {
                    matches!(
                        e.code,
                        OciErrorCode::ManifestUnknown | OciErrorCode::NotFound
                    )
                }) =>
            {
                Ok(None)
            }
            Err(e) => Err(registry_error(at, e)),
        }
    }

    /// Blob `descriptor` of `at`'s repository, checked against its digest and size; refused
    /// when its size is over `max`.
    pub(crate) async fn blob(
        &self,
        at: &PluginRef,
        descriptor: &oci_client::manifest::OciDescriptor,
        max: usize,
    ) -> Result<Vec<u8>, DistributionError> {
        if descriptor.size < 0 || descriptor.size as u64 > max as u64 {
            return Err(DistributionError::Artifact {
                reference: at.to_string(),
                reason: format!(
                    "blob {} is {} bytes (at most {max})",
                    descriptor.digest, descriptor.size
                ),
            });
        }
        if descriptor.urls.as_ref().is_some_and(|u| !u.is_empty()) {
            // The client would fetch them anywhere, over any scheme.
            return Err(DistributionError::Artifact {
                reference: at.to_string(),
                reason: format!(
                    "blob {} names other URLs to fetch it from",
                    descriptor.digest
                ),
            });
        }
        let mut bytes = Capped {
            bytes: Vec::with_capacity(descriptor.size as usize),
            max: descriptor.size as usize,
        };
        self.client
            .pull_blob(at.oci(), descriptor, &mut bytes)
            .await
            .map_err(|e| registry_error(at, e))?;
        let bytes = bytes.bytes;
        if bytes.len() as i64 != descriptor.size {
            return Err(DistributionError::Artifact {
                reference: at.to_string(),
                reason: format!(
                    "blob {} is {} bytes, its descriptor says {}",
                    descriptor.digest,
                    bytes.len(),
                    descriptor.size
                ),
            });
        }
        check_digest(at, &bytes, &descriptor.digest, max)?;
        Ok(bytes)
    }
}

/// A blob's bytes as they arrive, refused past its descriptor's size (a registry that sends
/// more is not read to the end).
struct Capped {
    bytes: Vec<u8>,
    max: usize,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.max {
            return std::task::Poll::Ready(Err(std::io::Error::other(
                "the registry sent more than the blob's size",
            )));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// A pulled manifest (its bytes and the digest the registry gave) checked against the digest
/// `at` names, or else the one the registry gave.
fn checked_manifest(
    at: &PluginRef,
    (bytes, digest): (impl AsRef<[u8]>, String),
) -> Result<(Vec<u8>, String), DistributionError> {
    let bytes = bytes.as_ref();
    let digest = at.digest().map(str::to_owned).unwrap_or(digest);
    check_digest(at, bytes, &digest, crate::artifact::MAX_SMALL_BLOB_BYTES)?;
    Ok((bytes.to_vec(), digest))
}

/// `sha256:HEX` of `bytes`.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&sha2::Sha256::digest(bytes)))
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `bytes` hash to `digest` (only `sha256:` digests are accepted) and are within `max`.
fn check_digest(
    at: &PluginRef,
    bytes: &[u8],
    digest: &str,
    max: usize,
) -> Result<(), DistributionError> {
    let bad = |reason: String| DistributionError::Artifact {
        reference: at.to_string(),
        reason,
    };
    if bytes.len() > max {
        return Err(bad(format!(
            "{digest} is {} bytes (at most {max})",
            bytes.len()
        )));
    }
    if !digest.starts_with("sha256:") {
        return Err(bad(format!("{digest}: only sha256 digests are accepted")));
    }
    let actual = sha256_digest(bytes);
    if actual != digest {
        return Err(bad(format!(
            "content does not match its digest {digest} (it hashes to {actual})"
        )));
    }
    Ok(())
}

/// One line for a registry's refusal.
pub(crate) fn registry_error(
    at: &PluginRef,
    error: oci_client::errors::OciDistributionError,
) -> DistributionError {
    tracing::debug!(reference = %at, ?error, "registry request failed");
    if let oci_client::errors::OciDistributionError::DigestError(digest) = &error {
        // The client checks what it receives against the digest it asked for.
        return DistributionError::Artifact {
            reference: at.to_string(),
            reason: format!("content does not match its digest ({digest})"),
        };
    }
    // The first line, and what it comes down to (a connection refused, a name not found): the
    // client's own text often leaves that to its sources.
    let first = error.to_string();
    let first = first.lines().next().unwrap_or("").to_owned();
    let mut root: &dyn std::error::Error = &error;
    while let Some(below) = root.source() {
        root = below;
    }
    let cause = root.to_string();
    let cause = cause.lines().next().unwrap_or("").to_owned();
    let reason = if cause.is_empty() || first.contains(&cause) {
        first
    } else {
        format!("{first}: {cause}")
    };
    DistributionError::Registry {
        reference: at.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn references_name_a_registry_and_loopback_is_told_apart() {
        let at = PluginRef::parse("oci://127.0.0.1:5000/tools/echo:0.1.0").unwrap();
        assert_eq!(
            (at.registry(), at.repository(), at.tag()),
            ("127.0.0.1:5000", "tools/echo", Some("0.1.0"))
        );
        assert!(at.is_loopback());
        assert!(
            PluginRef::parse("oci://localhost:5000/x")
                .unwrap()
                .is_loopback()
        );
        assert!(
            !PluginRef::parse("oci://ghcr.io/x/y:1")
                .unwrap()
                .is_loopback()
        );
        assert!(
            !PluginRef::parse("oci://127.0.0.1.example.com/x")
                .unwrap()
                .is_loopback()
        );
        assert!(PluginRef::parse("oci://echo").is_err(), "no registry");
        assert!(PluginRef::parse("https://ghcr.io/x").is_err());
        let pinned = at.at_digest(&format!("sha256:{}", "ab".repeat(32)));
        assert_eq!(pinned.digest().map(|d| d.len()), Some(71));
        let elsewhere = PluginRef::parse("oci://ghcr.io/x/y:1").unwrap();
        let refused = Registry::connect(
            &elsewhere,
            &Access {
                credentials: Credentials::Anonymous,
                plain_http: true,
            },
        );
        let err = refused.await.err().unwrap().to_string();
        assert!(
            err.contains("plain HTTP is only for registries on a loopback"),
            "{err}"
        );
    }

    #[test]
    fn docker_config_credentials() {
        let config = r#"{"auths":{"https://reg.example:5000/v2/":{"auth":"dXNlcjpwYXNz"},
            "other.example":{"identitytoken":"tok"}}}"#;
        assert!(matches!(
            docker_auth(config, "reg.example:5000").unwrap(),
            RegistryAuth::Basic(u, p) if u == "user" && p == "pass"
        ));
        assert!(matches!(
            docker_auth(config, "other.example").unwrap(),
            RegistryAuth::Bearer(t) if t == "tok"
        ));
        assert!(matches!(
            docker_auth(config, "nowhere.example").unwrap(),
            RegistryAuth::Anonymous
        ));
        assert!(docker_auth(r#"{"auths":{"x.io":{"auth":"!!"}}}"#, "x.io").is_err());
    }
}
