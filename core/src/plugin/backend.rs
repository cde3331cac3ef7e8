//! Where a plugin version runs: in the host's process, or in worker processes.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::LoadError;
use crate::invoke::Invoke;
use crate::isolate::WorkerOptions;
use crate::isolate::invoke::IsolatedInvoke;
use crate::isolate::pool::Pool;
use crate::isolate::protocol::SandboxSpec;
use crate::isolate::sandbox::{SandboxReport, ScratchRoot, plugin_memfd};
use crate::isolate::spawn::Payload;
use crate::plugin::call::{InProcessInvoke, InProcessPlugin};
use crate::plugin::load::{CopyDir, PluginFile, PluginInfo, check_elf, load_in_process};
use crate::spec::ToolSpec;

/// A plugin version loaded by a backend, ready to register.
pub(crate) struct LoadedVersion {
    pub info: PluginInfo,
    pub tools: Vec<(ToolSpec, Arc<dyn Invoke>)>,
    pub rejected: Vec<String>,
    /// What of the sandbox is in force (isolated versions).
    pub sandbox: Option<SandboxReport>,
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
    /// The plugins' scratch directories, made on the first load.
    scratch: Mutex<Option<Arc<ScratchRoot>>>,
}

impl Isolated {
    pub fn new(options: WorkerOptions) -> Self {
        Isolated {
            options: Arc::new(options),
            pools: Mutex::new(HashMap::new()),
            scratch: Mutex::new(None),
        }
    }

    fn scratch_root(&self) -> std::io::Result<Arc<ScratchRoot>> {
        let mut slot = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(root) = &*slot {
            return Ok(root.clone());
        }
        let root = Arc::new(ScratchRoot::new()?);
        *slot = Some(root.clone());
        Ok(root)
    }

    fn pools(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pool>> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a worker of `file` is handed: its bytes in a sealed memfd, the plugin's scratch
    /// directory (one per plugin file, shared by its versions and workers, removed with the
    /// host's private directory) and the sandbox spec.
    fn payload(&self, file: &PluginFile) -> Result<Payload, LoadError> {
        let stem = file
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".into());
        let name: String = stem
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let copy_error = |e: std::io::Error| LoadError::Copy {
            path: file.path.clone(),
            reason: e.to_string(),
        };
        let plugin = plugin_memfd(&name, &file.bytes).map_err(copy_error)?;
        let identity = self.options.identity.resolve();
        let (scratch_path, scratch) = self
            .scratch_root()
            .map_err(copy_error)?
            .plugin_dir(&name, identity)
            .map_err(copy_error)?;
        Ok(Payload {
            plugin,
            scratch: Some(scratch),
            sandbox: SandboxSpec {
                enabled: self.options.sandbox,
                grants: self.options.grants.clone(),
                limits: self.options.limits.clone(),
                identity,
                // SAFETY: getpid has no preconditions.
                host_pid: unsafe { libc::getpid() },
                scratch: Some(scratch_path),
            },
        })
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
                    sandbox: None,
                })
            }
            Backend::Isolated(isolated) => {
                check_elf(file)?;
                let probe = PluginInfo {
                    name: String::new(),
                    version: String::new(),
                    interface_version: 0,
                    path: file.path.clone(),
                    sha256: file.sha256.clone(),
                };
                let payload = isolated.payload(file)?;
                let (pool, ready) = Pool::open(isolated.options.clone(), payload, &probe).await?;
                if !ready.sandbox.complete() {
                    tracing::warn!(
                        file = %file.path.display(),
                        sandbox = %ready.sandbox,
                        "the plugin's sandbox is incomplete"
                    );
                } else {
                    tracing::debug!(file = %file.path.display(), sandbox = %ready.sandbox, "sandbox");
                }
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
                    sandbox: Some(ready.sandbox),
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
