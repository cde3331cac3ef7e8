//! rho's vocabulary in MCP's words: a tool as `tools/list` shows it, a result as `tools/call`
//! answers it. No I/O: what both faces (stdio and HTTP) and the meta-tools send.

use std::sync::Arc;

use base64::Engine;
use rho_runtime::ToolResult;
use rmcp::model::{CallToolResult, ContentBlock as Content, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// A tool as MCP lists it: every hint stated (a tool that declares none gets MCP's cautious
/// defaults, stated too: clients treat a missing annotation as unknown), its title and, for a tool
/// that answers structured data, its output schema.
pub fn mcp_tool(spec: &rho_runtime::ToolSpec) -> Tool {
    let object = |schema: &Value| match schema {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    let hints = spec.hints;
    let mut annotations = ToolAnnotations::new()
        .read_only(hints.read_only)
        .destructive(hints.destructive)
        .idempotent(hints.idempotent)
        .open_world(hints.open_world);
    annotations.title = spec.title.clone();
    let mut tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(object(&spec.parameters)),
    )
    .with_annotations(annotations);
    if let Some(title) = &spec.title {
        tool = tool.with_title(title.clone());
    }
    if let Some(schema) = &spec.output_schema {
        tool = tool.with_raw_output_schema(Arc::new(object(schema)));
    }
    tool
}

/// A rho result as MCP returns it: text -> text content (a structured answer's JSON text when it
/// has no text of its own: content is never empty), images -> image content (base64), structured
/// data -> `structuredContent`, details -> `_meta["rho/details"]`, every outcome but ok ->
/// `isError: true`; the outcome itself in `_meta["rho/outcome"]`. At most `max_bytes` of text,
/// base64 images, structured content and details together: past it what does not fit is left out
/// (images, details, then structured content) and the text is cut, with a note saying so and
/// `_meta["rho/truncated"]` (the whole result is in the host's journal).
pub fn mcp_result(result: &ToolResult, max_bytes: usize) -> CallToolResult {
    if !result.output.blocks().is_empty() {
        return blocks_result(result, max_bytes);
    }
    let mut content = Vec::new();
    let mut left = max_bytes;
    let mut dropped = Vec::new();
    let mut images = Vec::new();
    for image in result.output.images() {
        let encoded = image.bytes.len().div_ceil(3) * 4;
        if encoded <= left {
            left -= encoded;
            let data = base64::engine::general_purpose::STANDARD.encode(&image.bytes);
            images.push(Content::image(data, image.mime_type.clone()));
        } else {
            dropped.push(format!("an image of {} bytes", image.bytes.len()));
        }
    }
    let (structured, details) = json_parts(result, &mut left, &mut dropped);
    let text = match (&result.structured, result.text()) {
        (Some(data), text) if text.is_empty() => std::borrow::Cow::Owned(data.to_string()),
        (_, text) => text,
    };
    if text.len() > left {
        let at = (0..=left.saturating_sub(256))
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        dropped.insert(
            0,
            format!("{} of {} bytes of text", text.len() - at, text.len()),
        );
        left = at;
    }
    let cut = !dropped.is_empty();
    if !text.is_empty() || images.is_empty() || cut {
        let mut shown = text[..left.min(text.len())].to_owned();
        if cut {
            shown.push_str(&format!(
                "\n[rho: the answer is larger than this client is sent ({max_bytes} bytes, \
                 serve.max_result_bytes); left out: {}]",
                dropped.join(", ")
            ));
        }
        content.push(Content::text(shown));
    }
    content.extend(images);
    // A tool with an output schema must send structured content with a success: without it
    // (left out above), the result is an error, as MCP clients would otherwise reject it.
    finish(result, content, structured, details, cut)
}

/// An answer of blocks as MCP returns it: each block as its content, in order (bytes base64),
/// within `max_bytes` with the rest of the result; a block that does not fit is left out, named
/// in a note at the end.
fn blocks_result(result: &ToolResult, max_bytes: usize) -> CallToolResult {
    use rho_runtime::{Block, ResourceContents as Contents};
    use rmcp::model::{Resource as McpResource, ResourceContents};
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut left = max_bytes;
    let mut dropped = Vec::new();
    let mut content = Vec::new();
    for block in result.output.blocks() {
        let cost = match block {
            Block::Text(text) => text.len(),
            Block::Resource(r) if matches!(r.contents, Contents::Text(_)) => block.payload().len(),
            Block::Link(link) => link.uri.len() + link.name.len(),
            _ => block.payload().len().div_ceil(3) * 4,
        };
        if cost > left {
            dropped.push(match block {
                Block::Text(text) => format!("a text of {} bytes", text.len()),
                Block::Image(image) => format!("an image of {} bytes", image.bytes.len()),
                Block::Audio(audio) => format!("audio of {} bytes", audio.bytes.len()),
                Block::Resource(r) => {
                    format!("the resource {} ({} bytes)", r.uri, block.payload().len())
                }
                Block::Link(link) => format!("a link to {}", link.uri),
            });
            continue;
        }
        left -= cost;
        content.push(match block {
            Block::Text(text) => Content::text(text.clone()),
            Block::Image(image) => Content::image(base64(&image.bytes), image.mime_type.clone()),
            Block::Audio(audio) => Content::audio(base64(&audio.bytes), audio.mime_type.clone()),
            Block::Resource(r) => {
                let contents = match &r.contents {
                    Contents::Text(text) => ResourceContents::TextResourceContents {
                        uri: r.uri.clone(),
                        mime_type: r.mime_type.clone(),
                        text: text.clone(),
                        meta: None,
                    },
                    Contents::Blob(bytes) => ResourceContents::BlobResourceContents {
                        uri: r.uri.clone(),
                        mime_type: r.mime_type.clone(),
                        blob: base64(bytes),
                        meta: None,
                    },
                };
                Content::resource(contents)
            }
            Block::Link(link) => {
                let mut resource = McpResource::new(link.uri.clone(), link.name.clone());
                resource.title = link.title.clone();
                resource.description = link.description.clone();
                resource.mime_type = link.mime_type.clone();
                resource.size = link.size;
                Content::resource_link(resource)
            }
        });
    }
    let (structured, details) = json_parts(result, &mut left, &mut dropped);
    let cut = !dropped.is_empty();
    if cut {
        content.push(Content::text(format!(
            "[rho: the answer is larger than this client is sent ({max_bytes} bytes, \
             serve.max_result_bytes); left out: {}]",
            dropped.join(", ")
        )));
    }
    finish(result, content, structured, details, cut)
}

/// The structured content and details of `result` that fit in what is `left` of the budget
/// (the rest named in `dropped`), in that order.
fn json_parts(
    result: &ToolResult,
    left: &mut usize,
    dropped: &mut Vec<String>,
) -> (Option<Value>, Option<Value>) {
    let mut fits = |value: Option<&Value>, what: &str| {
        let value = value?;
        let size = value.to_string().len();
        if size <= *left {
            *left -= size;
            Some(value.clone())
        } else {
            dropped.push(format!("{what} of {size} bytes"));
            None
        }
    };
    let structured = fits(result.structured.as_ref(), "structured content");
    let details = fits(result.details.as_ref(), "details");
    (structured, details)
}

/// The result of `content` with its structured content, details and rho's `_meta`.
fn finish(
    result: &ToolResult,
    content: Vec<Content>,
    structured: Option<Value>,
    details: Option<Value>,
    cut: bool,
) -> CallToolResult {
    let structured_lost = result.structured.is_some() && structured.is_none();
    let mut out = if result.is_error() || structured_lost {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    out.structured_content = structured;
    let mut meta = serde_json::Map::new();
    if cut {
        meta.insert("rho/truncated".into(), json!(true));
    }
    if let Some(details) = details {
        meta.insert("rho/details".into(), details);
    }
    meta.insert("rho/outcome".into(), json!(result.outcome));
    meta.insert(
        "rho/duration_ms".into(),
        json!(result.duration.as_secs_f64() * 1000.0),
    );
    out.meta = Some(rmcp::model::MetaObject(meta));
    out
}
