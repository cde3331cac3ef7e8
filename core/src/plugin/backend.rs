//! Where a plugin version runs: in the host's process, or in worker processes.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::LoadError;
use crate::invoke::Invoke;
use crate::isolate::WorkerOptions;
use crate::isolate::invoke::IsolatedInvoke;
use crate::isolate::pool::Pool;
use crate::plugin::call::{InProcessInvoke, InProcessPlugin};
use crate::plugin::load::{CopyDir, PluginFile, PluginInfo, check_elf, load_in_process};
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
    /// In worker processes, one pool per plugin version.
    Isolated(Isolated),
}

/// The isolated backend's state: the options and the pool of each live version.
pub(crate) struct Isolated {
    pub options: Arc<WorkerOptions>,
    pools: Mutex<HashMap<String, Pool>>,
}

impl Isolated {
    pub fn new(options: WorkerOptions) -> Self {
        Isolated {
            options: Arc::new(options),
            pools: Mutex::new(HashMap::new()),
        }
    }

    fn pools(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pool>> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Pairs each spec with the way to run it, made from the tool's name.
fn with_invoke(
    specs: Vec<ToolSpec>,
    make: impl Fn(Arc<str>) -> Arc<dyn Invoke>,
) -> Vec<(ToolSpec, Arc<dyn Invoke>)> {
    specs
        .into_iter()
        .map(|spec| {
            let invoke = make(spec.name.as_str().into());
            (spec, invoke)
        })
        .collect()
}

fn version_key(info: &PluginInfo) -> String {
    format!("{}\0{}", info.path.display(), info.sha256)
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
                let tools = with_invoke(loaded.tools, |tool| {
                    Arc::new(InProcessInvoke {
                        plugin: plugin.clone(),
                        tool,
                    })
                });
                Ok(LoadedVersion {
                    info: loaded.info,
                    tools,
                    rejected: loaded.rejected,
                })
            }
            Backend::Isolated(isolated) => {
                check_elf(file)?;
                let copy = copies.copy(file)?;
                let probe = PluginInfo {
                    name: String::new(),
                    version: String::new(),
                    interface_version: 0,
                    path: file.path.clone(),
                    sha256: file.sha256.clone(),
                };
                let (pool, ready) =
                    match Pool::open(isolated.options.clone(), copy.clone(), &probe).await {
                        Ok(opened) => opened,
                        Err(e) => {
                            let _ = std::fs::remove_file(&copy);
                            return Err(e);
                        }
                    };
                let info = PluginInfo {
                    name: ready.name,
                    version: ready.version,
                    interface_version: ready.interface_version,
                    ..probe
                };
                let tools = with_invoke(ready.tools, |tool| {
                    Arc::new(IsolatedInvoke {
                        pool: pool.clone(),
                        tool,
                    })
                });
                isolated.pools().insert(version_key(&info), pool);
                Ok(LoadedVersion {
                    info,
                    tools,
                    rejected: ready.rejected,
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
        matches!(self, Backend::Isolated(_))
    }

    /// A version no longer serves new calls; calls already running finish on it. Isolated: its
    /// idle workers stop now, busy ones after their call.
    pub fn retire(&self, info: &PluginInfo) {
        if let Backend::Isolated(isolated) = self
            && let Some(pool) = isolated.pools().remove(&version_key(info))
        {
            pool.retire();
        }
    }
}
