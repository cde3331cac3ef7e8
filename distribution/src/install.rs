//! Installing from a registry into a plugin directory ([`install`], [`update`]) and keeping the
//! directory honest ([`verify`], [`remove`]). Every install resolves its reference to a digest,
//! verifies a trusted signature over that digest (or is told to take it unsigned), shows and
//! checks the declared capabilities against the directory's grants, takes the file for this
//! platform, and writes it in atomically: a hidden temporary file, synced, the lock updated,
//! then renamed in (hot reload takes it whole; a locked directory finds its hash in the lock).

use std::path::{Path, PathBuf};

use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};
use rho_runtime::{Grants, LockedPlugin, PluginLock};

use crate::artifact::{
    DECLARATION_MEDIA_TYPE, Declaration, MAX_DECLARATION_BYTES, MAX_SMALL_BLOB_BYTES,
    MINISIGN_MEDIA_TYPE, PAYLOAD_MEDIA_TYPE, PAYLOAD_TYPE, PLUGIN_ARTIFACT, SIGNATURE_ARTIFACT,
    SignedPayload, TITLE_ANNOTATION, files_of,
};
use crate::publish::MAX_PLUGIN_FILE_BYTES;
use crate::registry::{Registry, registry_error};
use crate::{Access, DistributionError, Platform, PluginRef, TrustedKeys};

/// The most signatures looked at for one artifact.
const MAX_SIGNATURES: usize = 16;

/// What an install (or update) trusts and accepts.
#[derive(Debug, Clone, Default)]
pub struct InstallPolicy {
    /// The keys whose signatures are accepted.
    pub trusted: TrustedKeys,
    /// Install an artifact that no trusted key signed (never for an update).
    pub allow_unsigned: bool,
    /// What the directory grants its plugins; `None` for a directory whose plugins run in the
    /// host's process, where nothing is confined (the capabilities are shown, not checked).
    pub grants: Option<Grants>,
    /// Install although the plugin declares more than the grants cover.
    pub accept_capabilities: bool,
    /// How to reach registries.
    pub access: Access,
}

/// A plugin version fetched and checked: its digest, declaration, signer and manifest.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The reference as given (a tag or a digest): what the lock records as its source.
    pub source: PluginRef,
    /// The reference pinned by digest.
    pub pinned: PluginRef,
    /// The manifest's digest.
    pub digest: String,
    /// What it declares.
    pub declaration: Declaration,
    /// The trusted key that signed it; `None` when unsigned (taken on explicit request).
    pub signer: Option<String>,
    /// The platforms it has files for.
    pub platforms: Vec<Platform>,
    manifest: OciImageManifest,
}

/// Resolves `at` to a digest and checks what it names: a rho plugin artifact whose manifest
/// and declaration hash to their digests, signed by a key of `policy` over that digest, name and
/// version (or unsigned, only with `allow_unsigned`).
pub async fn fetch(at: &PluginRef, policy: &InstallPolicy) -> Result<Verified, DistributionError> {
    let registry = Registry::connect(at, &policy.access).await?;
    fetch_with(&registry, at, policy.allow_unsigned, &policy.trusted).await
}

async fn fetch_with(
    registry: &Registry,
    at: &PluginRef,
    allow_unsigned: bool,
    trusted: &TrustedKeys,
) -> Result<Verified, DistributionError> {
    let digest = match at.digest() {
        Some(digest) => digest.to_owned(),
        None => registry
            .client
            .fetch_manifest_digest(at.oci(), &registry.auth)
            .await
            .map_err(|e| registry_error(at, e))?,
    };
    if !is_sha256_digest(&digest) {
        return Err(artifact(
            at,
            format!("the registry names digest {digest:?}"),
        ));
    }
    let pinned = at.at_digest(&digest);
    let (bytes, _) = registry.manifest(&pinned, &[OCI_IMAGE_MEDIA_TYPE]).await?;
    let manifest: OciImageManifest = serde_json::from_slice(&bytes)
        .map_err(|e| artifact(&pinned, format!("not an image manifest: {e}")))?;
    if manifest.artifact_type.as_deref() != Some(PLUGIN_ARTIFACT)
        || manifest.config.media_type != DECLARATION_MEDIA_TYPE
    {
        return Err(artifact(
            &pinned,
            format!(
                "not a rho plugin (artifact type {:?})",
                manifest.artifact_type.as_deref().unwrap_or("none")
            ),
        ));
    }
    let config = registry
        .blob(&pinned, &manifest.config, MAX_DECLARATION_BYTES)
        .await?;
    let declaration: Declaration = serde_json::from_slice(&config)
        .map_err(|e| artifact(&pinned, format!("its declaration is not readable: {e}")))?;
    // Shown and written to the lock before anyone vouched for it: plain text only.
    let plain =
        |text: &str| !text.is_empty() && text.len() <= 128 && !text.chars().any(char::is_control);
    if !plain(&declaration.name) || !plain(&declaration.version) {
        return Err(artifact(
            &pinned,
            format!(
                "its declaration names plugin {:?} version {:?} (plain text of at most 128 bytes)",
                declaration.name, declaration.version
            ),
        ));
    }
    let signer = match signed_by(registry, &pinned, &digest, &declaration, trusted).await {
        Ok(signer) => Some(signer),
        Err(_) if allow_unsigned => None,
        Err(reason) => {
            return Err(DistributionError::Unsigned {
                reference: at.to_string(),
                reason,
            });
        }
    };
    Ok(Verified {
        source: at.clone(),
        platforms: files_of(&manifest).map(|(p, _)| p).collect(),
        pinned,
        digest,
        declaration,
        signer,
        manifest,
    })
}

/// The trusted key that signed `digest` for `declaration`'s name and version; `Err` says why
/// none did (no signature, an untrusted key, a payload for another manifest or version).
async fn signed_by(
    registry: &Registry,
    pinned: &PluginRef,
    digest: &str,
    declaration: &Declaration,
    trusted: &TrustedKeys,
) -> Result<String, String> {
    let referrers = registry
        .client
        .pull_referrers(pinned.oci(), Some(SIGNATURE_ARTIFACT))
        .await
        .map_err(|e| format!("its signatures cannot be listed: {e}"))?;
    let mut reasons = Vec::new();
    for entry in referrers
        .manifests
        .iter()
        .filter(|m| {
            m.artifact_type
                .as_deref()
                .is_none_or(|t| t == SIGNATURE_ARTIFACT)
        })
        .filter(|m| is_sha256_digest(&m.digest))
        .take(MAX_SIGNATURES)
    {
        match one_signature(
            registry,
            pinned,
            &entry.digest,
            digest,
            declaration,
            trusted,
        )
        .await
        {
            Ok(signer) => return Ok(signer),
            Err(reason) => reasons.push(reason),
        }
    }
    if reasons.is_empty() {
        if trusted.is_empty() {
            return Err("it is not signed, and no key is trusted".into());
        }
        return Err("it is not signed".into());
    }
    if trusted.is_empty() {
        reasons.push("no key is trusted ([trust] keys, --trust-key)".into());
    }
    Err(reasons.join("; "))
}

/// Checks the signature artifact `signature` of `digest`.
async fn one_signature(
    registry: &Registry,
    pinned: &PluginRef,
    signature: &str,
    digest: &str,
    declaration: &Declaration,
    trusted: &TrustedKeys,
) -> Result<String, String> {
    let at = pinned.at_digest(signature);
    let (bytes, _) = registry
        .manifest(&at, &[OCI_IMAGE_MEDIA_TYPE])
        .await
        .map_err(|e| e.to_string())?;
    let manifest: OciImageManifest =
        serde_json::from_slice(&bytes).map_err(|e| format!("a signature {signature}: {e}"))?;
    if manifest.artifact_type.as_deref() != Some(SIGNATURE_ARTIFACT)
        || manifest.subject.as_ref().map(|s| s.digest.as_str()) != Some(digest)
    {
        return Err(format!("{signature} is not a signature of {digest}"));
    }
    let layer = |media_type: &str| -> Result<&OciDescriptor, String> {
        manifest
            .layers
            .iter()
            .find(|l| l.media_type == media_type)
            .ok_or_else(|| format!("the signature {signature} has no {media_type} layer"))
    };
    let payload = registry
        .blob(pinned, layer(PAYLOAD_MEDIA_TYPE)?, MAX_SMALL_BLOB_BYTES)
        .await
        .map_err(|e| e.to_string())?;
    let minisig = registry
        .blob(pinned, layer(MINISIGN_MEDIA_TYPE)?, MAX_SMALL_BLOB_BYTES)
        .await
        .map_err(|e| e.to_string())?;
    let minisig =
        String::from_utf8(minisig).map_err(|_| "a signature that is not text".to_string())?;
    let signer = trusted.verify(&payload, &minisig)?;
    // Only now, signed by a trusted key, is the payload read.
    let signed: SignedPayload =
        serde_json::from_slice(&payload).map_err(|e| format!("a signed payload: {e}"))?;
    if signed.kind != PAYLOAD_TYPE || signed.manifest != digest {
        return Err(format!(
            "key {signer} signed manifest {}, not {digest}",
            signed.manifest
        ));
    }
    if signed.name != declaration.name || signed.version != declaration.version {
        return Err(format!(
            "key {signer} signed {} {}, but the artifact declares {} {}",
            signed.name, signed.version, declaration.name, declaration.version
        ));
    }
    Ok(signer)
}

/// Whether `declaration`'s capabilities fit `grants` (always, for an in-process directory,
/// `grants` = `None`); `accept` installs anyway.
pub fn check_capabilities(
    declaration: &Declaration,
    grants: Option<&Grants>,
    accept: bool,
) -> Result<(), DistributionError> {
    let Some(grants) = grants else {
        return Ok(());
    };
    match grants.uncovered(&declaration.capabilities) {
        Some(uncovered) if !accept => Err(DistributionError::Capabilities {
            plugin: format!("{} {}", declaration.name, declaration.version),
            needs: declaration.capabilities.to_string(),
            uncovered,
        }),
        _ => Ok(()),
    }
}

/// What [`install`] did.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The lock entry written.
    pub entry: LockedPlugin,
    /// The entries it replaced (the same file, the same plugin under another file name).
    pub replaced: Vec<LockedPlugin>,
}

/// Installs `at` into plugin directory `dir` (see the module doc); records it in `<dir>.lock`.
pub async fn install(
    at: &PluginRef,
    dir: &Path,
    policy: &InstallPolicy,
) -> Result<Installed, DistributionError> {
    let registry = Registry::connect(at, &policy.access).await?;
    let verified = fetch_with(&registry, at, policy.allow_unsigned, &policy.trusted).await?;
    put(&registry, &verified, dir, policy).await
}

/// Installs what [`fetch`] verified into `dir` (capabilities checked against `policy`'s grants):
/// for a caller that shows the declaration before it installs.
pub async fn install_verified(
    verified: &Verified,
    dir: &Path,
    policy: &InstallPolicy,
) -> Result<Installed, DistributionError> {
    let registry = Registry::connect(&verified.pinned, &policy.access).await?;
    put(&registry, verified, dir, policy).await
}

/// Checks capabilities, takes this platform's file, writes it in and the lock.
async fn put(
    registry: &Registry,
    verified: &Verified,
    dir: &Path,
    policy: &InstallPolicy,
) -> Result<Installed, DistributionError> {
    let declaration = &verified.declaration;
    check_capabilities(
        declaration,
        policy.grants.as_ref(),
        policy.accept_capabilities,
    )?;
    let wanted: Vec<Platform> = Platform::native()
        .into_iter()
        .chain([Platform::Wasm])
        .collect();
    let files: Vec<(Platform, &OciDescriptor)> = files_of(&verified.manifest).collect();
    let (platform, layer) = wanted
        .iter()
        .find_map(|want| files.iter().find(|(p, _)| p == want).copied())
        .ok_or_else(|| DistributionError::Platform {
            reference: verified.pinned.to_string(),
            wanted: wanted
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(" or "),
            available: verified
                .platforms
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let file = file_name_for(layer, platform, &declaration.name)
        .map_err(|reason| artifact(&verified.pinned, reason))?;
    let bytes = registry
        .blob(&verified.pinned, layer, MAX_PLUGIN_FILE_BYTES)
        .await?;
    match Platform::of_bytes(&bytes) {
        Ok(actual) if actual == platform => {}
        Ok(actual) => {
            return Err(artifact(
                &verified.pinned,
                format!("its {platform} file is a {actual} file"),
            ));
        }
        Err(what) => {
            return Err(artifact(
                &verified.pinned,
                format!("its {platform} file is {what}"),
            ));
        }
    }
    let entry = LockedPlugin {
        file,
        name: declaration.name.clone(),
        version: declaration.version.clone(),
        sha256: rho_runtime::sha256_hex(&bytes),
        digest: verified.digest.clone(),
        source: verified.source.to_string(),
        signer: verified.signer.clone(),
        capabilities: declaration.capabilities.clone(),
    };
    let replaced = PluginLock::install_file(dir, entry.clone(), &bytes)?;
    Ok(Installed { entry, replaced })
}

/// The file name a layer is installed under: its title when that is a plain name with the
/// platform's suffix, else `lib{name}.so` / `lib{name}.dylib` / `{name}.wasm`.
fn file_name_for(layer: &OciDescriptor, platform: Platform, name: &str) -> Result<String, String> {
    let plain = |n: &str| {
        !n.is_empty()
            && !n.starts_with('.')
            && n.len() <= 255
            && n.ends_with(platform.suffix())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+'))
            && !n.contains(".tmp")
    };
    if let Some(title) = layer
        .annotations
        .as_ref()
        .and_then(|a| a.get(TITLE_ANNOTATION))
        && plain(title)
    {
        return Ok(title.clone());
    }
    let stem = match platform {
        Platform::Wasm => name.to_owned(),
        _ => format!("lib{name}"),
    };
    let fallback = format!("{stem}{}", platform.suffix());
    if plain(&fallback) {
        Ok(fallback)
    } else {
        Err(format!("no usable file name for plugin {name:?}"))
    }
}

/// What [`update`] did for one installed plugin.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // a few per update
pub enum Update {
    /// Its tag still names the installed digest.
    Current(LockedPlugin),
    /// It was installed by digest: there is nothing to follow.
    Pinned(LockedPlugin),
    /// A newer signed version was installed.
    Updated {
        /// What was installed before.
        from: LockedPlugin,
        /// What is installed now.
        to: LockedPlugin,
    },
}

/// Follows the tags the plugins in `dir` were installed from (all, or the one whose name or
/// file is `only`): a tag that names a new digest is installed with every check of
/// [`install`], and refused when the new digest is unsigned (whatever `allow_unsigned`), of an
/// older or the same version, or of another plugin.
pub async fn update(
    dir: &Path,
    only: Option<&str>,
    policy: &InstallPolicy,
) -> Result<Vec<Update>, DistributionError> {
    let lock = PluginLock::read(dir)?;
    let entries: Vec<LockedPlugin> = lock
        .plugins
        .iter()
        .filter(|p| only.is_none_or(|o| p.name == o || p.file == o))
        .cloned()
        .collect();
    if entries.is_empty() {
        return Err(DistributionError::NotInstalled {
            lock: PluginLock::path_for(dir),
            what: only.unwrap_or("any plugin").to_owned(),
        });
    }
    let mut done = Vec::new();
    for entry in entries {
        let source = PluginRef::parse(&entry.source)?;
        if source.digest().is_some() {
            done.push(Update::Pinned(entry));
            continue;
        }
        let registry = Registry::connect(&source, &policy.access).await?;
        let digest = registry
            .client
            .fetch_manifest_digest(source.oci(), &registry.auth)
            .await
            .map_err(|e| registry_error(&source, e))?;
        if digest == entry.digest {
            done.push(Update::Current(entry));
            continue;
        }
        let mut verified = fetch_with(
            &registry,
            &source.at_digest(&digest),
            false,
            &policy.trusted,
        )
        .await
        .map_err(|e| match e {
            DistributionError::Unsigned { reason, .. } => DistributionError::Unsigned {
                reference: source.to_string(),
                reason: format!(
                    "{reason} (the tag moved to {digest}; updates take signed versions only)"
                ),
            },
            other => other,
        })?;
        let declared = &verified.declaration;
        let refused = |reason: String| DistributionError::UpdateRefused {
            reference: source.to_string(),
            reason,
        };
        if entry.signer.is_some() && verified.signer != entry.signer {
            return Err(refused(format!(
                "the new version is signed by key {}, the installed one by {} (remove and install to change publishers)",
                verified.signer.as_deref().unwrap_or("none"),
                entry.signer.as_deref().unwrap_or("none")
            )));
        }
        if declared.name != entry.name {
            return Err(refused(format!(
                "the tag now names plugin {:?}, not {:?}",
                declared.name, entry.name
            )));
        }
        match (
            semver::Version::parse(&declared.version),
            semver::Version::parse(&entry.version),
        ) {
            (Ok(new), Ok(old)) if new > old => {}
            (Ok(_), Ok(_)) => {
                return Err(refused(format!(
                    "the tag moved to version {} ({digest}), not newer than the installed {}",
                    declared.version, entry.version
                )));
            }
            _ => {
                return Err(refused(format!(
                    "versions {:?} and {:?} are not comparable (semver)",
                    declared.version, entry.version
                )));
            }
        }
        verified.source = source.clone();
        let installed = put(&registry, &verified, dir, policy).await?;
        done.push(Update::Updated {
            from: entry,
            to: installed.entry,
        });
    }
    Ok(done)
}

/// A way the files of a directory differ from its lock ([`verify`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The file's bytes are not what was installed.
    Changed {
        /// The file.
        path: PathBuf,
        /// The SHA-256 in the lock.
        installed: String,
        /// The SHA-256 on disk.
        on_disk: String,
    },
    /// The lock names a file that is not there (or cannot be read).
    Missing {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        reason: String,
    },
    /// A plugin file the lock does not name.
    NotInstalled {
        /// The file.
        path: PathBuf,
    },
}

impl std::fmt::Display for Finding {
    /// One line naming the file.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Changed {
                path,
                installed,
                on_disk,
            } => write!(
                f,
                "{}: changed since it was installed (sha256 {on_disk}, installed {installed})",
                path.display()
            ),
            Finding::Missing { path, reason } => {
                write!(f, "{}: installed but missing: {reason}", path.display())
            }
            Finding::NotInstalled { path } => write!(
                f,
                "{}: a plugin file the lock does not name (not installed from a registry)",
                path.display()
            ),
        }
    }
}

/// Compares the files in `dir` with its lock: each installed file hashed again, and every
/// plugin file (`.so`, `.dylib`, `.wasm`, not hidden) that the lock does not name. Empty when
/// all agree.
pub fn verify(dir: &Path) -> Result<Vec<Finding>, DistributionError> {
    let lock = PluginLock::read(dir)?;
    let mut findings = Vec::new();
    for entry in &lock.plugins {
        let path = dir.join(&entry.file);
        match std::fs::read(&path).map(|bytes| rho_runtime::sha256_hex(&bytes)) {
            Ok(on_disk) if on_disk == entry.sha256 => {}
            Ok(on_disk) => findings.push(Finding::Changed {
                path,
                installed: entry.sha256.clone(),
                on_disk,
            }),
            Err(e) => findings.push(Finding::Missing {
                path,
                reason: e.to_string(),
            }),
        }
    }
    let listed = std::fs::read_dir(dir).map_err(|e| DistributionError::File {
        path: dir.to_owned(),
        reason: e.to_string(),
    })?;
    let mut extra: Vec<PathBuf> = listed
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| rho_runtime::plugin_kind(name, true).is_some() && lock.get(name).is_none())
        .map(|name| dir.join(name))
        .collect();
    extra.sort();
    findings.extend(extra.into_iter().map(|path| Finding::NotInstalled { path }));
    Ok(findings)
}

/// Removes the installed plugin named `what` (its name or file) from `dir`: its lock entry,
/// then its file (see [`PluginLock::remove_file`]).
pub fn remove(dir: &Path, what: &str) -> Result<LockedPlugin, DistributionError> {
    PluginLock::remove_file(dir, what)?.ok_or_else(|| DistributionError::NotInstalled {
        lock: PluginLock::path_for(dir),
        what: what.to_owned(),
    })
}

/// `sha256:` and 64 lowercase hex digits.
pub(crate) fn is_sha256_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn artifact(at: &PluginRef, reason: String) -> DistributionError {
    DistributionError::Artifact {
        reference: at.to_string(),
        reason,
    }
}
