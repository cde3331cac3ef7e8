//! The engine ([`WasmEngine`]: wasmtime with the component model, epoch interruption and its
//! ticker thread), its stores, and loading a component (compiled or cached, pre-instantiated,
//! described and declared) as a [`WasmPlugin`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cache::{CacheCheck, CompileCache};
use crate::error::WasmError;

use crate::plugin::{PluginInner, Scratch, WasmPlugin};
use crate::shared::{EngineInner, LOAD_BOUND, SPARES, WasmLimits, block_on};
use crate::ticker::Ticker;

use rho_runtime::Grants;
use rho_runtime::plugin_api::declare::Declaration;
use rho_runtime::protocol::{RawTool, check_tools};
use serde_json::Value;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::shared::bindings::{Plugin, PluginPre};

/// Instances at once (the pool's slots): [`CALLS`] calls, [`SPARES`] instances made ahead of
/// calls, and loads.
const INSTANCES: u32 = 160;

/// How much of a used instance's memory (and of its tables) is reset in place rather than
/// unmapped.
const RESIDENT: usize = 1 << 20;

/// Unused slots that keep their memory resident for the next instance of their component.
const WARM_SLOTS: u32 = 16;

/// Calls at once per engine; more wait for a turn (as calls wait for an isolated worker).
const CALLS: u32 = INSTANCES - SPARES - 16;

/// Builds a [`WasmEngine`]: its limits and where it keeps compiled components.
#[must_use = "a builder does nothing until `build`"]
#[derive(Debug, Default)]
pub struct WasmEngineBuilder {
    limits: WasmLimits,
    cache_dir: Option<(PathBuf, CacheCheck)>,
}

impl WasmEngineBuilder {
    /// What each instance may use (default: [`WasmLimits::default`]).
    pub fn limits(mut self, limits: WasmLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Keeps compiled components in `dir` (made with mode 0700 if missing), by the SHA-256 of
    /// their file and the engine's build, so a restart does not compile them again. Loading a
    /// compiled component runs what is in it as code: `build` refuses a directory others can
    /// write or swap (the checks of a plugin directory), and every file in it is checked the
    /// same way before it is read. Default: compiled components are kept in memory only.
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some((dir.into(), CacheCheck::AtBuild));
        self
    }

    /// A compile cache in `dir` if it can be used, checked (and made) only when the first
    /// component is compiled: a host that loads no component never touches it. If it cannot be
    /// used, compiled components are kept in memory only and [`WasmEngine::cache_problem`] says
    /// why (a default location, which nobody asked for by name).
    pub fn cache_dir_if_usable(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some((dir.into(), CacheCheck::WhenFirstUsed));
        self
    }

    /// The engine, its epoch ticking on a thread of its own while calls run (ended with the
    /// engine; see [`crate::ticker`]).
    pub fn build(self) -> Result<WasmEngine, WasmError> {
        let error = |e: wasmtime::Error| WasmError::Engine(e.to_string());
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(self.limits.fuel.is_some());
        // Instances from a pool of slots reserved once: a fresh instance per call costs a few
        // microseconds instead of mapping its memory anew. Where the reservation is refused (a
        // bounded address space), instances are allocated on demand.
        //
        // A used slot's memory is reset in place, only the pages it touched (the kernel's
        // PAGEMAP_SCAN, Linux 6.7 and later), up to RESIDENT bytes of it, instead of unmapping
        // them: unmapping makes the kernel interrupt every other CPU running the host (a TLB
        // shootdown, costly in a VM), which doubled the time of a call measured on two vCPUs.
        // Slots not in use keep what they hold resident; at most WARM_SLOTS of them are kept.
        let mut pool = PoolingAllocationConfig::default();
        pool.pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(RESIDENT)
            .table_keep_resident(RESIDENT)
            .max_unused_warm_slots(WARM_SLOTS);
        pool.total_component_instances(INSTANCES)
            .total_core_instances(INSTANCES * 8)
            .total_memories(INSTANCES * 2)
            .total_tables(INSTANCES * 8)
            .total_stacks(INSTANCES)
            .max_memory_size(self.limits.memory_bytes);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = match Engine::new(&config) {
            Ok(engine) => engine,
            Err(e) => {
                tracing::debug!("wasm instances allocated on demand, not pooled: {e:#}");
                config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
                Engine::new(&config).map_err(error)?
            }
        };
        let cache = CompileCache::new(&engine, self.cache_dir)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(error)?;
        Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state).map_err(error)?;
        let ticker = Ticker::start(&engine)
            .map_err(|e| WasmError::Engine(format!("its epoch thread: {e}")))?;
        Ok(WasmEngine {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                limits: self.limits,
                cache,
                ticker,
                calls: Arc::new(tokio::sync::Semaphore::new(CALLS as usize)),
                spares: Arc::new(tokio::sync::Semaphore::new(SPARES as usize)),
            }),
        })
    }
}

/// The wasmtime engine components run in, and the linker of what they may import (WASI p2, as
/// each component's grants allow, and the world's `host` interface). Cheap to clone.
#[derive(Clone)]
pub struct WasmEngine {
    pub(crate) inner: Arc<EngineInner>,
}

impl WasmEngine {
    /// An engine with `limits` that keeps compiled components in memory only (see
    /// [`WasmEngine::builder`] for a cache on disk).
    pub fn new(limits: WasmLimits) -> Result<WasmEngine, WasmError> {
        WasmEngine::builder().limits(limits).build()
    }

    /// Why the compile cache on disk given by [`WasmEngineBuilder::cache_dir_if_usable`] is not
    /// used, once a component's compilation found out (the engine keeps compiled components in
    /// memory only); `None` before, or when it is used.
    pub fn cache_problem(&self) -> Option<WasmError> {
        self.inner.cache.problem()
    }

    /// A builder, for the limits and a compile cache on disk.
    pub fn builder() -> WasmEngineBuilder {
        WasmEngineBuilder::default()
    }

    /// The limits of its instances.
    pub fn limits(&self) -> WasmLimits {
        self.inner.limits
    }

    /// Compiles the component in `bytes` (shown as `file` in messages), or takes it from the
    /// cache, checks it implements the world, and reads its description and declaration. Its
    /// calls get `grants` (see [`WasmPlugin`]); it describes itself with none.
    pub fn load(
        &self,
        file: &Path,
        bytes: &[u8],
        grants: &Grants,
    ) -> Result<WasmPlugin, WasmError> {
        let sha256 = rho_runtime::sha256_hex(bytes);
        self.load_hashed(file, bytes, &sha256, grants)
    }

    /// [`WasmEngine::load`] of content whose SHA-256 (lowercase hex) is known.
    pub(crate) fn load_hashed(
        &self,
        file: &Path,
        bytes: &[u8],
        sha256: &str,
        grants: &Grants,
    ) -> Result<WasmPlugin, WasmError> {
        let shown = file.display().to_string();
        // wasmtime's reasons can span lines (a parser's expected and actual bytes): one line
        // here, the whole text in the log.
        let failed = |reason: String| {
            tracing::debug!(file = %shown, "component not loaded: {reason}");
            let words: Vec<&str> = reason.split_whitespace().collect();
            WasmError::Load {
                file: shown.clone(),
                reason: rho_worker::one_line(&words.join(" ")),
            }
        };
        // The grants are checked usable before anything runs: a missing granted path is the
        // load's error, not every call's.
        self.inner.store(grants, None).map_err(failed)?;
        let component = self
            .inner
            .cache
            .component(&self.inner.engine, sha256, bytes)
            .map_err(|e| failed(format!("{e:#}")))?;
        let pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .and_then(PluginPre::new)
            .map_err(|e| failed(format!("{e:#}")))?;
        let mut store = self.inner.store(&Grants::default(), None).map_err(failed)?;
        // Bounded while it computes (the epoch) and while it waits in a host call (here).
        // (The timer is made inside: off a runtime, `block_on` is what enters one.)
        let described = block_on(async {
            let describing = async {
                let plugin = pre.instantiate_async(&mut store).await?;
                let tools = plugin.rho_plugin_tools();
                let info = tools.call_describe(&mut store).await?;
                let declared = tools.call_declare(&mut store).await?;
                Ok::<_, wasmtime::Error>((info, declared))
            };
            tokio::time::timeout(LOAD_BOUND, describing).await
        });
        let Ok(described) = described else {
            let secs = LOAD_BOUND.as_secs();
            return Err(failed(format!("describing itself took more than {secs} s")));
        };
        let (info, declared) = described.map_err(|e| failed(format!("{e:#}")))?;
        let info = info.map_err(|e| failed(format!("it failed to describe itself: {e}")))?;
        let declaration: Declaration = match declared {
            Ok(json) => serde_json::from_str(&json).unwrap_or_default(),
            Err(e) => return Err(failed(format!("it failed to declare itself: {e}"))),
        };
        let mut declared = declaration.tools;
        let raw = info
            .tools
            .into_iter()
            .map(|desc| {
                let declared = declared
                    .iter()
                    .position(|d| d.name == desc.name)
                    .map(|at| declared.swap_remove(at))
                    .unwrap_or_default();
                RawTool {
                    name: Some(desc.name),
                    description: Some(desc.description),
                    parameters: Some(
                        serde_json::from_str(&desc.parameters_json).unwrap_or(Value::Null),
                    ),
                    timeout_ms: desc.timeout_ms,
                    declared,
                }
            })
            .collect();
        let (tools, rejected) =
            check_tools(&rho_worker::shown(file), &info.name, &info.version, raw);
        let plugin = WasmPlugin::new(PluginInner {
            engine: self.inner.clone(),
            pre,
            name: info.name,
            version: info.version,
            tools,
            rejected,
            capabilities: declaration.capabilities,
            grants: grants.clone(),
            scratch: Scratch::new(self.inner.limits.scratch_bytes),
            spares: Default::default(),
        });
        // Instances are made ahead after the first call, not here: a load (a reload under a
        // stream of calls, a restart with every component cached) stays as quick as it can be.
        Ok(plugin)
    }
}
