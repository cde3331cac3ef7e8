//! Who calls an endpoint: every request is a [`Principal`] or is refused, one way per listener.
//!
//! - [`Access::Open`]: a loopback listener without tokens; every caller is `anonymous`.
//! - [`Access::Tokens`]: bearer tokens of the server's own ([`StaticTokens`]): the one token of
//!   a token file (principal `token`), or named tokens, each a principal with its scopes, in a
//!   tokens file that holds their SHA-256, never the tokens (`rho token add`), read again when
//!   it changes (a removed token is refused from the next request on; a file that cannot be read
//!   refuses every token until it is fixed).
//! - [`Access::OAuth`]: OAuth 2.1 access tokens an issuer signed ([`super::oauth`]).
//!
//! A listener is one of these, never two: a client does not have to guess which.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rho_runtime::{AuthMethod, Principal};
use serde::{Deserialize, Serialize};

use super::oauth::OAuthVerifier;
use super::refusal::Refusal;

/// How an endpoint tells its callers apart.
pub enum Access {
    /// Loopback, no token: every caller is [`Principal::anonymous`].
    Open,
    /// Bearer tokens of the server's own.
    Tokens(StaticTokens),
    /// OAuth 2.1 access tokens.
    OAuth(Arc<OAuthVerifier>),
}

/// One named token as its file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedToken {
    /// The principal it stands for.
    pub name: String,
    /// SHA-256 of the token, lowercase hex.
    pub sha256: String,
    /// What it may do.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// A tokens file: `[[token]]` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokensFile {
    /// The tokens.
    #[serde(default)]
    pub token: Vec<NamedToken>,
}

impl TokensFile {
    /// Reads `path`: a regular file only its owner can read or write, at most 1 MiB, TOML of
    /// `[[token]]` entries with distinct names and hashes. `Err` is one line.
    pub fn read(path: &Path) -> Result<TokensFile, String> {
        use std::os::unix::fs::MetadataExt;
        let shown = path.display();
        let meta = std::fs::metadata(path).map_err(|e| format!("tokens file {shown}: {e}"))?;
        if !meta.is_file() || meta.len() > 1 << 20 {
            return Err(format!(
                "tokens file {shown}: not a regular file of at most 1 MiB"
            ));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(format!(
                "tokens file {shown}: mode {:o}: others can read it (chmod 600)",
                meta.mode() & 0o777
            ));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("tokens file {shown}: {e}"))?;
        let file: TokensFile = toml::from_str(&text)
            .map_err(|e| format!("tokens file {shown}: {}", first_line(&e.to_string())))?;
        let mut names = std::collections::HashSet::new();
        let mut hashes = std::collections::HashSet::new();
        for token in &file.token {
            let hex =
                token.sha256.len() == 64 && token.sha256.chars().all(|c| c.is_ascii_hexdigit());
            if !hex
                || !names.insert(&token.name)
                || !hashes.insert(token.sha256.to_ascii_lowercase())
            {
                return Err(format!(
                    "tokens file {shown}: token `{}`: a name or hash given twice, or a hash that is \
                     not 64 hex digits",
                    token.name
                ));
            }
        }
        Ok(file)
    }

    /// The file at `path`, or none yet (no tokens) when nothing is there.
    pub fn read_or_new(path: &Path) -> Result<TokensFile, String> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TokensFile::default()),
            _ => TokensFile::read(path),
        }
    }

    /// Makes a token for a new principal `name` with `scopes` and keeps its SHA-256; the token
    /// comes back (the only time it is seen). `Err`: a name that is taken, or not 1 to 64
    /// letters, digits and `-_.@:`.
    pub fn add(&mut self, name: &str, scopes: &[String]) -> Result<String, String> {
        let fits = |c: char| c.is_ascii_alphanumeric() || "-_.@:".contains(c);
        if name.is_empty() || name.len() > 64 || !name.chars().all(fits) {
            return Err(format!(
                "`{name}` is not a token name: 1 to 64 letters, digits and -_.@:"
            ));
        }
        if let Some(scope) = scopes
            .iter()
            .find(|s| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(format!("`{scope}` is not a scope: one word"));
        }
        if self.token.iter().any(|t| t.name == name) {
            return Err(format!(
                "a token named `{name}` exists (rho token remove {name} first)"
            ));
        }
        let token = make_token().map_err(|e| format!("no random bytes for a token: {e}"))?;
        self.token.push(NamedToken {
            name: name.to_owned(),
            sha256: token_digest(&token),
            scopes: scopes.to_vec(),
        });
        Ok(token)
    }

    /// Forgets the token of `name`; `false` when there is none.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.token.len();
        self.token.retain(|t| t.name != name);
        self.token.len() != before
    }

    /// Writes the file (owner-only, atomically: a temporary file renamed over it).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let text = toml::to_string(self).map_err(|e| e.to_string())?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut f| {
                f.write_all(b"# rho serve's named tokens (`rho token add`): their SHA-256, never the tokens\n")?;
                f.write_all(text.as_bytes())?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&temporary, path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&temporary);
            format!("tokens file {}: {e}", path.display())
        })
    }
}

/// 32 random bytes from the kernel, hex: a new token.
pub(crate) fn make_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A token's SHA-256, lowercase hex.
pub fn token_digest(token: &str) -> String {
    rho_runtime::sha256_hex(token.as_bytes())
}

/// The bearer tokens of a listener.
pub struct StaticTokens {
    source: TokenSource,
}

enum TokenSource {
    /// One token (a token file's first line, or one made at start): principal `token`.
    One { digest: String },
    /// A tokens file, read again when it changes.
    Named { path: PathBuf, state: Mutex<Named> },
}

struct Named {
    /// The file's identity when read: device, inode, size, modification time.
    seen: Option<(u64, u64, u64, i64, i64)>,
    /// What it says, or why it is unusable (every token refused meanwhile).
    read: Result<TokensFile, String>,
}

impl StaticTokens {
    /// One token (principal `token`).
    pub fn one(token: &str) -> StaticTokens {
        StaticTokens {
            source: TokenSource::One {
                digest: token_digest(token),
            },
        }
    }

    /// The named tokens of the file at `path`, read now (`Err`: one line; the server does not
    /// start) and again whenever it changes.
    pub fn named(path: &Path) -> Result<StaticTokens, String> {
        let read = TokensFile::read(path)?;
        Ok(StaticTokens {
            source: TokenSource::Named {
                path: path.to_owned(),
                state: Mutex::new(Named {
                    seen: identity(path),
                    read: Ok(read),
                }),
            },
        })
    }

    /// The principal `token` stands for, if it is one of these (compared by SHA-256: the
    /// digests are what the file holds).
    pub fn principal(&self, token: &str) -> Result<Principal, Refusal> {
        let digest = token_digest(token);
        match &self.source {
            TokenSource::One { digest: one } => {
                if same(&digest, one) {
                    Ok(Principal::new("token", AuthMethod::StaticToken))
                } else {
                    Err(Refusal::unauthorized("unknown token"))
                }
            }
            TokenSource::Named { path, state } => {
                let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                let now = identity(path);
                if now != state.seen {
                    state.seen = now;
                    state.read = TokensFile::read(path);
                    if let Err(e) = &state.read {
                        tracing::error!("{e}; every token is refused until it is fixed");
                    }
                }
                let file = state
                    .read
                    .as_ref()
                    .map_err(|_| Refusal::unauthorized("the tokens file is unusable"))?;
                let found = file
                    .token
                    .iter()
                    .find(|t| same(&t.sha256.to_ascii_lowercase(), &digest))
                    .ok_or_else(|| Refusal::unauthorized("unknown token"))?;
                Ok(Principal::new(found.name.clone(), AuthMethod::StaticToken)
                    .with_scopes(found.scopes.iter().cloned()))
            }
        }
    }
}

/// A file's identity for noticing a change: device, inode, size, modification time.
fn identity(path: &Path) -> Option<(u64, u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
}

/// `a == b`, in time that does not depend on where they differ.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same("token", "token") && !same("token", "tokens") && !same("token", "tokeN"));
    }

    #[test]
    fn named_tokens_are_principals_with_scopes_and_a_removed_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let file = TokensFile {
            token: vec![
                NamedToken {
                    name: "ci".into(),
                    sha256: token_digest("ci-secret-0123456789"),
                    scopes: vec!["tools:call".into()],
                },
                NamedToken {
                    name: "alice".into(),
                    sha256: token_digest("alice-secret-0123456789"),
                    scopes: vec![],
                },
            ],
        };
        file.write(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let tokens = StaticTokens::named(&path).unwrap();
        let ci = tokens.principal("ci-secret-0123456789").unwrap();
        assert_eq!((ci.id.as_str(), ci.auth), ("ci", AuthMethod::StaticToken));
        assert!(ci.has_scope("tools:call"));
        assert_eq!(
            tokens.principal("alice-secret-0123456789").unwrap().id,
            "alice"
        );
        assert_eq!(tokens.principal("nope").unwrap_err().status, 401);
        // Revoked: written without it, refused from the next request on.
        TokensFile {
            token: vec![file.token[0].clone()],
        }
        .write(&path)
        .unwrap();
        assert!(tokens.principal("alice-secret-0123456789").is_err());
        assert!(tokens.principal("ci-secret-0123456789").is_ok());
        // A file others can read: every token refused until it is fixed.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&path, std::fs::read(&path).unwrap()).unwrap();
        assert!(tokens.principal("ci-secret-0123456789").is_err());
        // The digests are in the file, the tokens nowhere.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("ci-secret"), "{text}");
    }
}
