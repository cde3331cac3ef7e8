//! Plugin files that are not native libraries: WebAssembly components, loaded by an engine the
//! host is given ([`ComponentEngine`]; `rho-runtime-wasm`'s `WasmEngine` is one). This crate
//! builds no engine: a host that wants only native plugins does not compile one.
//!
//! A directory with an engine lists `.wasm` files beside its libraries and treats them alike:
//! the same trust checks on the directory and the file, a private sealed copy hashed as it is
//! read, a reload when the content changes (none when it does not), the same events, origins,
//! health and quarantine. What differs is where the code runs: a component runs in the host's
//! process whatever the directory's [`Isolation`](crate::Isolation), confined by its engine, with
//! the directory's grants (an isolated directory's workers' grants; none in process). It maps
//! no library image, so the in-process version cap does not count it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::plugin::backend::LoadedVersion;
use crate::registry::remote::{RemoteInvoke, RemoteTool};
use rho_plugin_api::Capabilities;
use rho_protocol::{Grants, SandboxReport, ToolSpec};
use rho_worker::LoadError;
use rho_worker::loader::PluginInfo;
use rho_worker::loader::copy::{PluginFile, PrivateCopy};

/// Loads the components of plugin directories. Given to a host with
/// [`HostBuilder::components`](crate::HostBuilder::components).
pub trait ComponentEngine: Send + Sync + 'static {
    /// Loads the component in `bytes` (the sealed private copy of `path`, whose SHA-256 is
    /// `sha256`), whose calls get `grants`. It blocks (compiling may take a while); the
    /// directory runs it off the async threads, within its load timeout. A component that asks
    /// for more than `grants` is refused ([`LoadError::NotGranted`]).
    fn load(
        &self,
        path: &Path,
        bytes: &[u8],
        sha256: &str,
        grants: &Grants,
    ) -> Result<LoadedComponent, LoadError>;
}

/// A component loaded by a [`ComponentEngine`], ready to register.
pub struct LoadedComponent {
    /// Its name (its crate's).
    pub name: String,
    /// Its version (its crate's).
    pub version: String,
    /// The interface it implements (the `rho:plugin` world's major version).
    pub interface_version: u32,
    /// What it says it needs.
    pub capabilities: Capabilities,
    /// Its tools, checked as a native plugin's are, and how to call each.
    pub tools: Vec<(ToolSpec, Arc<dyn RemoteTool>)>,
    /// The tools refused, one line each saying why.
    pub rejected: Vec<String>,
    /// What confines it ([`SandboxReport::wasm`] set).
    pub sandbox: SandboxReport,
}

/// Loads `file` (a component's private copy) with `engine` within `bound`, on a blocking thread.
pub(crate) async fn load(
    engine: Arc<dyn ComponentEngine>,
    file: PluginFile,
    grants: Grants,
    bound: Duration,
) -> Result<LoadedVersion, LoadError> {
    let path = file.path.clone();
    let loading = tokio::task::spawn_blocking(move || load_blocking(&*engine, &file, &grants));
    match tokio::time::timeout(bound, loading).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(LoadError::Component {
            path,
            reason: "the thread loading it died".into(),
        }),
        Err(_) => Err(LoadError::Component {
            path,
            reason: format!(
                "loading took longer than {} ms (DirOptions::load_timeout)",
                bound.as_millis()
            ),
        }),
    }
}

fn load_blocking(
    engine: &dyn ComponentEngine,
    file: &PluginFile,
    grants: &Grants,
) -> Result<LoadedVersion, LoadError> {
    let read_error = |e: std::io::Error| LoadError::Read {
        path: file.path.clone(),
        reason: e.to_string(),
    };
    let PrivateCopy::Memfd(memfd) = &file.copy else {
        return Err(LoadError::Copy {
            path: file.path.clone(),
            reason: "a component loads from a sealed copy".into(),
        });
    };
    let copy = std::fs::File::from(memfd.try_clone().map_err(read_error)?);
    let loaded = rho_worker::loader::open::with_mapped(&copy, file.len, |bytes| {
        engine.load(&file.path, bytes, &file.sha256, grants)
    })
    .map_err(read_error)??;
    let tools = loaded
        .tools
        .into_iter()
        .map(|(spec, tool)| {
            let invoke = Arc::new(RemoteInvoke {
                tool,
                name: spec.name.as_str().into(),
            });
            (spec, invoke as Arc<dyn crate::call::invoke::Invoke>)
        })
        .collect();
    Ok(LoadedVersion {
        info: PluginInfo {
            name: loaded.name,
            version: loaded.version,
            interface_version: loaded.interface_version,
            path: file.path.clone(),
            sha256: file.sha256.clone(),
            capabilities: loaded.capabilities,
            granted: Some(grants.clone()),
        },
        tools,
        rejected: loaded.rejected,
        sandbox: Some(loaded.sandbox),
        mapped_new: false,
    })
}
