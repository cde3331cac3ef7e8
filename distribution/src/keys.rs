//! minisign keys: a publisher's secret key ([`SigningKey`], a file without a password as
//! `minisign -G -W` or [`SigningKey::generate`] write it) and the public keys a host trusts
//! ([`TrustedKeys`], minisign's public key format: a file, or its base64 line).

use std::io::Cursor;
use std::path::Path;

use crate::DistributionError;

/// A key id as minisign shows it: 16 uppercase hex digits.
pub fn key_id(keynum: &[u8]) -> String {
    keynum.iter().rev().map(|b| format!("{b:02X}")).collect()
}

/// A publisher's secret key.
pub struct SigningKey {
    secret: minisign::SecretKey,
    id: String,
}

impl std::fmt::Debug for SigningKey {
    /// The key id only, never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("id", &self.id).finish()
    }
}

impl SigningKey {
    /// Reads a minisign secret key file that has no password (`minisign -G -W`). A
    /// password-protected key is refused with one line (publishing runs unattended).
    pub fn from_file(path: &Path) -> Result<SigningKey, DistributionError> {
        let bad = |reason: String| DistributionError::Key {
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let sk_box = minisign::SecretKeyBox::from_string(&text)
            .map_err(|e| bad(format!("not a minisign secret key: {e}")))?;
        let secret = match sk_box.into_unencrypted_secret_key() {
            Ok(secret) => secret,
            Err(e) => without_checksum(&text).ok_or_else(|| {
                bad(format!(
                    "cannot read it without a password ({e}); make a key without one (`minisign -G -W` or `rho plugin key new`)"
                ))
            })?,
        };
        let id = key_id(secret.keynum());
        Ok(SigningKey { secret, id })
    }

    /// Makes a new key pair and writes it: the secret key to `secret` (owner-only, no password)
    /// and the public key to `secret` with `.pub` appended. Refuses to overwrite either.
    /// Returns the key and the public key's path.
    pub fn generate(secret: &Path) -> Result<(SigningKey, std::path::PathBuf), DistributionError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut public = secret.as_os_str().to_owned();
        public.push(".pub");
        let public = std::path::PathBuf::from(public);
        let bad = |path: &Path, reason: String| DistributionError::Key {
            path: path.to_owned(),
            reason,
        };
        let pair = minisign::KeyPair::generate_unencrypted_keypair()
            .map_err(|e| bad(secret, e.to_string()))?;
        let id = key_id(pair.pk.keynum());
        let sk_text = pair
            .sk
            .to_box(Some(&format!("rho plugin signing key {id}")))
            .map_err(|e| bad(secret, e.to_string()))?
            .into_string();
        let pk_text = pair
            .pk
            .to_box()
            .map_err(|e| bad(&public, e.to_string()))?
            .into_string();
        for (path, text, mode) in [
            (secret, &sk_text, 0o600),
            (public.as_path(), &pk_text, 0o644),
        ] {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(path)
                .map_err(|e| bad(path, e.to_string()))?;
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| bad(path, e.to_string()))?;
        }
        Ok((
            SigningKey {
                secret: pair.sk,
                id,
            },
            public,
        ))
    }

    /// Its key id (16 hex digits).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Signs `payload`; returns the signature file's text (`.minisig`), whose trusted comment
    /// is `comment`.
    pub fn sign(&self, payload: &[u8], comment: &str) -> Result<String, DistributionError> {
        minisign::sign(
            None,
            &self.secret,
            Cursor::new(payload),
            Some(comment),
            None,
        )
        .map(|b| b.into_string())
        .map_err(|e| DistributionError::Signature(format!("signing failed: {e}")))
    }
}

/// A secret key without a password as minisign 0.11 (Debian 12's) writes it with `-W`: its
/// checksum field left zero, which the minisign crate reads as corruption. The key is taken
/// when it is exactly that: no key derivation, a zero checksum, the layout's length.
fn without_checksum(text: &str) -> Option<minisign::SecretKey> {
    use base64::Engine as _;
    const LEN: usize = 2 + 2 + 2 + 32 + 8 + 8 + 8 + 64 + 32;
    let line = text.lines().nth(1)?.trim();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(line)
        .ok()?;
    let unencrypted = bytes.len() == LEN
        && bytes[..2] == *b"Ed"
        && bytes[2..4] == [0, 0]
        && bytes[LEN - 32..].iter().all(|b| *b == 0);
    if !unencrypted {
        return None;
    }
    minisign::SecretKey::from_bytes(&bytes).ok()
}

/// The public keys a host accepts signatures from.
#[derive(Clone, Default)]
pub struct TrustedKeys {
    keys: Vec<(String, minisign::PublicKey)>,
}

impl std::fmt::Debug for TrustedKeys {
    /// Their key ids.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|(id, _)| id))
            .finish()
    }
}

impl TrustedKeys {
    /// No key: nothing verifies.
    pub fn none() -> Self {
        TrustedKeys::default()
    }

    /// Adds a public key given as minisign's base64 line (`RW…`) or a whole `.pub` file's text.
    pub fn add_text(&mut self, text: &str) -> Result<String, DistributionError> {
        let bad = |reason: String| DistributionError::Signature(reason);
        let key = if text.contains("untrusted comment:") {
            minisign::PublicKeyBox::from_string(text)
                .and_then(|b| b.into_public_key())
                .map_err(|e| bad(format!("not a minisign public key: {e}")))?
        } else {
            minisign::PublicKey::from_base64(text.trim())
                .map_err(|e| bad(format!("not a minisign public key {:?}: {e}", text.trim())))?
        };
        let id = key_id(key.keynum());
        if !self.keys.iter().any(|(known, _)| *known == id) {
            self.keys.push((id.clone(), key));
        }
        Ok(id)
    }

    /// Adds the public key in file `path` (minisign's format, as `minisign -G` writes it).
    pub fn add_file(&mut self, path: &Path) -> Result<String, DistributionError> {
        let text = std::fs::read_to_string(path).map_err(|e| DistributionError::Key {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        self.add_text(&text).map_err(|e| DistributionError::Key {
            path: path.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Whether no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The id of the trusted key whose signature `minisig` over `payload` verifies; `Err` says
    /// why none does (an unknown key names its id).
    pub fn verify(&self, payload: &[u8], minisig: &str) -> Result<String, String> {
        let signature = minisign::SignatureBox::from_string(minisig)
            .map_err(|e| format!("not a minisign signature: {e}"))?;
        let signer = key_id(signature.keynum());
        let Some((id, key)) = self.keys.iter().find(|(id, _)| *id == signer) else {
            return Err(format!("signed by key {signer}, which is not trusted"));
        };
        minisign::verify(key, &signature, Cursor::new(payload), true, false, false)
            .map(|()| id.clone())
            .map_err(|e| format!("the signature by key {signer} does not verify: {e}"))
    }
}

/// `[trust]` in `rho.toml`: the keys a host accepts plugin signatures from.
///
/// ```toml
/// [trust]
/// keys = ["RWTG7/F3IHHR67K3LBaN/Y/ZkFzmWmwCmsYf3z+Ncx0IFK3t/S7g+0iY"]  # minisign public keys
/// key_files = ["/etc/rho/publisher.pub"]                              # or their files
/// allow_unsigned = false                                              # the default
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrustConfig {
    /// Public keys, each minisign's base64 line (`RW…`).
    pub keys: Vec<String>,
    /// Public key files in minisign's format (relative paths: to the configuration file).
    pub key_files: Vec<std::path::PathBuf>,
    /// Install artifacts no trusted key signed (never for updates).
    pub allow_unsigned: bool,
}

impl TrustConfig {
    /// Makes the key files' relative paths relative to `base`.
    pub fn resolve_paths(&mut self, base: &Path) {
        for file in &mut self.key_files {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        }
    }

    /// Checks that every inline key is a minisign public key.
    pub fn check(&self) -> Result<(), DistributionError> {
        self.inline_keys().map(drop)
    }

    /// The inline keys.
    fn inline_keys(&self) -> Result<TrustedKeys, DistributionError> {
        let mut keys = TrustedKeys::none();
        for key in &self.keys {
            keys.add_text(key)?;
        }
        Ok(keys)
    }

    /// The keys, read (key files are read now).
    pub fn trusted_keys(&self) -> Result<TrustedKeys, DistributionError> {
        let mut keys = self.inline_keys()?;
        for file in &self.key_files {
            keys.add_file(file)?;
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_signs_what_its_public_key_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("k.key");
        let (key, public) = SigningKey::generate(&secret).unwrap();
        assert_eq!(SigningKey::from_file(&secret).unwrap().id(), key.id());
        assert!(SigningKey::generate(&secret).is_err(), "never overwritten");
        let mut trusted = TrustedKeys::none();
        assert_eq!(trusted.add_file(&public).unwrap(), key.id());
        let signature = key.sign(b"payload", "rho plugin x 1.0").unwrap();
        assert_eq!(trusted.verify(b"payload", &signature).unwrap(), key.id());
        let err = trusted.verify(b"payloaD", &signature).unwrap_err();
        assert!(err.contains("does not verify"), "{err}");
        let (other, _) = SigningKey::generate(&dir.path().join("other.key")).unwrap();
        let foreign = other.sign(b"payload", "x").unwrap();
        let err = trusted.verify(b"payload", &foreign).unwrap_err();
        assert!(
            err.contains("not trusted") && err.contains(other.id()),
            "{err}"
        );
    }

    /// A key pair minisign 0.11 wrote with `minisign -G -W` (its checksum field zero), kept as
    /// text: it signs what its public key verifies.
    #[test]
    fn a_key_from_minisign_0_11_without_a_password_signs() {
        const SECRET: &str = "untrusted comment: minisign encrypted secret key\nRWQAAEIyAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAxu/xdyBx0eskF8v+f58iCWnEgquRnEPY0J8StOP/cEs6aKCM14QwFbK3LBaN/Y/ZkFzmWmwCmsYf3z+Ncx0IFK3t/S7g+0iYAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n";
        const PUBLIC: &str = "untrusted comment: minisign public key EBD1712077F1EFC6\nRWTG7/F3IHHR67K3LBaN/Y/ZkFzmWmwCmsYf3z+Ncx0IFK3t/S7g+0iY\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.key");
        std::fs::write(&path, SECRET).unwrap();
        let key = SigningKey::from_file(&path).unwrap();
        let mut trusted = TrustedKeys::none();
        assert_eq!(trusted.add_text(PUBLIC).unwrap(), key.id());
        let signature = key.sign(b"payload", "c").unwrap();
        assert_eq!(trusted.verify(b"payload", &signature).unwrap(), key.id());
    }
}
