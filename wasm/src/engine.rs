//! The engine ([`WasmEngine`]: wasmtime with the component model, epoch interruption and its
//! ticker thread) and a loaded component ([`WasmPlugin`]: pre-instantiated, described, called in
//! a fresh instance per call).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cache::CompileCache;
use crate::error::WasmError;

use rho_runtime::plugin_api::declare::Declaration;
use rho_runtime::plugin_api::{
    Answer, Block, BlockHead, Image, LogLevel, Output, Question, Reply, ToolError,
};
use rho_runtime::{Failure, Grants, ToolCtx, ToolSpec, WasmSandbox};
use rho_worker::loader::load::{RawTool, check_tools};
use serde_json::Value;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits,
    StoreLimitsBuilder, UpdateDeadline,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

mod bindings {
    wasmtime::component::bindgen!({ world: "plugin", path: "wit" });
}

use bindings::exports::rho::plugin::tools as wit;
use bindings::rho::plugin::host;
use bindings::{Plugin, PluginPre};

/// How often the engine's epoch ticks: the granularity of deadlines and cancellation.
const TICK: Duration = Duration::from_millis(10);

/// Instances at once (the pool's slots): [`CALLS`] calls, and loads.
const INSTANCES: u32 = 128;

/// Calls at once per engine; more wait for a turn (as calls wait for an isolated worker).
const CALLS: u32 = INSTANCES - 16;

/// How long describing and declaring a component may take.
const LOAD_BOUND: Duration = Duration::from_secs(10);

/// The most a component may write on stderr that is kept, for its last words.
const STDERR_KEPT: usize = 16 << 10;

/// What each instance of a component may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasmLimits {
    /// Linear memory of an instance, bytes (all its memories together); past it, growth fails
    /// (a Rust component then aborts: the call ends `crashed`).
    pub memory_bytes: usize,
    /// Fuel of one call (about one unit per wasm instruction); past it the call traps
    /// (`crashed`: "all fuel consumed"). `None`: unbounded, and the engine does not count (counting
    /// costs every call some speed). The timeout bounds a call's time either way.
    pub fuel: Option<u64>,
}

impl Default for WasmLimits {
    /// 256 MiB of memory per instance, fuel not counted.
    fn default() -> Self {
        WasmLimits {
            memory_bytes: 256 << 20,
            fuel: None,
        }
    }
}

/// Builds a [`WasmEngine`]: its limits and where it keeps compiled components.
#[must_use = "a builder does nothing until `build`"]
#[derive(Debug, Default)]
pub struct WasmEngineBuilder {
    limits: WasmLimits,
    cache_dir: Option<PathBuf>,
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
        self.cache_dir = Some(dir.into());
        self
    }

    /// The engine, its epoch ticking every 10 ms on a thread of its own (ended with the
    /// engine).
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
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(INSTANCES)
            .total_core_instances(INSTANCES * 8)
            .total_memories(INSTANCES * 2)
            .total_tables(INSTANCES * 8)
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
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(error)?;
        Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state).map_err(error)?;
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("rho-wasm-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(TICK);
                }
            })
            .map_err(|e| WasmError::Engine(format!("its epoch thread: {e}")))?;
        Ok(WasmEngine {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                limits: self.limits,
                cache,
                calls: tokio::sync::Semaphore::new(CALLS as usize),
            }),
        })
    }
}

/// The wasmtime engine components run in, and the linker of what they may import (WASI p2, as
/// each component's grants allow, and the world's `host` interface). Cheap to clone.
#[derive(Clone)]
pub struct WasmEngine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    engine: Engine,
    linker: Linker<CallState>,
    limits: WasmLimits,
    cache: CompileCache,
    /// Calls running at once; more wait for one to end (each holds an instance slot).
    calls: tokio::sync::Semaphore,
}

impl WasmEngine {
    /// An engine with `limits` that keeps compiled components in memory only (see
    /// [`WasmEngine::builder`] for a cache on disk).
    pub fn new(limits: WasmLimits) -> Result<WasmEngine, WasmError> {
        WasmEngine::builder().limits(limits).build()
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
        let failed = |reason: String| WasmError::Load {
            file: shown.clone(),
            reason,
        };
        // The grants are checked usable before anything runs: a missing granted path is the
        // load's error, not every call's.
        self.store(None, grants).map_err(failed)?;
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
        let mut store = self.store(None, &Grants::default()).map_err(failed)?;
        let deadline = Instant::now() + LOAD_BOUND;
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                return Err(wasmtime::Error::msg("describing itself took too long"));
            }
            Ok(UpdateDeadline::Continue(1))
        });
        let plugin = pre
            .instantiate(&mut store)
            .map_err(|e| failed(format!("{e:#}")))?;
        let tools = plugin.rho_plugin_tools();
        let info = tools
            .call_describe(&mut store)
            .map_err(|e| failed(format!("{e:#}")))?
            .map_err(|e| failed(format!("it failed to describe itself: {e}")))?;
        let declaration: Declaration = match tools.call_declare(&mut store) {
            Ok(Ok(json)) => serde_json::from_str(&json).unwrap_or_default(),
            Ok(Err(e)) => return Err(failed(format!("it failed to declare itself: {e}"))),
            Err(e) => return Err(failed(format!("{e:#}"))),
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
        let (tools, rejected) = check_tools(file, &info.name, &info.version, raw);
        Ok(WasmPlugin {
            inner: Arc::new(PluginInner {
                engine: self.clone(),
                pre,
                name: info.name,
                version: info.version,
                tools,
                rejected,
                capabilities: declaration.capabilities,
                grants: grants.clone(),
            }),
        })
    }

    /// What confines a component of this engine with `grants`.
    pub fn sandbox(&self, grants: &Grants) -> WasmSandbox {
        WasmSandbox {
            memory_bytes: self.inner.limits.memory_bytes as u64,
            fuel: self.inner.limits.fuel,
            scratch_bytes: 0,
            network: grants.network,
            env: grants.env.clone(),
        }
    }

    /// A store for one instance: `grants` as WASI gives them (each granted path preopened at
    /// its own path, read-only or read-write; the granted environment keys with the host's
    /// values; sockets only with the network), stderr kept, memory bounded.
    fn store(&self, ctx: Option<ToolCtx>, grants: &Grants) -> Result<Store<CallState>, String> {
        let stderr = MemoryOutputPipe::new(STDERR_KEPT);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone());
        for (paths, perms) in [
            (&grants.read, FsPerms::ReadOnly),
            (&grants.write, FsPerms::ReadWrite),
        ] {
            for path in paths {
                let shown = path.to_string_lossy();
                wasi.preopened_dir(path, &shown, perms)
                    .map_err(|e| format!("the grant of {shown}: {e:#}"))?;
            }
        }
        for key in &grants.env {
            if let Ok(value) = std::env::var(key) {
                wasi.env(key, value);
            }
        }
        if grants.network {
            wasi.inherit_network()
                .allow_tcp(true)
                .allow_udp(true)
                .allow_ip_name_lookup(true);
        } else {
            wasi.allow_tcp(false)
                .allow_udp(false)
                .allow_ip_name_lookup(false);
        }
        let wasi = wasi.build();
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.inner.limits.memory_bytes)
            .build();
        let mut store = Store::new(
            &self.inner.engine,
            CallState {
                wasi,
                table: ResourceTable::new(),
                limits,
                ctx,
                runtime: tokio::runtime::Handle::try_current().ok(),
                stderr,
            },
        );
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(1);
        if let Some(fuel) = self.inner.limits.fuel {
            store
                .set_fuel(fuel)
                .map_err(|e| format!("setting its fuel: {e}"))?;
        }
        Ok(store)
    }
}

/// A loaded component: its tools as specs, ready to call, each call with the component's grants
/// (files by WASI preopens at their own paths, environment keys, the network). Cheap to clone.
#[derive(Clone)]
pub struct WasmPlugin {
    inner: Arc<PluginInner>,
}

struct PluginInner {
    engine: WasmEngine,
    pre: PluginPre<CallState>,
    name: String,
    version: String,
    tools: Vec<ToolSpec>,
    rejected: Vec<String>,
    capabilities: rho_runtime::Capabilities,
    grants: Grants,
}

impl WasmPlugin {
    /// The plugin's name (its crate's).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The plugin's version (its crate's).
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// Its tools, checked as a native plugin's are.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.inner.tools
    }

    /// The tools refused, one line each saying why.
    pub fn rejected(&self) -> &[String] {
        &self.inner.rejected
    }

    /// What it says it needs (its declaration's capabilities).
    pub fn capabilities(&self) -> &rho_runtime::Capabilities {
        &self.inner.capabilities
    }

    /// Calls `tool` with `args` in a fresh instance, on a blocking thread; the instance is
    /// stopped at `ctx`'s deadline or cancellation. At most 112 calls of one engine run at once;
    /// more wait for a turn (their timeout runs meanwhile).
    pub async fn call(&self, tool: &str, args: &Value, ctx: ToolCtx) -> Result<Answer, Failure> {
        let Ok(_turn) = self.inner.engine.inner.calls.acquire().await else {
            return Err(Failure::crashed("the wasm engine is closed"));
        };
        let plugin = self.clone();
        let (tool, args) = (tool.to_owned(), args.to_string());
        let joined =
            tokio::task::spawn_blocking(move || plugin.call_blocking(&tool, &args, ctx)).await;
        joined.unwrap_or_else(|e| {
            Err(Failure::crashed(format!(
                "the call of component `{}` ended abnormally: {e}",
                self.inner.name
            )))
        })
    }

    fn call_blocking(&self, tool: &str, args_json: &str, ctx: ToolCtx) -> Result<Answer, Failure> {
        let info = wit::CallInfo {
            call_id: ctx.call_id().to_owned(),
            time_left_ms: ctx
                .time_left()
                .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
            traceparent: ctx.traceparent().unwrap_or_default().to_owned(),
        };
        let mut store = self
            .inner
            .engine
            .store(Some(ctx), &self.inner.grants)
            .map_err(Failure::crashed)?;
        // Each tick: stop the instance once the call is given up or its deadline has passed
        // (a question's wait moves the deadline).
        store.epoch_deadline_callback(|store| {
            if let Some(ctx) = &store.data().ctx {
                if ctx.is_cancelled() {
                    return Err(wasmtime::Error::msg("the call was given up"));
                }
                if ctx.deadline().is_some_and(|at| Instant::now() >= at) {
                    return Err(wasmtime::Error::msg("the call's time ran out"));
                }
            }
            Ok(UpdateDeadline::Continue(1))
        });
        let trapped = |store: &Store<CallState>, e: wasmtime::Error| {
            let words = last_words(&store.data().stderr);
            // The trap itself, not the wasm backtrace wrapped around it.
            Failure::crashed(format!(
                "component `{}` trapped: {}{words}",
                self.inner.name,
                e.root_cause()
            ))
        };
        let plugin = match self.inner.pre.instantiate(&mut store) {
            Ok(plugin) => plugin,
            Err(e) => return Err(trapped(&store, e)),
        };
        let ended = plugin
            .rho_plugin_tools()
            .call_call(&mut store, tool, args_json, &info);
        match ended {
            Ok(Ok(answer)) => answer_of(answer),
            Ok(Err(failure)) => Err(failure_of(failure)),
            Err(e) => Err(trapped(&store, e)),
        }
    }
}

/// The component's last two lines on stderr that may say why it stopped (a panic's place and
/// message; not blank, not indented, not Rust's `note:` hints), for a trap's text.
fn last_words(stderr: &MemoryOutputPipe) -> String {
    let bytes = stderr.contents();
    let text = String::from_utf8_lossy(&bytes);
    let mut said: Vec<&str> = text
        .lines()
        .rev()
        .filter(|l| {
            !l.trim().is_empty()
                && !l.starts_with(char::is_whitespace)
                && !l.starts_with("note:")
                && !l.starts_with("stack backtrace:")
        })
        .take(2)
        .collect();
    said.reverse();
    if said.is_empty() {
        return String::new();
    }
    format!(" (its last words on stderr: {})", said.join(" "))
}

/// A component's answer as rho's.
fn answer_of(answer: wit::Answer) -> Result<Answer, Failure> {
    let json = |text: Option<String>, what: &str| {
        text.map(|t| serde_json::from_str::<Value>(&t))
            .transpose()
            .map_err(|e| Failure::crashed(format!("the component's {what} are not JSON: {e}")))
    };
    let details = json(answer.details_json, "details")?;
    let structured = json(answer.structured_json, "structured content")?;
    let image = |i: wit::Image| Image::new(i.mime_type, i.bytes);
    let output = if !answer.blocks.is_empty() {
        let mut blocks = Vec::with_capacity(answer.blocks.len());
        for block in answer.blocks {
            let head: BlockHead = serde_json::from_str(&block.head_json)
                .map_err(|e| Failure::crashed(format!("a block's head is not one: {e}")))?;
            blocks.push(Block::from_parts(head, block.payload).map_err(Failure::crashed)?);
        }
        Output::Blocks(blocks)
    } else {
        match answer.kind {
            wit::OutputKind::Text => Output::Text(answer.text),
            wit::OutputKind::Image => match answer.images.into_iter().next() {
                Some(i) => Output::Image {
                    image: image(i),
                    text: answer.text,
                },
                None => Output::Text(answer.text),
            },
            wit::OutputKind::Images => Output::Images {
                images: answer.images.into_iter().map(image).collect(),
                text: answer.text,
            },
        }
    };
    Ok(Answer {
        output,
        structured,
        details,
    })
}

/// A component's failure as rho's.
fn failure_of(failure: wit::Failure) -> Failure {
    match failure.kind {
        wit::FailureKind::Error => {
            let mut error = ToolError::new(failure.message);
            error.details = failure
                .details_json
                .and_then(|json| serde_json::from_str(&json).ok());
            Failure::Tool(error)
        }
        wit::FailureKind::InvalidArguments => Failure::InvalidArguments(failure.message),
        wit::FailureKind::UnknownTool => Failure::UnknownTool(failure.message),
        wit::FailureKind::Panic => Failure::crashed(failure.message),
    }
}

/// One instance's state: its WASI context (nothing granted), its limits, and the call it serves.
struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    ctx: Option<ToolCtx>,
    runtime: Option<tokio::runtime::Handle>,
    stderr: MemoryOutputPipe,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl host::Host for CallState {
    fn update(&mut self, partial: String) {
        if let Some(ctx) = &self.ctx {
            ctx.update(&partial);
        }
    }

    fn log(&mut self, level: host::LogLevel, line: String) {
        let level = match level {
            host::LogLevel::Debug => LogLevel::Debug,
            host::LogLevel::Info => LogLevel::Info,
            host::LogLevel::Notice => LogLevel::Notice,
            host::LogLevel::Warning => LogLevel::Warning,
            host::LogLevel::Error => LogLevel::Error,
            host::LogLevel::Critical => LogLevel::Critical,
            host::LogLevel::Alert => LogLevel::Alert,
            host::LogLevel::Emergency => LogLevel::Emergency,
        };
        if let Some(ctx) = &self.ctx {
            ctx.log(level, &line);
        }
    }

    fn is_cancelled(&mut self) -> bool {
        self.ctx.as_ref().is_some_and(ToolCtx::is_cancelled)
    }

    fn ask(&mut self, message: String, schema_json: String) -> host::Reply {
        let reply = |kind, text: String| host::Reply {
            kind,
            text,
            time_left_ms: None,
        };
        let (Some(ctx), Some(runtime)) = (&self.ctx, &self.runtime) else {
            return reply(host::ReplyKind::Declined, "no call to ask for".into());
        };
        let schema = match serde_json::from_str(&schema_json) {
            Ok(schema) => schema,
            Err(e) => {
                return reply(
                    host::ReplyKind::Cancelled,
                    format!("the question's schema is not JSON: {e}"),
                );
            }
        };
        let answered = runtime.block_on(ctx.ask(Question::new(message, schema)));
        let mut answer = match answered {
            Reply::Accepted(value) => reply(host::ReplyKind::Accepted, value.to_string()),
            Reply::Declined(why) => reply(host::ReplyKind::Declined, why),
            Reply::Cancelled(why) => reply(host::ReplyKind::Cancelled, why),
        };
        answer.time_left_ms = ctx
            .time_left()
            .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
        answer
    }
}
