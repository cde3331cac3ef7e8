//! The plugin side of the component interface (`wit/plugin.wit`, world `rho:plugin/plugin`),
//! used by the code [`crate::export_plugin!`] generates when a plugin is built for `wasm32`: the
//! same tools, descriptions, declarations and answers as the native interface, through the
//! component model instead of abi_stable.
//!
//! A panic in a component aborts it (wasm32 has no unwinding): the host reads the trap as the
//! call's crash, with the panic's message from the component's stderr.

use crate::glue::PluginTools;
use crate::tool::CallFailure;
use crate::{Answer, Ctx, Image, Output};

pub mod bindings;
pub(crate) mod host;

use bindings::exports::rho::plugin::tools as wit;

pub use wit::{CallInfo, Guest};

/// The answer of a call, as the world carries it.
pub type WitAnswer = wit::Answer;
/// The failure of a call, as the world carries it.
pub type WitFailure = wit::Failure;
/// The plugin's description, as the world carries it.
pub type WitPluginInfo = wit::PluginInfo;

/// The body of the generated `describe` export.
pub fn describe(
    name: &str,
    version: &str,
    tools: fn() -> &'static PluginTools,
) -> Result<WitPluginInfo, String> {
    let tools = tools()
        .tools()
        .iter()
        .map(|tool| wit::ToolDesc {
            name: tool.name().into(),
            description: tool.description().into(),
            parameters_json: tool.parameters().to_string(),
            timeout_ms: tool.timeout(),
        })
        .collect();
    Ok(wit::PluginInfo {
        name: name.into(),
        version: version.into(),
        tools,
    })
}

/// The body of the generated `declare` export.
pub fn declare(tools: fn() -> &'static PluginTools) -> Result<String, String> {
    tools()
        .declaration_json()
        .map_err(|e| format!("declaring the plugin failed: {e}"))
}

/// The body of the generated `call` export.
pub fn call(
    tools: fn() -> &'static PluginTools,
    tool: String,
    args_json: String,
    info: CallInfo,
) -> Result<WitAnswer, WitFailure> {
    let tools = tools();
    let Some(found) = tools.find(&tool) else {
        return Err(failure(
            wit::FailureKind::UnknownTool,
            format!("this plugin has no tool `{tool}`"),
            None,
        ));
    };
    let result = Ctx::with_component(info, |ctx| found.run(&args_json, ctx));
    match result {
        Ok(answer) => answer_to_wit(answer),
        Err(CallFailure::Tool(e)) => Err(failure(wit::FailureKind::Error, e.message, e.details)),
        Err(CallFailure::InvalidArguments(m)) => {
            Err(failure(wit::FailureKind::InvalidArguments, m, None))
        }
    }
}

fn failure(
    kind: wit::FailureKind,
    message: String,
    details: Option<serde_json::Value>,
) -> WitFailure {
    match details.map(crate::answer::details_json).transpose() {
        Ok(details_json) => WitFailure {
            kind,
            message,
            details_json,
        },
        Err(why) => WitFailure {
            kind: wit::FailureKind::Panic,
            message: format!("answered with {why}"),
            details_json: None,
        },
    }
}

fn answer_to_wit(answer: Answer) -> Result<WitAnswer, WitFailure> {
    let json = |value: Option<serde_json::Value>| {
        value
            .map(crate::answer::details_json)
            .transpose()
            .map_err(|why| {
                failure(
                    wit::FailureKind::Panic,
                    format!("answered with {why}"),
                    None,
                )
            })
    };
    let details_json = json(answer.details)?;
    let structured_json = json(answer.structured)?;
    let image = |i: Image| wit::Image {
        mime_type: i.mime_type,
        bytes: i.bytes,
    };
    let mut blocks = Vec::new();
    let (kind, text, images) = match answer.output {
        Output::Blocks(content) => {
            for block in content {
                let head_json = serde_json::to_string(&block.head()).map_err(|e| {
                    failure(
                        wit::FailureKind::Panic,
                        format!("answered with a block that is not JSON: {e}"),
                        None,
                    )
                })?;
                blocks.push(wit::Block {
                    head_json,
                    payload: block.into_payload(),
                });
            }
            (wit::OutputKind::Text, String::new(), Vec::new())
        }
        Output::Text(text) => (wit::OutputKind::Text, text, Vec::new()),
        Output::Image { image: i, text } => (wit::OutputKind::Image, text, vec![image(i)]),
        Output::Images { images, text } => (
            wit::OutputKind::Images,
            text,
            images.into_iter().map(image).collect(),
        ),
    };
    Ok(WitAnswer {
        kind,
        text,
        images,
        details_json,
        structured_json,
        blocks,
    })
}
