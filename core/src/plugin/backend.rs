//! Where a plugin version runs: in the host's process, or in worker processes.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use crate::call::invoke::Invoke;
use crate::isolate::WorkerOptions;
use crate::isolate::invoke::IsolatedInvoke;
use crate::isolate::pool::Pool;
use crate::isolate::spawn::Payload;
use crate::plugin::inproc::{InProcessInvoke, InProcessPlugin};
use rho_protocol::SandboxReport;
use rho_protocol::ToolSpec;
use rho_protocol::frames::SandboxSpec;
use rho_protocol::{RawTool, check_tools};
use rho_worker::LoadError;
use rho_worker::grants::{ResolvedGrants, resolve_for};
use rho_worker::loader::copy::{CopyDir, PluginFile, PrivateCopy, memfd_copy};
use rho_worker::loader::load::{PluginInfo, check_identity, load_in_process};

/// A plugin version loaded by a backend, ready to register.
pub(crate) struct LoadedVersion {
    pub info: PluginInfo,
    pub tools: Vec<(ToolSpec, Arc<dyn Invoke>)>,
    pub rejected: Vec<String>,
    /// What of the sandbox is in force (isolated versions).
    pub sandbox: Option<SandboxReport>,
    /// Whether loading it mapped a new image into the host (in process, content not seen before).
    pub mapped_new: bool,
}

/// How a load ended within its time bound.
pub(crate) enum LoadOutcome {
    /// Loaded (or failed) in time.
    Done(Box<Result<LoadedVersion, LoadError>>),
    /// Still loading after the bound (its load-time code hangs or is slow); the receiver gets
    /// the result when it finishes.
    Stalled(tokio::sync::oneshot::Receiver<Result<LoadedVersion, LoadError>>),
}

/// How a directory's plugins run.
pub(crate) enum Backend {
    /// In the host's process: fastest; a crash of the plugin's process is the host's.
    InProcess(Arc<InProcess>),
    /// In worker processes, one pool per plugin version.
    Isolated(Isolated),
}

/// The in-process backend's state: every image it mapped, by content. The same bytes (a hard
/// link, a copy under another name, a version that comes back) are mapped once; abi_stable never
/// unmaps a library, so a second mapping would only cost memory.
#[derive(Default)]
pub(crate) struct InProcess {
    mapped: Mutex<HashMap<String, Arc<Mapped>>>,
}

struct Mapped {
    plugin: Arc<InProcessPlugin>,
    info: PluginInfo,
    tools: Vec<ToolSpec>,
    rejected: Vec<String>,
}

impl InProcess {
    fn mapped(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Mapped>>> {
        self.mapped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Loads `file` on the calling thread (it blocks: `dlopen` runs the plugin's load-time code).
    fn load_blocking(&self, file: PluginFile) -> Result<LoadedVersion, LoadError> {
        let known = self.mapped().get(&file.sha256).cloned();
        let (mapped, mapped_new) = match known {
            Some(mapped) => (mapped, false),
            None => {
                let loaded = load_in_process(&file)?;
                let mapped = Arc::new(Mapped {
                    plugin: Arc::new(InProcessPlugin {
                        module: loaded.module,
                        runaway: AtomicUsize::new(0),
                    }),
                    info: loaded.info,
                    tools: loaded.tools,
                    rejected: loaded.rejected,
                });
                self.mapped().insert(file.sha256.clone(), mapped.clone());
                (mapped, true)
            }
        };
        let tools = with_invoke(mapped.tools.clone(), |tool| {
            Arc::new(InProcessInvoke {
                plugin: mapped.plugin.clone(),
                tool,
            })
        });
        Ok(LoadedVersion {
            info: PluginInfo {
                path: file.path.clone(),
                ..mapped.info.clone()
            },
            tools,
            rejected: mapped.rejected.clone(),
            sandbox: None,
            mapped_new,
        })
    }
}

/// The isolated backend's state: the options, the pool of each live version and the memfds in use
/// (shared by versions of the same content).
pub(crate) struct Isolated {
    pub options: Arc<WorkerOptions>,
    /// The grants, resolved once (see [`crate::isolate::grants`]); `Err` refuses every plugin of
    /// the directory with that line.
    grants: Result<Arc<ResolvedGrants>, String>,
    pools: Mutex<HashMap<String, Pool>>,
    memfds: Mutex<HashMap<String, Weak<OwnedFd>>>,
}

impl Isolated {
    pub fn new(options: WorkerOptions) -> Self {
        // SAFETY: geteuid has no preconditions.
        let identity = options.identity.resolve(unsafe { libc::geteuid() });
        let grants = resolve_for(&options.grants, identity).map(Arc::new);
        Isolated {
            grants,
            options: Arc::new(options),
            pools: Mutex::new(HashMap::new()),
            memfds: Mutex::new(HashMap::new()),
        }
    }

    fn pools(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pool>> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The memfd to hand workers for content `sha256`: one already in use for the same bytes,
    /// else `fresh`.
    fn shared_memfd(&self, sha256: &str, fresh: Arc<OwnedFd>) -> Arc<OwnedFd> {
        let mut memfds = self.memfds.lock().unwrap_or_else(PoisonError::into_inner);
        memfds.retain(|_, weak| weak.strong_count() > 0);
        if let Some(live) = memfds.get(sha256).and_then(Weak::upgrade) {
            return live;
        }
        memfds.insert(sha256.to_owned(), Arc::downgrade(&fresh));
        fresh
    }

    /// What a worker of `file` is handed: its bytes in a sealed memfd, the granted paths'
    /// descriptors and the sandbox spec.
    fn payload(
        &self,
        file: &PluginFile,
        grants: &Arc<ResolvedGrants>,
    ) -> Result<Payload, LoadError> {
        let PrivateCopy::Memfd(memfd) = &file.copy else {
            return Err(LoadError::Copy {
                path: file.path.clone(),
                reason: "an in-process copy cannot load isolated".into(),
            });
        };
        Ok(Payload {
            plugin: self.shared_memfd(&file.sha256, memfd.clone()),
            grants: grants.clone(),
            sandbox: SandboxSpec {
                enabled: self.options.sandbox,
                grants: self.options.grants.clone(),
                limits: self.options.limits.clone(),
                // SAFETY: geteuid has no preconditions.
                identity: self.options.identity.resolve(unsafe { libc::geteuid() }),
                // SAFETY: getpid has no preconditions.
                host_pid: unsafe { libc::getpid() },
                scratch_bytes: self.options.limits.scratch_bytes,
                grant_paths: grants.paths.clone(),
            },
        })
    }

    async fn load(&self, file: PluginFile) -> Result<LoadedVersion, LoadError> {
        let grants = self.grants.clone().map_err(|why| LoadError::Refused {
            path: file.path.clone(),
            reason: format!("{why}; the directory's plugins are not loaded"),
        })?;
        let probe = PluginInfo {
            name: String::new(),
            version: String::new(),
            interface_version: 0,
            path: file.path.clone(),
            sha256: file.sha256.clone(),
            capabilities: Default::default(),
            granted: Some(grants.as_grants(&self.options.grants)),
        };
        let payload = self.payload(&file, &grants)?;
        let (pool, ready) = Pool::open(self.options.clone(), payload, &probe).await?;
        // The worker runs the plugin's code: nothing it announced is taken on its word.
        check_identity(&file.path, &ready.name, &ready.version)?;
        let speaks =
            rho_plugin_api::ffi::OLDEST_INTERFACE_VERSION..=rho_plugin_api::ffi::INTERFACE_VERSION;
        if !speaks.contains(&ready.interface_version) {
            return Err(LoadError::InterfaceVersion {
                path: file.path.clone(),
                found: ready.interface_version,
                oldest: *speaks.start(),
                newest: *speaks.end(),
            });
        }
        // Refused before any call: a sandbox without what the plugin needs would fail its calls
        // one by one, each with an error of the operating system's.
        if let Some(asked) = self.options.grants.uncovered(&ready.capabilities) {
            return Err(LoadError::NotGranted {
                path: file.path.clone(),
                asked,
            });
        }
        // What was granted is what is in force, or the plugin does not load.
        if self.options.sandbox {
            let asked: Vec<String> = grants.paths.iter().map(|g| g.shown()).collect();
            if ready.sandbox.grants != asked {
                let missing = asked
                    .iter()
                    .find(|g| !ready.sandbox.grants.contains(g))
                    .cloned()
                    .unwrap_or_default();
                return Err(LoadError::Worker {
                    path: file.path.clone(),
                    reason: format!(
                        "its sandbox could not put the grant `{missing}` in force ({})",
                        ready.sandbox.missing.join("; ")
                    ),
                });
            }
        }
        let raw = ready.tools.into_iter().map(RawTool::announced).collect();
        let (specs, mut rejected) = check_tools(
            &rho_worker::shown(&file.path),
            &ready.name,
            &ready.version,
            raw,
        );
        rejected.extend(ready.rejected.iter().map(|line| rho_worker::one_line(line)));
        if ready.sandbox.complete() {
            tracing::debug!(file = %file.path.display(), sandbox = %ready.sandbox, "sandbox");
        } else {
            tracing::warn!(
                file = %file.path.display(),
                sandbox = %ready.sandbox,
                "the plugin's sandbox is incomplete"
            );
        }
        let info = PluginInfo {
            name: ready.name,
            version: ready.version,
            interface_version: ready.interface_version,
            capabilities: ready.capabilities,
            ..probe
        };
        let tools = with_invoke(specs, |tool| {
            Arc::new(IsolatedInvoke {
                pool: pool.clone(),
                tool,
            })
        });
        self.pools().insert(version_key(&info), pool);
        Ok(LoadedVersion {
            info,
            tools,
            rejected,
            sandbox: Some(ready.sandbox),
            mapped_new: false,
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
    /// The backend for `isolation`.
    pub fn new(isolation: &crate::plugin::options::Isolation) -> Backend {
        match isolation {
            crate::plugin::options::Isolation::InProcess => {
                Backend::InProcess(Arc::new(InProcess::default()))
            }
            crate::plugin::options::Isolation::Process(workers) => {
                Backend::Isolated(Isolated::new(workers.clone()))
            }
        }
    }

    /// Copies an opened plugin file into the private storage this backend loads from (blocking).
    pub fn private_copy(
        &self,
        source: &mut File,
        path: &Path,
        copies: &CopyDir,
        max: u64,
    ) -> Result<PluginFile, LoadError> {
        match self {
            Backend::InProcess(_) => copies.copy_from(source, path, max),
            Backend::Isolated(_) => memfd_copy(source, path, max),
        }
    }

    /// Whether loading content `sha256` maps a new image into the host.
    pub fn would_map(&self, sha256: &str) -> bool {
        match self {
            Backend::InProcess(state) => !state.mapped().contains_key(sha256),
            Backend::Isolated(_) => false,
        }
    }

    /// Loads one version of a plugin file within `bound`. In process the load runs on a thread
    /// of its own (`dlopen` runs the plugin's load-time code, which may hang); isolated, the
    /// worker's start is bounded by the pool's start timeout as well.
    pub async fn load(&self, file: PluginFile, bound: Duration) -> LoadOutcome {
        match self {
            Backend::InProcess(state) => {
                let (tx, mut rx) = tokio::sync::oneshot::channel();
                let state = state.clone();
                let path = file.path.clone();
                let started =
                    std::thread::Builder::new()
                        .name("rho-load".into())
                        .spawn(move || {
                            let _ = tx.send(state.load_blocking(file));
                        });
                if let Err(e) = started {
                    return LoadOutcome::Done(Box::new(Err(LoadError::Copy {
                        path,
                        reason: format!("cannot start a loading thread: {e}"),
                    })));
                }
                match tokio::time::timeout(bound, &mut rx).await {
                    Ok(Ok(result)) => LoadOutcome::Done(Box::new(result)),
                    Ok(Err(_)) => LoadOutcome::Done(Box::new(Err(LoadError::Copy {
                        path,
                        reason: "the loading thread died".into(),
                    }))),
                    Err(_) => LoadOutcome::Stalled(rx),
                }
            }
            Backend::Isolated(isolated) => {
                let path = file.path.clone();
                match tokio::time::timeout(bound, isolated.load(file)).await {
                    Ok(result) => LoadOutcome::Done(Box::new(result)),
                    Err(_) => LoadOutcome::Done(Box::new(Err(LoadError::Worker {
                        path,
                        reason: format!(
                            "loading took longer than {} ms (its load-time code hangs?)",
                            bound.as_millis()
                        ),
                    }))),
                }
            }
        }
    }

    /// What the directory grants: an isolated directory's workers' grants; nothing in process
    /// (what its components get).
    pub fn grants(&self) -> rho_protocol::Grants {
        match self {
            Backend::InProcess(_) => rho_protocol::Grants::default(),
            Backend::Isolated(isolated) => isolated.options.grants.clone(),
        }
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
