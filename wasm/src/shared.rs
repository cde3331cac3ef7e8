//! What the engine and its loaded components share, below both: the world's bindings, the
//! limits, the engine's parts ([`EngineInner`]: wasmtime's engine, the linker, the compile cache,
//! the turns of calls and of instances made ahead), how a store for one instance is made, and an
//! instance's state with the host functions it imports.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rho_runtime::plugin_api::{LogLevel, Question, Reply};
use rho_runtime::{Grants, ToolCtx};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store, StoreLimitsBuilder, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::cache::CompileCache;
use crate::stderr::LastWords;
use crate::ticker::Ticker;

/// The `rho:plugin` world's bindings, generated from `wit/plugin.wit`.
/// Its exports are async (a call runs on a fiber that yields at each epoch tick), and so is
/// `ask` (a question waits without holding a thread).
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        world: "plugin",
        path: "wit",
        imports: { "rho:plugin/host.ask": async },
        exports: { default: async },
    });
}

use bindings::rho::plugin::host;

/// Instances made ahead of calls, in all the engine's components together (each holds a slot
/// and its memory image).
pub(crate) const SPARES: u32 = 32;

/// How long describing and declaring a component may take at load.
pub(crate) const LOAD_BOUND: Duration = Duration::from_secs(10);

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
    /// The size of each loaded component's scratch directory, `/tmp` as its calls see it:
    /// an in-memory file system (a tmpfs no path of the host reaches) that refuses writes past
    /// this many bytes with "no space left on device". Its files last as long as the loaded
    /// version (its calls share it; a reload starts empty). 0: no scratch directory. Linux
    /// only; where the kernel refuses it, the component runs without one and its sandbox
    /// report says so.
    pub scratch_bytes: u64,
}

impl Default for WasmLimits {
    /// 256 MiB of memory per instance, fuel not counted, 64 MiB of scratch.
    fn default() -> Self {
        WasmLimits {
            memory_bytes: 256 << 20,
            fuel: None,
            scratch_bytes: 64 << 20,
        }
    }
}

/// The engine's parts, shared by the engine's handles and its loaded components.
pub(crate) struct EngineInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<CallState>,
    pub(crate) limits: WasmLimits,
    pub(crate) cache: CompileCache,
    pub(crate) ticker: Arc<Ticker>,
    /// Calls running at once; more wait for one to end (each holds an instance slot).
    pub(crate) calls: Arc<tokio::sync::Semaphore>,
    /// Instances made ahead of calls, all components together.
    pub(crate) spares: Arc<tokio::sync::Semaphore>,
}

impl EngineInner {
    /// A store for one instance: `grants` as WASI gives them (each granted path preopened at
    /// its own path, read-only or read-write; the granted environment keys with the host's
    /// values; sockets only with the network), the scratch directory at `/tmp`, stderr kept,
    /// memory bounded. Each epoch tick stops it once its call is given up or past its deadline
    /// (a question's wait moves the deadline), or, before a call is set, after [`LOAD_BOUND`].
    pub(crate) fn store(
        &self,
        grants: &Grants,
        scratch: Option<&Path>,
    ) -> Result<Store<CallState>, String> {
        let stderr = LastWords::default();
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone());
        if let Some(scratch) = scratch {
            wasi.preopened_dir(scratch, "/tmp", FsPerms::ReadWrite)
                .map_err(|e| format!("its scratch directory: {e:#}"))?;
        }
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
            .memory_size(self.limits.memory_bytes)
            .build();
        let mut store = Store::new(
            &self.engine,
            CallState {
                wasi,
                table: ResourceTable::new(),
                limits,
                ctx: None,
                until: Instant::now() + LOAD_BOUND,
                stderr,
            },
        );
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|store| {
            let state = store.data();
            let stop = match &state.ctx {
                Some(ctx) if ctx.is_cancelled() => Some("the call was given up"),
                Some(ctx) if ctx.deadline().is_some_and(|at| Instant::now() >= at) => {
                    Some("the call's time ran out")
                }
                Some(_) => None,
                None => {
                    (Instant::now() >= state.until).then_some("describing itself took too long")
                }
            };
            match stop {
                Some(why) => Err(wasmtime::Error::msg(why)),
                // Its thread goes back to its caller for a moment at each tick.
                None => Ok(UpdateDeadline::Yield(1)),
            }
        });
        if let Some(fuel) = self.limits.fuel {
            store
                .set_fuel(fuel)
                .map_err(|e| format!("setting its fuel: {e}"))?;
        }
        Ok(store)
    }
}

/// Runs `work` (an instance's async work: making it, describing it) to its end on this thread.
/// On a multi-threaded runtime's worker it tells the runtime it blocks; off any runtime, WASI's
/// I/O runs on wasmtime-wasi's own; on a current-thread runtime, it runs on a thread of its own.
pub(crate) fn block_on<F>(work: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| handle.block_on(work))
        }
        Ok(_) => std::thread::scope(|scope| {
            match scope
                .spawn(|| wasmtime_wasi::runtime::in_tokio(work))
                .join()
            {
                Ok(output) => output,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }),
        Err(_) => wasmtime_wasi::runtime::in_tokio(work),
    }
}

/// One instance's state: its WASI context (with the grants), its limits, the call it serves
/// (none yet while it is made ahead), and its stderr.
pub(crate) struct CallState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: wasmtime::StoreLimits,
    pub(crate) ctx: Option<ToolCtx>,
    /// Before a call is set (at load): when describing itself has taken too long.
    pub(crate) until: Instant,
    pub(crate) stderr: LastWords,
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

    async fn ask(&mut self, message: String, schema_json: String) -> host::Reply {
        let reply = |kind, text: String| host::Reply {
            kind,
            text,
            time_left_ms: None,
        };
        let Some(ctx) = &self.ctx else {
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
        let answered = ctx.ask(Question::new(message, schema)).await;
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
