//! What a tool answers: [`Answer`] on success, [`ToolError`] on failure. The same types serve plugin
//! authors and hosts (a host-native tool in `rho-runtime` answers with them too).

use std::borrow::Cow;

use serde_json::Value;

use crate::content::{Block, Image};

/// What the model reads of an answer: text, one image with text, several images with text, or
/// any blocks (text, images, audio, resources, links) in the order the tool put them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Text only.
    Text(String),
    /// One image (a screenshot) with text.
    Image {
        /// The image.
        image: Image,
        /// Text about it.
        text: String,
    },
    /// Several images (photos) with text.
    Images {
        /// The images, in order.
        images: Vec<Image>,
        /// Text about them.
        text: String,
    },
    /// Blocks of content, in order ([`Answer::blocks`]).
    Blocks(Vec<Block>),
}

impl Output {
    /// The text part of the output, whatever its shape: of blocks, their text blocks joined
    /// by a newline.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Output::Text(text) | Output::Image { text, .. } | Output::Images { text, .. } => {
                Cow::Borrowed(text)
            }
            Output::Blocks(blocks) => {
                let mut texts = blocks.iter().filter_map(|b| match b {
                    Block::Text(text) => Some(text.as_str()),
                    _ => None,
                });
                let first = texts.next().unwrap_or_default();
                match texts.next() {
                    None => Cow::Borrowed(first),
                    Some(second) => {
                        let mut joined = format!("{first}\n{second}");
                        for text in texts {
                            joined.push('\n');
                            joined.push_str(text);
                        }
                        Cow::Owned(joined)
                    }
                }
            }
        }
    }

    /// The images of the output, in order (none for text).
    pub fn images(&self) -> Vec<&Image> {
        match self {
            Output::Text(_) => Vec::new(),
            Output::Image { image, .. } => vec![image],
            Output::Images { images, .. } => images.iter().collect(),
            Output::Blocks(blocks) => blocks
                .iter()
                .filter_map(|b| match b {
                    Block::Image(image) => Some(image),
                    _ => None,
                })
                .collect(),
        }
    }

    /// The blocks of an output made of blocks, in order; empty for the other shapes (their
    /// text and images are [`Output::text`] and [`Output::images`]).
    pub fn blocks(&self) -> &[Block] {
        match self {
            Output::Blocks(blocks) => blocks,
            _ => &[],
        }
    }
}

/// A tool's successful answer: output for the model, optional structured data (JSON, checked
/// against the tool's output schema) for the client program, and optional details (JSON) for the
/// host's screens, which the model never sees.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// What the model and the session get.
    pub output: Output,
    /// Structured data, for a tool that declares an output schema ([`crate::Tool::structured`]).
    pub structured: Option<Value>,
    /// What screens get, beside the output.
    pub details: Option<Value>,
}

impl Answer {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Output::Text(text.into()).into()
    }

    /// One image with text.
    pub fn image(
        mime_type: impl Into<String>,
        bytes: impl Into<Vec<u8>>,
        text: impl Into<String>,
    ) -> Self {
        Output::Image {
            image: Image::new(mime_type, bytes),
            text: text.into(),
        }
        .into()
    }

    /// Several images with text.
    pub fn images(images: Vec<Image>, text: impl Into<String>) -> Self {
        Output::Images {
            images,
            text: text.into(),
        }
        .into()
    }

    /// An answer of blocks (text, images, audio, resources, links), which MCP clients read in
    /// this order: see [`Block`].
    pub fn blocks(blocks: Vec<Block>) -> Self {
        Output::Blocks(blocks).into()
    }

    /// A structured answer: `data` as structured content, and its JSON text as the output for
    /// the model (MCP's rule for clients that read only text).
    pub fn structured(data: Value) -> Self {
        Answer {
            output: Output::Text(data.to_string()),
            structured: Some(data),
            details: None,
        }
    }

    /// The same answer with `details` for screens (build them with [`crate::json!`]).
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

impl From<Output> for Answer {
    fn from(output: Output) -> Self {
        Answer {
            output,
            structured: None,
            details: None,
        }
    }
}

/// A tool's failure: a message for the model, and optional details for screens.
///
/// Any `std::error::Error` converts into it, so `?` works in tool functions.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// What went wrong, in words a model can act on.
    pub message: String,
    /// What screens get, beside the message.
    pub details: Option<Value>,
}

impl ToolError {
    /// A failure with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            details: None,
        }
    }

    /// The same failure with `details` for screens.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

impl<E: std::error::Error> From<E> for ToolError {
    fn from(error: E) -> Self {
        ToolError::new(error.to_string())
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// How deep details may nest (arrays and objects inside each other): deeper details are refused
/// with an error naming the bound, on both sides of the boundary, without recursion.
pub const MAX_DETAILS_DEPTH: usize = 512;

/// How deep `value` nests (a scalar is 0, `[1]` is 1), counted without recursion and stopping
/// past `MAX_DETAILS_DEPTH`.
pub fn details_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        let depth = depth + 1;
        deepest = deepest.max(depth);
        if depth > MAX_DETAILS_DEPTH {
            return depth;
        }
        stack.extend(children.map(|c| (c, depth)));
    }
    deepest
}

/// Drops `value` without recursion (serde_json's own drop recurses once per level, and a value
/// nested 100,000 deep would overflow the stack).
pub fn drop_details(value: Value) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

/// Details as JSON text for the boundary, or why they cannot cross it.
pub(crate) fn details_json(value: Value) -> Result<String, String> {
    let depth = details_depth(&value);
    if depth > MAX_DETAILS_DEPTH {
        drop_details(value);
        return Err(format!(
            "details nested deeper than {MAX_DETAILS_DEPTH} levels"
        ));
    }
    Ok(value.to_string())
}
