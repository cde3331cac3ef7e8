//! The plugin side of the interface, used by the code [`crate::export_plugin!`] generates: the
//! plugin's tools ([`PluginTools`]) on every target; for a native plugin, the abi_stable entry
//! points (`wasm32` has [`crate::wasm`] instead). Nothing here lets a panic cross the boundary:
//! every native entry point runs under `catch_unwind`, and a panic comes back as a failure whose
//! message says where the plugin panicked and why.

#[cfg(not(target_arch = "wasm32"))]
use std::any::Any;
#[cfg(not(target_arch = "wasm32"))]
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
#[cfg(not(target_arch = "wasm32"))]
use std::panic::{AssertUnwindSafe, catch_unwind};
#[cfg(not(target_arch = "wasm32"))]
use std::sync::Once;

use crate::Tool;
use crate::declare::{Capabilities, Declaration};

#[cfg(not(target_arch = "wasm32"))]
pub use native::*;

/// The tools of one plugin, indexed by name, and the capabilities it declares.
pub struct PluginTools {
    tools: Vec<Tool>,
    index: HashMap<String, usize>,
    capabilities: Capabilities,
}

impl PluginTools {
    /// Indexes `tools`; of two tools with one name, the first wins (the host reports the other).
    pub fn new(tools: Vec<Tool>) -> Self {
        let mut index = HashMap::new();
        for (i, tool) in tools.iter().enumerate() {
            index.entry(tool.name().to_owned()).or_insert(i);
        }
        PluginTools {
            tools,
            index,
            capabilities: Capabilities::none(),
        }
    }

    /// The same tools, the plugin declaring `capabilities`.
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// The tools, in the author's order.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The tool named `name` (the first of that name).
    pub fn find(&self, name: &str) -> Option<&Tool> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    /// The plugin's declaration (capabilities, and each tool's hints and schemas) as JSON.
    pub fn declaration_json(&self) -> Result<String, serde_json::Error> {
        let declaration = Declaration {
            capabilities: self.capabilities.clone(),
            tools: self.tools.iter().map(|t| t.declaration().clone()).collect(),
        };
        serde_json::to_string(&declaration)
    }
}

/// The abi_stable entry points of a native plugin.
#[cfg(not(target_arch = "wasm32"))]
mod native {
    use crate::answer::details_json;
    use abi_stable::prefix_type::PrefixTypeTrait;
    use abi_stable::std_types::{RErr, ROk, ROption, RResult, RStr, RString, RVec};

    use super::{PluginTools, guarded};
    use crate::ffi::{
        FfiAnswer, FfiAnswer2, FfiAnswer3, FfiBlock, FfiCallInfo, FfiCtx, FfiFailure,
        FfiFailureKind, FfiHost, FfiImage, FfiOutcome, FfiOutcome2, FfiOutcome3, FfiOutputKind,
        FfiPluginInfo, FfiToolDesc, INTERFACE_VERSION, PluginMod, PluginModRef,
    };
    use crate::tool::CallFailure;
    use crate::{Answer, Ctx, Image, Output};

    pub use abi_stable;

    /// The generated entry points of one plugin.
    pub struct EntryPoints {
        /// `describe`.
        pub describe: extern "C" fn() -> RResult<FfiPluginInfo, RString>,
        /// `call`.
        pub call: extern "C" fn(RStr<'_>, RStr<'_>, FfiCtx<'_>) -> FfiOutcome,
        /// `declare`.
        pub declare: extern "C" fn() -> RResult<RString, RString>,
        /// `call_with`.
        pub call_with:
            extern "C" fn(RStr<'_>, RStr<'_>, FfiCtx<'_>, FfiCallInfo<'_>) -> FfiOutcome2,
        /// `call_host`.
        pub call_host: extern "C" fn(
            RStr<'_>,
            RStr<'_>,
            FfiCtx<'_>,
            FfiCallInfo<'_>,
            FfiHost<'_>,
        ) -> FfiOutcome3,
    }

    /// Builds the root module from the generated entry points.
    pub fn module(entry: EntryPoints) -> PluginModRef {
        PluginMod {
            interface_version: INTERFACE_VERSION,
            describe: entry.describe,
            call: entry.call,
            declare: entry.declare,
            call_with: entry.call_with,
            call_host: entry.call_host,
        }
        .leak_into_prefix()
    }

    /// The body of the generated `declare` entry point.
    pub fn declare(tools: fn() -> &'static PluginTools) -> RResult<RString, RString> {
        let json = guarded(|| tools().declaration_json());
        match json {
            Ok(Ok(json)) => ROk(json.into()),
            Ok(Err(e)) => RErr(format!("declaring the plugin failed: {e}").into()),
            Err(message) => RErr(format!("declaring the plugin {message}").into()),
        }
    }

    /// The body of the generated `describe` entry point.
    pub fn describe(
        name: &str,
        version: &str,
        tools: fn() -> &'static PluginTools,
    ) -> RResult<FfiPluginInfo, RString> {
        match guarded(|| {
            let tools = tools()
                .tools()
                .iter()
                .map(|tool| FfiToolDesc {
                    name: tool.name().into(),
                    description: tool.description().into(),
                    parameters_json: tool.parameters().to_string().into(),
                    timeout_ms: tool.timeout().into(),
                })
                .collect();
            FfiPluginInfo {
                name: name.into(),
                version: version.into(),
                tools,
            }
        }) {
            Ok(info) => ROk(info),
            Err(message) => RErr(format!("describing the plugin {message}").into()),
        }
    }

    /// The body of the generated `call` entry point (interface 1: no call info, no structured content).
    pub fn call(
        tools: fn() -> &'static PluginTools,
        tool: RStr<'_>,
        args_json: RStr<'_>,
        ctx: FfiCtx<'_>,
    ) -> FfiOutcome {
        match call_with(tools, tool, args_json, ctx, None) {
            RResult::ROk(answer) => ROk(answer.answer),
            RResult::RErr(failure) => RErr(failure),
        }
    }

    /// The body of the generated `call_with` entry point (interface 2: an answer of blocks reaches
    /// such a host as its text and images).
    pub fn call_with(
        tools: fn() -> &'static PluginTools,
        tool: RStr<'_>,
        args_json: RStr<'_>,
        ctx: FfiCtx<'_>,
        info: Option<FfiCallInfo<'_>>,
    ) -> FfiOutcome2 {
        match call_host(tools, tool, args_json, ctx, info, None) {
            RResult::ROk(FfiAnswer3 { answer, blocks }) if !blocks.is_empty() => {
                // Rebuilt from the blocks the host of interface 2 cannot read.
                let mut text = Vec::new();
                let mut images = RVec::new();
                for block in blocks {
                    match serde_json::from_str::<crate::BlockHead>(&block.head_json) {
                        Ok(crate::BlockHead::Text) => {
                            text.push(String::from_utf8_lossy(&block.payload).into_owned())
                        }
                        Ok(crate::BlockHead::Image { mime_type }) => images.push(FfiImage {
                            mime_type: mime_type.into(),
                            bytes: block.payload,
                        }),
                        _ => {}
                    }
                }
                let kind = if images.is_empty() {
                    FfiOutputKind::Text
                } else {
                    FfiOutputKind::Images
                };
                ROk(FfiAnswer2 {
                    answer: FfiAnswer {
                        kind,
                        text: text.join("\n").into(),
                        images,
                        details_json: answer.answer.details_json,
                    },
                    structured_json: answer.structured_json,
                })
            }
            RResult::ROk(answer) => ROk(answer.answer),
            RResult::RErr(failure) => RErr(failure),
        }
    }

    /// The body of the generated `call_host` entry point (interface 3; `info` from interface 2,
    /// `host` from interface 3).
    pub fn call_host(
        tools: fn() -> &'static PluginTools,
        tool: RStr<'_>,
        args_json: RStr<'_>,
        ctx: FfiCtx<'_>,
        info: Option<FfiCallInfo<'_>>,
        host: Option<FfiHost<'_>>,
    ) -> FfiOutcome3 {
        let result = guarded(|| {
            let Some(found) = tools().find(tool.as_str()) else {
                return Err(failure(
                    FfiFailureKind::UnknownTool,
                    format!("this plugin has no tool `{}`", tool.as_str()),
                    None,
                ));
            };
            match Ctx::with_host(ctx, info, host, |ctx| found.run(args_json.as_str(), ctx)) {
                Ok(answer) => answer_to_ffi(answer),
                Err(CallFailure::Tool(e)) => {
                    Err(failure(FfiFailureKind::Error, e.message, e.details))
                }
                Err(CallFailure::InvalidArguments(m)) => {
                    Err(failure(FfiFailureKind::InvalidArguments, m, None))
                }
            }
        });
        match result {
            Ok(Ok(answer)) => ROk(answer),
            Ok(Err(failure)) => RErr(failure),
            Err(message) => RErr(FfiFailure {
                kind: FfiFailureKind::Panic,
                message: message.into(),
                details_json: ROption::RNone,
            }),
        }
    }

    /// Details that cannot cross the boundary (too deep) turn the call into a crash naming why.
    fn details_or_crash(
        details: Option<serde_json::Value>,
    ) -> Result<ROption<RString>, FfiFailure> {
        match details.map(details_json).transpose() {
            Ok(json) => Ok(json.map(RString::from).into()),
            Err(why) => Err(FfiFailure {
                kind: FfiFailureKind::Panic,
                message: format!("answered with {why}").into(),
                details_json: ROption::RNone,
            }),
        }
    }

    fn failure(
        kind: FfiFailureKind,
        message: String,
        details: Option<serde_json::Value>,
    ) -> FfiFailure {
        match details_or_crash(details) {
            Ok(details_json) => FfiFailure {
                kind,
                message: message.into(),
                details_json,
            },
            Err(crash) => crash,
        }
    }

    fn answer_to_ffi(answer: Answer) -> Result<FfiAnswer3, FfiFailure> {
        let details_json = details_or_crash(answer.details)?;
        let structured_json = details_or_crash(answer.structured)?;
        let image = |i: Image| FfiImage {
            mime_type: i.mime_type.into(),
            bytes: i.bytes.into(),
        };
        let mut blocks = RVec::new();
        let (kind, text, images): (_, String, RVec<FfiImage>) = match answer.output {
            Output::Blocks(content) => {
                for block in content {
                    let head_json =
                        serde_json::to_string(&block.head()).map_err(|e| FfiFailure {
                            kind: FfiFailureKind::Panic,
                            message: format!("answered with a block that is not JSON: {e}").into(),
                            details_json: ROption::RNone,
                        })?;
                    blocks.push(FfiBlock {
                        head_json: head_json.into(),
                        payload: block.into_payload().into(),
                    });
                }
                (FfiOutputKind::Text, String::new(), RVec::new())
            }
            Output::Text(text) => (FfiOutputKind::Text, text, RVec::new()),
            Output::Image { image: i, text } => (FfiOutputKind::Image, text, vec![image(i)].into()),
            Output::Images { images, text } => (
                FfiOutputKind::Images,
                text,
                images.into_iter().map(image).collect(),
            ),
        };
        Ok(FfiAnswer3 {
            answer: FfiAnswer2 {
                answer: FfiAnswer {
                    kind,
                    text: text.into(),
                    images,
                    details_json,
                },
                structured_json,
            },
            blocks,
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
thread_local! {
    static IN_GUARD: Cell<bool> = const { Cell::new(false) };
    static LAST_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`, turning a panic into `Err("panicked at FILE:LINE:COL: MESSAGE")`.
///
/// The plugin links its own copy of std, so the panic hook installed here is the plugin's own: it
/// records where a guarded panic happened and stays silent; panics outside a guard go to the
/// previous hook as before.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_GUARD.with(Cell::get) {
                let location = info.location().map(|l| l.to_string());
                LAST_LOCATION.with(|last| *last.borrow_mut() = location);
            } else {
                previous(info);
            }
        }));
    });
    let outer = IN_GUARD.with(|g| g.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    IN_GUARD.with(|g| g.set(outer));
    result.map_err(|payload| {
        let location = LAST_LOCATION.with(|last| last.borrow_mut().take());
        let message = panic_message(payload);
        match location {
            Some(location) => format!("panicked at {location}: {message}"),
            None => format!("panicked: {message}"),
        }
    })
}

/// Reads a panic payload that is a `&str` or a `String`; any other payload is leaked, never
/// dropped (its destructor could panic again, which would abort the host).
#[cfg(not(target_arch = "wasm32"))]
fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        return (*s).to_owned();
    }
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(other) => {
            std::mem::forget(other);
            "a non-string panic payload".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn root_symbol_matches_abi_stable() {
        assert_eq!(
            crate::ffi::ROOT_SYMBOL,
            abi_stable::library::ROOT_MODULE_LOADER_NAME
        );
    }

    #[test]
    fn guarded_reports_location_and_message() {
        let err = guarded(|| panic!("boom {}", 7)).unwrap_err();
        assert!(
            err.starts_with("panicked at plugin-api/src/glue.rs:"),
            "{err}"
        );
        assert!(err.ends_with(": boom 7"), "{err}");
        let err = guarded(|| std::panic::panic_any(42_u8)).unwrap_err();
        assert!(err.ends_with(": a non-string panic payload"), "{err}");
        assert_eq!(guarded(|| 5).unwrap(), 5);
    }
}
