//! Plugins: loading files (in process or isolated), the directory source, and its trust policy.

pub(crate) mod backend;
pub(crate) mod component;
pub(crate) mod dir;
pub(crate) mod inproc;
pub(crate) mod lock;
pub(crate) mod options;
pub(crate) mod pool;
pub(crate) mod scan;
pub(crate) mod watch;

use std::path::Path;
use std::sync::Arc;

use crate::registry::ToolRegistry;
use backend::Backend;
use component::ComponentEngine;
use dir::PluginDir;
use options::DirOptions;
use rho_worker::LoadError;
use scan::Scanning;

impl ToolRegistry {
    /// Adds the plugin directory `dir` as a source of this registry and starts loading every
    /// plugin in it (see [`Scanning`] for waiting on the loads). A file that fails is reported
    /// (event and report line) and the others load; only a directory that cannot be used at all
    /// is an error. `load_wait` is how long its later scans wait for their loads. With
    /// `components`, its `.wasm` files are plugins too.
    pub async fn add_plugin_dir(
        &self,
        dir: &Path,
        options: DirOptions,
        components: Option<Arc<dyn ComponentEngine>>,
        load_wait: std::time::Duration,
    ) -> Result<(PluginDir, Scanning), LoadError> {
        let backend = Backend::new(&options.isolation);
        PluginDir::open(self, dir, options, backend, components, load_wait).await
    }
}
