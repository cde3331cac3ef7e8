//! A call's result in both directions: rho's [`ToolResult`] as `tools/call` answers it, within
//! the client's budget, and a server's `tools/call` result as rho's [`Answer`].

use rho_runtime::{Answer, Block, Failure, Output, ToolError, ToolResult};
use rmcp::model::{CallToolResult, ContentBlock as Content};
use serde_json::{Value, json};

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
            images.push(super::image_content(image));
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
        content.push(super::content(block));
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
    if let Some(decision) = &result.decision {
        meta.insert("rho/decision".into(), json!(decision));
        if let Some(wait) = decision.retry_after() {
            meta.insert("rho/retry_after_ms".into(), json!(wait.as_millis() as u64));
        }
    }
    meta.insert(
        "rho/duration_ms".into(),
        json!(result.duration.as_secs_f64() * 1000.0),
    );
    out.meta = Some(rmcp::model::MetaObject(meta));
    out
}

/// A server's result as rho's answer: one text block is text, anything else blocks in order;
/// `isError` is the tool's error (its text the message); `structuredContent` is the answer's
/// structured content and `_meta["rho/details"]` (what a rho server sends) its details. Content
/// rho cannot read is the server's broken contract (`crashed`, naming the server: [`super::block`]).
pub fn answer(server: &str, result: CallToolResult) -> Result<Answer, Failure> {
    let mut blocks = Vec::with_capacity(result.content.len());
    for content in result.content {
        blocks.push(super::block(server, content)?);
    }
    let output = match blocks.as_mut_slice() {
        [] => Output::Text(String::new()),
        [Block::Text(text)] => Output::Text(std::mem::take(text)),
        _ => Output::Blocks(blocks),
    };
    let details = result
        .meta
        .and_then(|mut meta| meta.0.remove("rho/details"))
        .filter(|details| !details.is_null());
    if result.is_error == Some(true) {
        let mut error = ToolError::new(output.text().into_owned());
        error.details = details;
        return Err(Failure::Tool(error));
    }
    Ok(Answer {
        output,
        structured: result.structured_content,
        details,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_runtime::{Image, Outcome};

    fn ok(output: Output, structured: Option<Value>, details: Option<Value>) -> ToolResult {
        ToolResult {
            outcome: Outcome::Ok,
            output,
            structured,
            details,
            ..ToolResult::failed("c1", "t", Outcome::Ok, "")
        }
    }

    /// What rho answers a client, read back by rho as a source, is the answer it was: text,
    /// images, blocks, structured content and details.
    #[test]
    fn results_round_trip() {
        let image = Image::new("image/png", vec![1, 2, 3]);
        let cases = [
            ok(Output::Text("remember the milk".into()), None, None),
            ok(
                Output::Text("remember the milk".into()),
                Some(json!({"content": "remember the milk"})),
                Some(json!({"lines": 1})),
            ),
            ok(
                Output::Blocks(vec![
                    Block::Text("a".into()),
                    Block::Image(image.clone()),
                    Block::Text("b".into()),
                ]),
                None,
                None,
            ),
        ];
        for result in cases {
            let back = answer("s", mcp_result(&result, 1 << 20)).expect("read back");
            assert_eq!(back.output, result.output);
            assert_eq!(back.structured, result.structured);
            assert_eq!(back.details, result.details);
        }
        // One image and its text: blocks in order, the same content.
        let pictured = ok(
            Output::Image {
                image: image.clone(),
                text: "a picture".into(),
            },
            None,
            None,
        );
        let back = answer("s", mcp_result(&pictured, 1 << 20)).expect("read back");
        assert_eq!(
            back.output,
            Output::Blocks(vec![Block::Text("a picture".into()), Block::Image(image)])
        );
    }

    /// An error result is the tool's error on the way back, its text and details kept.
    #[test]
    fn an_error_round_trips_as_the_tools_error() {
        let mut failed = ToolResult::failed("c1", "t", Outcome::Error, "no such file");
        failed.details = Some(json!({"path": "/x"}));
        let Err(Failure::Tool(error)) = answer("s", mcp_result(&failed, 1 << 20)) else {
            panic!("not the tool's error");
        };
        assert_eq!(error.message, "no such file");
        assert_eq!(error.details, Some(json!({"path": "/x"})));
    }
}
