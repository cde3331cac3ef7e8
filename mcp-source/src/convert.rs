//! MCP's words in rho's: a server's tool as a [`ToolSpec`], a `tools/call` result as an answer.

use base64::Engine;
use rho_runtime::{Answer, Block, Failure, Image, Output, ToolError, ToolHints, ToolSpec};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, Tool};
use serde_json::Value;

use crate::config::ToolOverride;

/// `tool` of server `server` as rho lists it: MCP's cautious defaults for the hints it leaves
/// out, then the entry's overrides (hints, title, timeout).
pub(crate) fn spec(server: &str, tool: &Tool, over: Option<&ToolOverride>) -> ToolSpec {
    let defaults = ToolHints::default();
    let annotations = tool.annotations.as_ref();
    let hint = |get: fn(&rmcp::model::ToolAnnotations) -> Option<bool>, default: bool| {
        annotations.and_then(get).unwrap_or(default)
    };
    let mut hints = ToolHints {
        read_only: hint(|a| a.read_only_hint, defaults.read_only),
        destructive: hint(|a| a.destructive_hint, defaults.destructive),
        idempotent: hint(|a| a.idempotent_hint, defaults.idempotent),
        open_world: hint(|a| a.open_world_hint, defaults.open_world),
    };
    let mut title = tool
        .title
        .clone()
        .or_else(|| annotations.and_then(|a| a.title.clone()));
    let (mut timeout_ms, mut idle_timeout_ms) = (None, None);
    if let Some(over) = over {
        hints.read_only = over.read_only.unwrap_or(hints.read_only);
        hints.destructive = over.destructive.unwrap_or(hints.destructive);
        hints.idempotent = over.idempotent.unwrap_or(hints.idempotent);
        hints.open_world = over.open_world.unwrap_or(hints.open_world);
        title = over.title.clone().or(title);
        timeout_ms = over.timeout_ms;
        idle_timeout_ms = over.idle_timeout_ms;
    }
    ToolSpec {
        name: tool.name.to_string(),
        title,
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        parameters: Value::Object((*tool.input_schema).clone()),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|schema| Value::Object((**schema).clone())),
        hints,
        max_result_bytes: None,
        timeout_ms,
        idle_timeout_ms,
        // A server's own tasks are not relayed: rho calls it within one request, and runs the
        // call as a task of its own when the host's threshold says the tool is long.
        task_support: Default::default(),
        asks_first: false,
        plugin: Some(format!("mcp:{server}")),
        plugin_version: None,
    }
}

/// A server's result as rho's answer: one text block is text, anything else blocks in order;
/// `isError` is the tool's error (its text the message); base64 that does not decode is the
/// server's broken contract (`crashed`, naming the server).
pub(crate) fn answer(server: &str, result: CallToolResult) -> Result<Answer, Failure> {
    let bytes = |what: &str, data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| {
                Failure::crashed(format!(
                    "mcp server `{server}` answered with {what} that is not base64: {e}"
                ))
            })
    };
    let mut blocks = Vec::with_capacity(result.content.len());
    for content in result.content {
        blocks.push(match content {
            ContentBlock::Text(text) => Block::Text(text.text),
            ContentBlock::Image(image) => {
                Block::Image(Image::new(image.mime_type, bytes("an image", &image.data)?))
            }
            ContentBlock::Audio(audio) => {
                Block::audio(audio.mime_type, bytes("audio", &audio.data)?)
            }
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => Block::Resource(rho_runtime::Resource {
                    uri,
                    mime_type,
                    contents: rho_runtime::ResourceContents::Text(text),
                }),
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => Block::Resource(rho_runtime::Resource {
                    uri,
                    mime_type,
                    contents: rho_runtime::ResourceContents::Blob(bytes("a blob", &blob)?),
                }),
                other => {
                    return Err(Failure::crashed(format!(
                        "mcp server `{server}` answered with resource contents rho cannot read: \
                         {other:?}"
                    )));
                }
            },
            ContentBlock::ResourceLink(link) => {
                let mut out = rho_runtime::ResourceLink::new(link.uri, link.name);
                out.title = link.title;
                out.description = link.description;
                out.mime_type = link.mime_type;
                out.size = link.size;
                Block::Link(out)
            }
            other => {
                return Err(Failure::crashed(format!(
                    "mcp server `{server}` answered with content rho cannot read: {other:?}"
                )));
            }
        });
    }
    let output = match blocks.as_mut_slice() {
        [] => Output::Text(String::new()),
        [Block::Text(text)] => Output::Text(std::mem::take(text)),
        _ => Output::Blocks(blocks),
    };
    if result.is_error == Some(true) {
        return Err(Failure::Tool(ToolError::new(output.text().into_owned())));
    }
    Ok(Answer {
        output,
        structured: result.structured_content,
        details: None,
    })
}
