//! Where a plugin version runs: in the host's process, or in worker processes.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::error::LoadError;
use crate::invoke::Invoke;
use crate::plugin::call::{InProcessInvoke, InProcessPlugin};
use crate::plugin::load::{CopyDir, PluginFile, PluginInfo, load_in_process};
use crate::spec::ToolSpec;

/// A plugin version loaded by a backend, ready to register.
pub(crate) struct LoadedVersion {
    pub info: PluginInfo,
    pub tools: Vec<(ToolSpec, Arc<dyn Invoke>)>,
    pub rejected: Vec<String>,
}

/// How a directory's plugins run.
pub(crate) enum Backend {
    /// In the host's process: fastest; a crash of the plugin's process is the host's.
    InProcess,
}

impl Backend {
    /// Loads one version of a plugin file.
    pub async fn load(
        &self,
        file: &PluginFile,
        copies: &CopyDir,
    ) -> Result<LoadedVersion, LoadError> {
        match self {
            Backend::InProcess => {
                let loaded = load_in_process(file, copies)?;
                let plugin = Arc::new(InProcessPlugin {
                    module: loaded.module,
                    runaway: AtomicUsize::new(0),
                });
                let tools = loaded
                    .tools
                    .into_iter()
                    .map(|spec| {
                        let invoke: Arc<dyn Invoke> = Arc::new(InProcessInvoke {
                            plugin: plugin.clone(),
                            tool: spec.name.as_str().into(),
                        });
                        (spec, invoke)
                    })
                    .collect();
                Ok(LoadedVersion {
                    info: loaded.info,
                    tools,
                    rejected: loaded.rejected,
                })
            }
        }
    }

    /// Whether each version loaded stays mapped in the host for good.
    pub fn leaves_images(&self) -> bool {
        matches!(self, Backend::InProcess)
    }

    /// Whether plugins run out of process.
    pub fn is_isolated(&self) -> bool {
        false
    }

    /// A version no longer serves new calls; calls already running finish on it.
    pub fn retire(&self, _info: &PluginInfo) {}
}
