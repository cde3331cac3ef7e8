//! [`WasmSource`]: a component's tools in a host, as a tool source.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use rho_runtime::{
    EventKind, Grants, RemoteCall, RemoteSource, RemoteTool, RemoteToolEntry, ToolCtx,
};
use rho_runtime::{ToolSource, plugin_api::Value};

use crate::engine::{WasmEngine, WasmLimits, WasmPlugin};

/// A component file whose tools a host serves: `HostBuilder::source("wasm:NAME",
/// WasmSource::file(path))`. The file is read and compiled when the host starts the source; a
/// file that is not a usable component is reported (a `warning` event) and offers no tools.
pub struct WasmSource {
    file: PathBuf,
    engine: Option<WasmEngine>,
    grants: Grants,
}

impl WasmSource {
    /// The component at `file`, run by an engine of its own with the default limits.
    pub fn file(file: impl Into<PathBuf>) -> WasmSource {
        WasmSource {
            file: file.into(),
            engine: None,
            grants: Grants::default(),
        }
    }

    /// What its calls may reach beyond computing: granted paths (preopened at their own
    /// paths), environment keys, the network. Default: nothing but the default keys.
    pub fn grants(mut self, grants: Grants) -> WasmSource {
        self.grants = grants;
        self
    }

    /// The same, run by `engine` (engines are shared by the components they run).
    pub fn engine(mut self, engine: WasmEngine) -> WasmSource {
        self.engine = Some(engine);
        self
    }
}

impl ToolSource for WasmSource {
    fn run(self: Box<Self>, source: RemoteSource) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let file = self.file.clone();
            let loaded = tokio::task::spawn_blocking(move || {
                let engine = match self.engine {
                    Some(engine) => engine,
                    None => WasmEngine::new(WasmLimits::default())?,
                };
                let bytes = std::fs::read(&self.file).map_err(|e| crate::WasmError::Load {
                    file: self.file.display().to_string(),
                    reason: e.to_string(),
                })?;
                engine.load(&self.file, &bytes, &self.grants)
            })
            .await;
            let plugin = match loaded {
                Ok(Ok(plugin)) => plugin,
                Ok(Err(e)) => return warn(&source, &file, e.to_string()),
                Err(e) => return warn(&source, &file, format!("loading it failed: {e}")),
            };
            let origin = format!("{}@{}", plugin.name(), plugin.version());
            let entries = plugin
                .tools()
                .iter()
                .map(|spec| RemoteToolEntry {
                    spec: spec.clone(),
                    origin: origin.clone(),
                    tool: Arc::new(WasmTool {
                        plugin: plugin.clone(),
                        name: spec.name.clone(),
                    }),
                })
                .collect();
            for refused in plugin
                .rejected()
                .iter()
                .cloned()
                .chain(source.set_tools(entries))
            {
                warn(&source, &file, refused);
            }
            // The tools serve as long as the source runs.
            std::future::pending::<()>().await;
        })
    }
}

/// A `warning` event about the component at `file`.
fn warn(source: &RemoteSource, file: &std::path::Path, message: String) {
    tracing::warn!(file = %file.display(), "{message}");
    source.bus().publish(
        None,
        EventKind::Warning {
            subject: source.name().to_owned(),
            message,
        },
    );
}

/// One tool of a component, as the registry calls it.
struct WasmTool {
    plugin: WasmPlugin,
    name: String,
}

impl RemoteTool for WasmTool {
    fn call(&self, args: Arc<Value>, ctx: ToolCtx) -> RemoteCall {
        let plugin = self.plugin.clone();
        let name = self.name.clone();
        Box::pin(async move { plugin.call(&name, &args, ctx).await })
    }
}
