//! What rho puts in a registry: one OCI artifact per plugin version ([`PLUGIN_ARTIFACT`]) whose
//! config is the plugin's [`Declaration`] and whose layers are its files, one per [`Platform`]
//! (annotated [`PLATFORM_ANNOTATION`] and the file's name); and, for each signature, an artifact
//! ([`SIGNATURE_ARTIFACT`]) whose subject is the plugin's manifest, holding the signed
//! [`SignedPayload`] and its minisign signature.
//!
//! The trust chain an install follows: a trusted key's signature over the payload; the payload
//! names the manifest's digest, the plugin's name and version; the manifest's bytes hash to that
//! digest; the manifest names the config's and each file's digest; each blob's bytes hash to
//! its digest. Nothing unverified is used, and the name and version in the payload must be the
//! declaration's (a tag moved to an older version is seen by comparing versions).

use rho_runtime::{Capabilities, ToolSpec};
use serde::{Deserialize, Serialize};

use crate::Platform;

/// The artifact type of a plugin version's manifest.
pub const PLUGIN_ARTIFACT: &str = "application/vnd.rho.plugin.v1";
/// The media type of its config blob: a [`Declaration`] as JSON.
pub const DECLARATION_MEDIA_TYPE: &str = "application/vnd.rho.plugin.declaration.v1+json";
/// The media type of a plugin file layer (its platform in [`PLATFORM_ANNOTATION`]).
pub const FILE_MEDIA_TYPE: &str = "application/vnd.rho.plugin.file.v1";
/// The annotation on a file layer naming its [`Platform`].
pub const PLATFORM_ANNOTATION: &str = "dev.rho.platform";
/// The standard annotation on a file layer naming the file.
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// The artifact type of a signature's manifest (its subject: the signed plugin manifest).
pub const SIGNATURE_ARTIFACT: &str = "application/vnd.rho.plugin.signature.v1";
/// The media type of the signed payload layer ([`SignedPayload`] as JSON, the exact bytes signed).
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.rho.plugin.signed-payload.v1+json";
/// The media type of the minisign signature layer (the `.minisig` file's text).
pub const MINISIGN_MEDIA_TYPE: &str = "application/vnd.rho.plugin.minisign.v1";
/// OCI's empty config (`{}`), for signature artifacts.
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";

/// The `type` of a [`SignedPayload`].
pub const PAYLOAD_TYPE: &str = "rho-plugin-signature/v1";

/// The largest declaration read from a registry, bytes.
pub const MAX_DECLARATION_BYTES: usize = 4 << 20;
/// The largest manifest, index or signature layer read from a registry, bytes.
pub const MAX_SMALL_BLOB_BYTES: usize = 1 << 20;

/// What a plugin version declares, as its artifact's config: its identity, its tools (names,
/// hints, schemas, timeouts) and what it needs beyond computing. Shown before an install and
/// compared with the directory's grants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Declaration {
    /// The plugin's name.
    pub name: String,
    /// The plugin's version.
    pub version: String,
    /// The plugin interface (native) or world (component) version it was built against.
    pub interface_version: u32,
    /// What it needs: paths, network, environment, child processes.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Its tools, as a host accepted them.
    pub tools: Vec<ToolSpec>,
}

/// The bytes a publisher signs: which manifest, for which plugin name and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedPayload {
    /// Always [`PAYLOAD_TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The plugin's name.
    pub name: String,
    /// The plugin's version.
    pub version: String,
    /// The plugin manifest's digest (`sha256:…`).
    pub manifest: String,
}

impl SignedPayload {
    /// The payload for `declaration`'s manifest `digest`.
    pub fn new(declaration: &Declaration, digest: &str) -> Self {
        SignedPayload {
            kind: PAYLOAD_TYPE.into(),
            name: declaration.name.clone(),
            version: declaration.version.clone(),
            manifest: digest.into(),
        }
    }
}

/// The file layers of a plugin version's manifest, each with the platform its annotation names
/// (layers of another media type or without a known platform are not files).
pub fn files_of(
    manifest: &oci_client::manifest::OciImageManifest,
) -> impl Iterator<Item = (Platform, &oci_client::manifest::OciDescriptor)> {
    manifest
        .layers
        .iter()
        .filter(|l| l.media_type == FILE_MEDIA_TYPE)
        .filter_map(|l| {
            let platform = l.annotations.as_ref()?.get(PLATFORM_ANNOTATION)?;
            Some((Platform::parse(platform)?, l))
        })
}
