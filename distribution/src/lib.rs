//! Signed plugin distribution for rho: plugins published to OCI registries and installed pinned
//! by digest, verified with minisign, checked against a directory's grants before anything of
//! them loads.
//!
//! ```no_run
//! use std::path::Path;
//! use rho_distribution::{InstallPolicy, PluginRef, TrustedKeys, install};
//!
//! # async fn example() -> Result<(), rho_distribution::DistributionError> {
//! let mut trusted = TrustedKeys::none();
//! trusted.add_file(Path::new("publisher.pub"))?;
//! let policy = InstallPolicy { trusted, ..InstallPolicy::default() };
//! let at = PluginRef::parse("oci://registry.example/tools/echo:0.1.0")?;
//! let installed = install(&at, Path::new("plugins"), &policy).await?;
//! println!("{} {} from {}", installed.entry.name, installed.entry.version, installed.entry.digest);
//! # Ok(())
//! # }
//! ```
//!
//! # What a registry holds
//!
//! One OCI artifact per plugin version (artifact type [`artifact::PLUGIN_ARTIFACT`]): its
//! [`Declaration`] (tools, hints, schemas, capabilities) as the config and one layer per
//! [`Platform`] it was built for (Linux x86-64 and aarch64 `.so`, macOS `.dylib`, a wasm
//! component). Its signature is a second artifact whose subject is the plugin's manifest: the
//! [`artifact::SignedPayload`] (name, version, manifest digest) and minisign's signature of it.
//! Registries with the OCI 1.1 referrers API list it there; for the others the publisher keeps
//! the referrers tag `sha256-HEX` (OCI's tag scheme) up to date. The payload's name and version
//! are compared with the declaration, so a tag moved to an older version is seen.
//!
//! # What an install promises
//!
//! [`install`] resolves the reference to a digest, verifies the chain from a trusted key down to
//! the file's bytes (see [`artifact`]), refuses an unsigned artifact unless told otherwise
//! ([`InstallPolicy::allow_unsigned`]), refuses a plugin that declares more than the directory
//! grants unless told otherwise ([`InstallPolicy::accept_capabilities`]), takes the file for
//! this platform (a native library, else a wasm component), and writes it atomically: a hidden
//! temporary file in the directory, synced; the lock `<dir>.lock` ([`rho_runtime::PluginLock`])
//! updated; then the file renamed in. A directory loaded with
//! [`DirOptions::locked`](rho_runtime::DirOptions::locked) loads only files whose bytes the lock
//! names. [`update`] follows tags to newer signed versions only; [`verify`] names each file that
//! differs from the lock; [`remove`] takes one out.
//!
//! Plain HTTP is spoken only to registries on a loopback address. Credentials come from the
//! docker config file or a token file ([`Credentials`], in [`Access`]).

#![warn(missing_docs)]

pub mod artifact;
mod install;
mod keys;
mod platform;
mod publish;
mod registry;

use std::path::PathBuf;

pub use artifact::Declaration;
pub use install::{
    Finding, InstallPolicy, Installed, Update, Verified, check_capabilities, fetch, install,
    install_verified, remove, update, verify,
};
pub use keys::{SigningKey, TrustConfig, TrustedKeys, key_id};
pub use platform::Platform;
pub use publish::{MAX_PLUGIN_FILE_BYTES, PlatformFile, Published, publish};
pub use registry::{Access, Credentials, PluginRef};

/// Why a publish, install, update, verify or removal failed: one line naming the file,
/// reference or key, and why.
#[derive(Debug, thiserror::Error)]
pub enum DistributionError {
    /// A reference that cannot be used.
    #[error("{reference}: {reason}")]
    Reference {
        /// The reference as given.
        reference: String,
        /// What is wrong.
        reason: String,
    },
    /// The registry refused or failed a request.
    #[error("{reference}: the registry: {reason}")]
    Registry {
        /// The reference.
        reference: String,
        /// The registry's or the connection's error.
        reason: String,
    },
    /// What the registry holds is not a usable plugin artifact (or does not match its digest).
    #[error("{reference}: {reason}")]
    Artifact {
        /// The reference.
        reference: String,
        /// What is wrong.
        reason: String,
    },
    /// No trusted signature: refused (see [`InstallPolicy::allow_unsigned`]).
    #[error("{reference}: refused: no trusted signature: {reason}")]
    Unsigned {
        /// The reference.
        reference: String,
        /// Why no signature verified.
        reason: String,
    },
    /// The plugin declares more than the directory grants.
    #[error(
        "{plugin} needs {needs}, beyond the directory's grants: {uncovered} is not granted (accept it explicitly to install anyway)"
    )]
    Capabilities {
        /// `name version`.
        plugin: String,
        /// Everything it declares.
        needs: String,
        /// The first need no grant covers.
        uncovered: String,
    },
    /// The artifact has no file this host can load.
    #[error("{reference}: no file for {wanted} (it has: {available})")]
    Platform {
        /// The reference.
        reference: String,
        /// The platforms this host takes.
        wanted: String,
        /// The platforms it has.
        available: String,
    },
    /// An update that would go backwards or elsewhere.
    #[error("{reference}: update refused: {reason}")]
    UpdateRefused {
        /// The tag followed.
        reference: String,
        /// Why.
        reason: String,
    },
    /// A key file that cannot be used.
    #[error("{}: {reason}", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A signature that cannot be made or read.
    #[error("{0}")]
    Signature(String),
    /// A credentials file that cannot be used.
    #[error("{}: registry credentials: {reason}", path.display())]
    Credentials {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A plugin file that cannot be read, published or written.
    #[error("{}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A declaration that cannot be published.
    #[error("the declaration: {0}")]
    Declaration(String),
    /// The lock names no such plugin.
    #[error("{}: {what} is not installed", lock.display())]
    NotInstalled {
        /// The lock file.
        lock: PathBuf,
        /// The name or file asked for.
        what: String,
    },
    /// The lock file cannot be read or written, or an install would overwrite what is not its
    /// own ([`LockError::Conflict`](rho_runtime::LockError::Conflict)).
    #[error(transparent)]
    Lock(#[from] rho_runtime::LockError),
}
