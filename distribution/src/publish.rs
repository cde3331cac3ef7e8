//! Publishing a plugin version ([`publish`]): its files (one per platform) and declaration as one
//! OCI artifact at a tag, then a minisign signature of its manifest's digest beside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oci_client::manifest::{
    OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageIndex,
    OciImageManifest,
};

use crate::artifact::{
    DECLARATION_MEDIA_TYPE, Declaration, EMPTY_MEDIA_TYPE, FILE_MEDIA_TYPE, MINISIGN_MEDIA_TYPE,
    PAYLOAD_MEDIA_TYPE, PLATFORM_ANNOTATION, PLUGIN_ARTIFACT, SIGNATURE_ARTIFACT, SignedPayload,
    TITLE_ANNOTATION,
};
use crate::registry::{Registry, registry_error, sha256_digest};
use crate::{Access, DistributionError, Platform, PluginRef, SigningKey};

/// The largest plugin file published or installed, bytes (rho's default load limit).
pub const MAX_PLUGIN_FILE_BYTES: usize = 256 << 20;

/// One file of a plugin version, read and told apart by its bytes.
#[derive(Debug, Clone)]
pub struct PlatformFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its platform.
    pub platform: Platform,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl PlatformFile {
    /// Reads `path` and tells its platform; the name must carry that platform's suffix
    /// (`.so`, `.dylib`, `.wasm`).
    pub fn read(path: &Path) -> Result<PlatformFile, DistributionError> {
        let bad = |reason: String| DistributionError::File {
            path: path.to_owned(),
            reason,
        };
        let size = std::fs::metadata(path)
            .map_err(|e| bad(e.to_string()))?
            .len();
        if size > MAX_PLUGIN_FILE_BYTES as u64 {
            return Err(bad(format!(
                "{size} bytes, more than a plugin may be ({MAX_PLUGIN_FILE_BYTES})"
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let platform = Platform::of_bytes(&bytes).map_err(bad)?;
        let name = file_name(path).ok_or_else(|| bad("no file name".into()))?;
        if !name.ends_with(platform.suffix()) {
            return Err(bad(format!(
                "a {platform} file must be named *{}",
                platform.suffix()
            )));
        }
        Ok(PlatformFile {
            path: path.to_owned(),
            platform,
            bytes,
        })
    }
}

/// The name of the file at `path`, if it is text.
fn file_name(path: &Path) -> Option<String> {
    path.file_name()?.to_str().map(str::to_owned)
}

/// What [`publish`] pushed.
#[derive(Debug, Clone)]
pub struct Published {
    /// The plugin version's manifest digest (what installs pin).
    pub digest: String,
    /// The reference pinned by digest (`oci://…@sha256:…`).
    pub pinned: PluginRef,
    /// The platforms of its files.
    pub platforms: Vec<Platform>,
    /// The signature artifact's digest.
    pub signature: String,
}

/// Pushes `files` (one per platform) and `declaration` as one plugin artifact at `at`'s tag,
/// then a signature of its manifest's digest by `key` (an artifact whose subject is the
/// plugin's manifest, listed under the referrers tag `sha256-HEX`, which registries without the
/// OCI 1.1 referrers API serve and the others ignore). Nothing is signed that was not pushed
/// from these bytes: the manifest's digest is computed here, not taken from the registry.
pub async fn publish(
    files: &[PlatformFile],
    declaration: &Declaration,
    at: &PluginRef,
    key: &SigningKey,
    access: &Access,
) -> Result<Published, DistributionError> {
    if at.tag().is_none() || at.digest().is_some() {
        return Err(DistributionError::Reference {
            reference: at.to_string(),
            reason: "publish to a tag (oci://REGISTRY/REPO:TAG)".into(),
        });
    }
    if files.is_empty() {
        return Err(DistributionError::Declaration("no file to publish".into()));
    }
    let mut seen = BTreeMap::new();
    for file in files {
        if let Some(first) = seen.insert(file.platform, &file.path) {
            return Err(DistributionError::File {
                path: file.path.clone(),
                reason: format!(
                    "a second {} file (the first: {})",
                    file.platform,
                    first.display()
                ),
            });
        }
    }
    let registry = Registry::connect(at, access).await?;
    let push_error = |e| registry_error(at, e);
    // Blobs are pushed one by one, not through `Client::push`: the push's authorization (a
    // registry's token for pushing to this repository) is taken first.
    registry
        .client
        .auth(
            at.oci(),
            &registry.auth,
            oci_client::RegistryOperation::Push,
        )
        .await
        .map_err(push_error)?;

    let mut layers = Vec::new();
    for file in files {
        let digest = sha256_digest(&file.bytes);
        registry
            .client
            .push_blob(at.oci(), file.bytes.clone(), &digest)
            .await
            .map_err(push_error)?;
        let annotations = BTreeMap::from([
            (PLATFORM_ANNOTATION.to_owned(), file.platform.to_string()),
            (
                TITLE_ANNOTATION.to_owned(),
                file_name(&file.path).unwrap_or_default(),
            ),
        ]);
        layers.push(descriptor(FILE_MEDIA_TYPE, &file.bytes, Some(annotations)));
    }
    let config = serde_json::to_vec(declaration)
        .map_err(|e| DistributionError::Declaration(e.to_string()))?;
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.into()),
        config: descriptor(DECLARATION_MEDIA_TYPE, &config, None),
        layers,
        subject: None,
        artifact_type: Some(PLUGIN_ARTIFACT.into()),
        annotations: Some(BTreeMap::from([
            (
                "org.opencontainers.image.title".to_owned(),
                declaration.name.clone(),
            ),
            (
                "org.opencontainers.image.version".to_owned(),
                declaration.version.clone(),
            ),
        ])),
    };
    registry
        .client
        .push_blob(at.oci(), config.clone(), &manifest.config.digest)
        .await
        .map_err(push_error)?;
    let manifest_bytes = json(&manifest)?;
    let digest = sha256_digest(&manifest_bytes);
    push_manifest(&registry, at, manifest_bytes.clone(), OCI_IMAGE_MEDIA_TYPE).await?;

    // The signature: payload and minisig as layers, the plugin manifest as subject.
    let payload = json(&SignedPayload::new(declaration, &digest))?;
    let comment = format!(
        "rho plugin {} {} {digest}",
        declaration.name, declaration.version
    );
    let minisig = key.sign(&payload, &comment)?;
    let empty = b"{}".to_vec();
    for blob in [&payload, minisig.as_bytes(), &empty] {
        registry
            .client
            .push_blob(at.oci(), blob.to_vec(), &sha256_digest(blob))
            .await
            .map_err(push_error)?;
    }
    let subject = OciDescriptor {
        media_type: OCI_IMAGE_MEDIA_TYPE.into(),
        digest: digest.clone(),
        size: manifest_bytes.len() as i64,
        ..Default::default()
    };
    let signature = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.into()),
        config: descriptor(EMPTY_MEDIA_TYPE, &empty, None),
        layers: vec![
            descriptor(PAYLOAD_MEDIA_TYPE, &payload, None),
            descriptor(MINISIGN_MEDIA_TYPE, minisig.as_bytes(), None),
        ],
        subject: Some(subject),
        artifact_type: Some(SIGNATURE_ARTIFACT.into()),
        annotations: Some(BTreeMap::from([(
            "dev.rho.signer".to_owned(),
            key.id().to_owned(),
        )])),
    };
    let signature_bytes = json(&signature)?;
    let signature_digest = sha256_digest(&signature_bytes);
    let signature_at = at.at_digest(&signature_digest);
    push_manifest(
        &registry,
        &signature_at,
        signature_bytes.clone(),
        OCI_IMAGE_MEDIA_TYPE,
    )
    .await?;
    add_referrer(
        &registry,
        at,
        &digest,
        OciDescriptor {
            media_type: OCI_IMAGE_MEDIA_TYPE.into(),
            digest: signature_digest.clone(),
            size: signature_bytes.len() as i64,
            ..Default::default()
        },
    )
    .await?;
    Ok(Published {
        pinned: at.at_digest(&digest),
        digest,
        platforms: files.iter().map(|f| f.platform).collect(),
        signature: signature_digest,
    })
}

/// A descriptor of `bytes`.
fn descriptor(
    media_type: &str,
    bytes: &[u8],
    annotations: Option<BTreeMap<String, String>>,
) -> OciDescriptor {
    OciDescriptor {
        media_type: media_type.into(),
        digest: sha256_digest(bytes),
        size: bytes.len() as i64,
        annotations,
        ..Default::default()
    }
}

/// `value` as the JSON bytes pushed and hashed.
fn json(value: &impl serde::Serialize) -> Result<Vec<u8>, DistributionError> {
    serde_json::to_vec(value).map_err(|e| DistributionError::Declaration(e.to_string()))
}

/// Pushes manifest `bytes` (of `media_type`) to `at`.
async fn push_manifest(
    registry: &Registry,
    at: &PluginRef,
    bytes: Vec<u8>,
    media_type: &'static str,
) -> Result<(), DistributionError> {
    registry
        .client
        .push_manifest_raw(at.oci(), bytes, http::HeaderValue::from_static(media_type))
        .await
        .map(drop)
        .map_err(|e| registry_error(at, e))
}

/// Adds `referrer` to the referrers tag (`sha256-HEX` of `subject`): the OCI 1.1 tag scheme for
/// registries without the referrers API.
async fn add_referrer(
    registry: &Registry,
    at: &PluginRef,
    subject: &str,
    mut referrer: OciDescriptor,
) -> Result<(), DistributionError> {
    let tag_at = at.at_tag(&subject.replace(':', "-"));
    // Only an index that is not there starts empty: any other failure keeps the signatures
    // the index lists from being dropped.
    let mut index = match registry
        .manifest_if_exists(&tag_at, &[OCI_IMAGE_INDEX_MEDIA_TYPE])
        .await?
    {
        Some((bytes, _)) => serde_json::from_slice::<OciImageIndex>(&bytes).map_err(|e| {
            DistributionError::Artifact {
                reference: tag_at.to_string(),
                reason: format!("the referrers index is not an image index: {e}"),
            }
        })?,
        None => OciImageIndex {
            schema_version: 2,
            media_type: Some(OCI_IMAGE_INDEX_MEDIA_TYPE.into()),
            manifests: Vec::new(),
            artifact_type: None,
            annotations: None,
        },
    };
    referrer.artifact_type = Some(SIGNATURE_ARTIFACT.into());
    index.manifests.retain(|m| m.digest != referrer.digest);
    index.manifests.push(oci_client::manifest::ImageIndexEntry {
        media_type: referrer.media_type,
        digest: referrer.digest,
        size: referrer.size,
        platform: None,
        annotations: None,
        artifact_type: referrer.artifact_type,
    });
    push_manifest(registry, &tag_at, json(&index)?, OCI_IMAGE_INDEX_MEDIA_TYPE).await
}
