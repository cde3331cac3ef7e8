//! The one answer codec: how an answer's shape and a failure's kind are named (typed, never
//! strings), and the one place an [`Output`] is assembled from its parts and a [`Failure`] from its
//! kind, whether the parts came through the FFI (in process) or the worker protocol (isolated).
//!
//! It also holds the limits every answer is held to, whatever its source (a native tool, a
//! plugin in process or in a worker, a remote node): at most [`MAX_IMAGES`] images, and details
//! and structured content of at most [`MAX_DETAILS_BYTES`] bytes of JSON each. An answer over a
//! limit ends its call `error` with a text naming the limit; where the answer arrives as parts
//! (the FFI, a worker's frame, a node's reply) it is refused before the parts past the limit are
//! copied or decoded, so its size never becomes the host's memory.

use rho_plugin_api::ffi::{FfiFailureKind, FfiOutputKind};
use rho_plugin_api::{Block, BlockHead, Image, Output, ToolError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::outcome::{CrashReason, Failure};

/// An answer's shape: text only, exactly one image, any number of images (each with text), or
/// blocks of content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Text only.
    Text,
    /// Exactly one image, with text.
    Image,
    /// Any number of images, with text.
    Images,
    /// Blocks of content, in order.
    Blocks,
}

impl OutputKind {
    /// The shape of `output`.
    pub fn of(output: &Output) -> Self {
        match output {
            Output::Text(_) => OutputKind::Text,
            Output::Image { .. } => OutputKind::Image,
            Output::Images { .. } => OutputKind::Images,
            Output::Blocks(_) => OutputKind::Blocks,
        }
    }
}

impl From<FfiOutputKind> for OutputKind {
    fn from(kind: FfiOutputKind) -> Self {
        match kind {
            FfiOutputKind::Text => OutputKind::Text,
            FfiOutputKind::Image => OutputKind::Image,
            FfiOutputKind::Images => OutputKind::Images,
        }
    }
}

/// Why a call produced no answer, as a plugin (or a worker) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The tool answered with an error.
    Error,
    /// The tool panicked (the message says where).
    Panic,
    /// No tool of that name.
    UnknownTool,
    /// The arguments did not fit the tool's type.
    InvalidArguments,
}

impl From<FfiFailureKind> for FailureKind {
    fn from(kind: FfiFailureKind) -> Self {
        match kind {
            FfiFailureKind::Error => FailureKind::Error,
            FfiFailureKind::Panic => FailureKind::Panic,
            FfiFailureKind::UnknownTool => FailureKind::UnknownTool,
            FfiFailureKind::InvalidArguments => FailureKind::InvalidArguments,
        }
    }
}

impl FailureKind {
    /// The kind of `failure`, with the message a worker sends for it.
    pub fn of(failure: &Failure) -> (Self, String) {
        match failure {
            Failure::Tool(e) => (FailureKind::Error, e.message.clone()),
            Failure::Crash(reason) => (FailureKind::Panic, crate::outcome::crash_text(reason)),
            Failure::InvalidArguments(m) => (FailureKind::InvalidArguments, m.clone()),
            // Never from a worker's plugin (only remote tools are unavailable): the nearest kind.
            Failure::UnknownTool(m) | Failure::Unavailable(m) => {
                (FailureKind::UnknownTool, m.clone())
            }
        }
    }
}

/// The most images one answer may carry.
pub const MAX_IMAGES: usize = 256;

/// The most blocks one answer of blocks may carry.
pub const MAX_BLOCKS: usize = 1024;

/// The largest head of one block (its URI, name, title, description and mime type, as JSON
/// text): the text events keep of a block is its head.
pub const MAX_BLOCK_HEAD_BYTES: usize = 16 << 10;

/// The largest question a tool may ask: bytes of its message and its schema's JSON text
/// together (of the questions it asks together: of all of them, with their keys). A larger one
/// is declined, with a reason naming the bound.
pub const MAX_QUESTION_BYTES: usize = 256 << 10;

/// The most questions a tool may ask together; those past it are declined.
pub const MAX_QUESTIONS_AT_ONCE: usize = 32;

/// The largest details, and the largest structured content, one answer may carry: bytes of JSON
/// text (as the plugin or node sent it; a native tool's values are measured as serialized).
pub const MAX_DETAILS_BYTES: usize = 4 << 20;

/// The error of an answer of `tool` with `count` images, over [`MAX_IMAGES`].
pub fn too_many_images(tool: &str, count: usize) -> Failure {
    Failure::Tool(ToolError::new(format!(
        "tool `{tool}` answered with {count} images; an answer may carry at most {MAX_IMAGES}"
    )))
}

/// The error of an answer of `tool` with `count` blocks, over [`MAX_BLOCKS`].
pub fn too_many_blocks(tool: &str, count: usize) -> Failure {
    Failure::Tool(ToolError::new(format!(
        "tool `{tool}` answered with {count} blocks; an answer may carry at most {MAX_BLOCKS}"
    )))
}

/// The error of `what` (details, structured content) of `tool` of `bytes`, over
/// [`MAX_DETAILS_BYTES`].
pub fn too_large(tool: &str, what: &str, bytes: usize) -> Failure {
    Failure::Tool(ToolError::new(format!(
        "tool `{tool}` answered with {what} of {bytes} bytes; an answer may carry at most \
         {MAX_DETAILS_BYTES} bytes of {what}"
    )))
}

/// A plugin's or node's JSON text (`what` of `tool`: details, structured content) as a value:
/// over [`MAX_DETAILS_BYTES`] it is the tool's error, unparsed; text that is not JSON, or nests
/// deeper than [`MAX_DETAILS_DEPTH`](rho_plugin_api::MAX_DETAILS_DEPTH), is the tool's broken
/// contract (`crashed`).
pub fn json_part(tool: &str, what: &str, json: &str) -> Result<Value, Failure> {
    if json.len() > MAX_DETAILS_BYTES {
        return Err(too_large(tool, what, json.len()));
    }
    crate::details::parse(json).map_err(|e| {
        Failure::Crash(CrashReason::Formatted(format!(
            "tool `{tool}` answered with {what} {e}"
        )))
    })
}

/// Holds an answer assembled by the host's own code (a native tool, a remote source) to the
/// limits the codecs apply to parts as they arrive.
pub fn check_limits(tool: &str, answer: &rho_plugin_api::Answer) -> Result<(), Failure> {
    let count = answer.output.images().len();
    if count > MAX_IMAGES {
        return Err(too_many_images(tool, count));
    }
    let blocks = answer.output.blocks();
    if blocks.len() > MAX_BLOCKS {
        return Err(too_many_blocks(tool, blocks.len()));
    }
    for block in blocks {
        check_head(tool, &block.head())?;
    }
    for (what, value) in [
        ("details", &answer.details),
        ("structured content", &answer.structured),
    ] {
        if let Some(value) = value {
            let bytes = serialized_len(value);
            if bytes > MAX_DETAILS_BYTES {
                return Err(too_large(tool, what, bytes));
            }
        }
    }
    Ok(())
}

/// The length of `value` as JSON text, counted without keeping the text.
fn serialized_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail; a value serde cannot write counts as what was written.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The output of shape `kind` from its text and images; a shape that does not match the number
/// of images (`Text` with images, `Image` without exactly one) is the plugin's broken contract.
pub fn output(
    tool: &str,
    kind: OutputKind,
    text: String,
    mut images: Vec<Image>,
) -> Result<Output, Failure> {
    if images.len() > MAX_IMAGES {
        return Err(too_many_images(tool, images.len()));
    }
    match (kind, images.len()) {
        (OutputKind::Text, 0) => Ok(Output::Text(text)),
        (OutputKind::Image, 1) => match images.pop() {
            Some(image) => Ok(Output::Image { image, text }),
            None => Ok(Output::Text(text)),
        },
        (OutputKind::Images, _) => Ok(Output::Images { images, text }),
        // Blocks come with their own heads, never as text and images.
        (kind, n) => Err(Failure::Crash(CrashReason::Protocol(format!(
            "an answer of kind `{kind:?}` with {n} image(s)"
        )))),
    }
}

/// The output made of `parts` (each block's head and payload, in order), or why they make
/// none (a payload that does not fit its head); more than [`MAX_BLOCKS`] is the tool's error.
pub fn blocks(
    tool: &str,
    count: usize,
    parts: impl IntoIterator<Item = (BlockHead, Vec<u8>)>,
) -> Result<Output, Failure> {
    if count > MAX_BLOCKS {
        return Err(too_many_blocks(tool, count));
    }
    let mut content = Vec::with_capacity(count);
    for (head, payload) in parts {
        check_head(tool, &head)?;
        let block = Block::from_parts(head, payload).map_err(|why| {
            Failure::Crash(CrashReason::Formatted(format!(
                "tool `{tool}` answered with a broken block: {why}"
            )))
        })?;
        content.push(block);
    }
    Ok(Output::Blocks(content))
}

/// The error of a block head over [`MAX_BLOCK_HEAD_BYTES`].
fn check_head(tool: &str, head: &BlockHead) -> Result<(), Failure> {
    let bytes = serde_json::to_vec(head).map_or(usize::MAX, |text| text.len());
    if bytes > MAX_BLOCK_HEAD_BYTES {
        return Err(Failure::Tool(ToolError::new(format!(
            "tool `{tool}` answered with a block whose head (URI, names, mime type) is {bytes} \
             bytes; a block's head may be at most {MAX_BLOCK_HEAD_BYTES} bytes"
        ))));
    }
    Ok(())
}

/// The failure of `kind` with `message`; `details` (already decoded) belong to errors only.
pub fn failure(
    kind: FailureKind,
    message: String,
    details: impl FnOnce() -> Result<Option<Value>, Failure>,
) -> Failure {
    match kind {
        FailureKind::Error => match details() {
            Ok(details) => Failure::Tool(ToolError { message, details }),
            Err(failure) => failure,
        },
        FailureKind::Panic => Failure::Crash(CrashReason::Formatted(message)),
        FailureKind::UnknownTool => Failure::UnknownTool(message),
        FailureKind::InvalidArguments => Failure::InvalidArguments(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_plugin_api::ResourceLink;

    fn text_of(failure: Failure) -> String {
        match failure {
            Failure::Tool(e) => format!("error: {}", e.message),
            Failure::Crash(reason) => format!("crash: {}", crate::outcome::crash_text(&reason)),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn blocks_are_held_to_their_count_heads_and_payloads() {
        let link = |uri: String| BlockHead::Link(ResourceLink::new(uri, "n"));
        // Whole and in order.
        let parts = vec![
            (BlockHead::Text, b"hi".to_vec()),
            (link("file:///a".into()), Vec::new()),
        ];
        let output = blocks("t", 2, parts).unwrap();
        assert_eq!(output.blocks().len(), 2);
        assert_eq!(output.text(), "hi");
        // Too many: refused before any block is assembled.
        let err = blocks("t", MAX_BLOCKS + 1, Vec::new()).unwrap_err();
        assert!(text_of(err).contains("1025 blocks"));
        // A head too large (a 20 KiB URI): the tool's error.
        let err = blocks("t", 1, vec![(link("x".repeat(20 << 10)), Vec::new())]).unwrap_err();
        assert!(
            text_of(err).starts_with("error: "),
            "a head's size is the tool's error"
        );
        // Text that is not UTF-8, a link with a payload: the plugin's broken contract.
        let err = blocks("t", 1, vec![(BlockHead::Text, vec![0xff])]).unwrap_err();
        assert!(text_of(err).contains("not UTF-8"));
        let err = blocks("t", 1, vec![(link("file:///a".into()), vec![1])]).unwrap_err();
        assert!(text_of(err).contains("carries 1 bytes"));
        // A host-made answer is held to the same head bound.
        let answer = rho_plugin_api::Answer::blocks(vec![Block::Link(ResourceLink::new(
            "y".repeat(20 << 10),
            "n",
        ))]);
        assert!(check_limits("t", &answer).is_err());
    }
}
