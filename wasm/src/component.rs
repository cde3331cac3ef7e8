//! [`WasmEngine`] as the component engine of plugin directories.

use std::path::Path;
use std::sync::Arc;

use rho_runtime::plugin_api::Value;
use rho_runtime::{
    ComponentEngine, Grants, LoadError, LoadedComponent, RemoteCall, RemoteTool, ToolCtx,
};

use crate::engine::WasmEngine;
use crate::error::WasmError;
use crate::plugin::WasmPlugin;

/// The major version of the `rho:plugin` world components implement (`rho:plugin@3.0.0`).
pub const WORLD_VERSION: u32 = 3;

impl ComponentEngine for WasmEngine {
    fn load(
        &self,
        path: &Path,
        bytes: &[u8],
        sha256: &str,
        grants: &Grants,
    ) -> Result<LoadedComponent, LoadError> {
        let plugin = self
            .load_hashed(path, bytes, sha256, grants)
            .map_err(|e| match e {
                WasmError::Load { reason, .. } => LoadError::Component {
                    path: path.to_owned(),
                    reason,
                },
                other => LoadError::Component {
                    path: path.to_owned(),
                    reason: other.to_string(),
                },
            })?;
        // Refused before any call, as an isolated plugin is: a component without what it needs
        // would fail its calls one by one.
        if let Some(asked) = grants.uncovered(plugin.capabilities()) {
            return Err(LoadError::NotGranted {
                path: path.to_owned(),
                asked,
            });
        }
        let tools = plugin
            .tools()
            .iter()
            .map(|spec| {
                let tool = WasmTool {
                    plugin: plugin.clone(),
                    name: spec.name.clone(),
                };
                (spec.clone(), Arc::new(tool) as Arc<dyn RemoteTool>)
            })
            .collect();
        Ok(LoadedComponent {
            name: plugin.name().to_owned(),
            version: plugin.version().to_owned(),
            interface_version: WORLD_VERSION,
            capabilities: plugin.capabilities().clone(),
            rejected: plugin.rejected().to_vec(),
            tools,
            sandbox: plugin.sandbox(),
        })
    }
}

/// One tool of a component, as the registry calls it.
struct WasmTool {
    plugin: WasmPlugin,
    name: String,
}

impl RemoteTool for WasmTool {
    /// A call computes in slices of one epoch tick (about a millisecond) and moves to a
    /// blocking thread when it runs longer.
    fn never_blocks(&self) -> bool {
        true
    }

    fn call(&self, args: Arc<Value>, ctx: ToolCtx) -> RemoteCall {
        let plugin = self.plugin.clone();
        let name = self.name.clone();
        Box::pin(async move { plugin.call(&name, &args, ctx).await })
    }
}
