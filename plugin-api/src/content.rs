//! [`Block`]: one piece of an answer's content (text, an image, audio, an embedded resource or a
//! link to one), in the order the tool put them.

use serde::{Deserialize, Serialize};

/// An image for the model: its mime type and encoded bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// e.g. `image/png`.
    pub mime_type: String,
    /// The encoded image, raw.
    pub bytes: Vec<u8>,
}

impl Image {
    /// An image of `mime_type` made of `bytes`.
    pub fn new(mime_type: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        Image {
            mime_type: mime_type.into(),
            bytes: bytes.into(),
        }
    }
}

/// Audio for the model: its mime type and encoded bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audio {
    /// e.g. `audio/wav`.
    pub mime_type: String,
    /// The encoded audio, raw.
    pub bytes: Vec<u8>,
}

/// A resource embedded in an answer: its URI, its mime type if known, and its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The resource's URI (`file:///...`, `test://...`).
    pub uri: String,
    /// e.g. `text/plain`; `None` when unknown.
    pub mime_type: Option<String>,
    /// What it holds.
    pub contents: ResourceContents,
}

/// What an embedded [`Resource`] holds: text, or bytes (a blob).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceContents {
    /// Text.
    Text(String),
    /// Bytes, raw (a client gets them base64-encoded).
    Blob(Vec<u8>),
}

/// A link to a resource the client may read on its own: its URI and name, and what else is
/// known of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceLink {
    /// The resource's URI.
    pub uri: String,
    /// Its programmatic name.
    pub name: String,
    /// A title for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// e.g. `text/plain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl ResourceLink {
    /// A link to `uri` named `name`.
    pub fn new(uri: impl Into<String>, name: impl Into<String>) -> Self {
        ResourceLink {
            uri: uri.into(),
            name: name.into(),
            ..ResourceLink::default()
        }
    }

    /// The same link with a mime type.
    pub fn with_mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// The same link with a description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// One block of an answer's content. An answer of blocks ([`crate::Answer::blocks`]) reaches an
/// MCP client as its `content`, block for block, in order.
///
/// ```
/// use rho_plugin_api::{Answer, Block, ResourceLink};
/// let answer = Answer::blocks(vec![
///     Block::text("Here is the recording and its transcript."),
///     Block::audio("audio/wav", vec![0x52, 0x49, 0x46, 0x46]),
///     Block::resource_text("file:///tmp/transcript.txt", "text/plain", "hello"),
///     Block::Link(ResourceLink::new("file:///tmp/raw.wav", "raw.wav")),
/// ]);
/// assert_eq!(answer.output.text(), "Here is the recording and its transcript.");
/// assert_eq!(answer.output.blocks().len(), 4);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// Text.
    Text(String),
    /// An image.
    Image(Image),
    /// Audio.
    Audio(Audio),
    /// An embedded resource.
    Resource(Resource),
    /// A link to a resource.
    Link(ResourceLink),
}

impl Block {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Block::Text(text.into())
    }

    /// An image block.
    pub fn image(mime_type: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        Block::Image(Image::new(mime_type, bytes))
    }

    /// An audio block.
    pub fn audio(mime_type: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        Block::Audio(Audio {
            mime_type: mime_type.into(),
            bytes: bytes.into(),
        })
    }

    /// An embedded resource holding text.
    pub fn resource_text(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Block::Resource(Resource {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            contents: ResourceContents::Text(text.into()),
        })
    }

    /// An embedded resource holding bytes.
    pub fn resource_blob(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        bytes: impl Into<Vec<u8>>,
    ) -> Self {
        Block::Resource(Resource {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            contents: ResourceContents::Blob(bytes.into()),
        })
    }

    /// The block's payload: its text's bytes, or its image, audio or blob bytes (empty for a
    /// link). With [`Block::head`] it is the block, as it crosses the plugin boundary and the
    /// worker protocol (bytes raw, never base64).
    pub fn payload(&self) -> &[u8] {
        match self {
            Block::Text(text) => text.as_bytes(),
            Block::Image(image) => &image.bytes,
            Block::Audio(audio) => &audio.bytes,
            Block::Resource(resource) => match &resource.contents {
                ResourceContents::Text(text) => text.as_bytes(),
                ResourceContents::Blob(bytes) => bytes,
            },
            Block::Link(_) => &[],
        }
    }

    /// The block's payload, moved out of it (no copy): what [`Block::payload`] borrows.
    pub fn into_payload(self) -> Vec<u8> {
        match self {
            Block::Text(text) => text.into_bytes(),
            Block::Image(image) => image.bytes,
            Block::Audio(audio) => audio.bytes,
            Block::Resource(resource) => match resource.contents {
                ResourceContents::Text(text) => text.into_bytes(),
                ResourceContents::Blob(bytes) => bytes,
            },
            Block::Link(_) => Vec::new(),
        }
    }

    /// Everything of the block but its payload.
    pub fn head(&self) -> BlockHead {
        match self {
            Block::Text(_) => BlockHead::Text,
            Block::Image(image) => BlockHead::Image {
                mime_type: image.mime_type.clone(),
            },
            Block::Audio(audio) => BlockHead::Audio {
                mime_type: audio.mime_type.clone(),
            },
            Block::Resource(resource) => BlockHead::Resource {
                uri: resource.uri.clone(),
                mime_type: resource.mime_type.clone(),
                blob: matches!(resource.contents, ResourceContents::Blob(_)),
            },
            Block::Link(link) => BlockHead::Link(link.clone()),
        }
    }

    /// The block of `head` and `payload`, or why they do not make one: text that is not UTF-8, a
    /// link with a payload.
    pub fn from_parts(head: BlockHead, payload: Vec<u8>) -> Result<Block, String> {
        let text = |payload: Vec<u8>, what: &str| {
            String::from_utf8(payload)
                .map_err(|e| format!("{what} is not UTF-8: {}", e.utf8_error()))
        };
        Ok(match head {
            BlockHead::Text => Block::Text(text(payload, "a text block")?),
            BlockHead::Image { mime_type } => Block::Image(Image::new(mime_type, payload)),
            BlockHead::Audio { mime_type } => Block::Audio(Audio {
                mime_type,
                bytes: payload,
            }),
            BlockHead::Resource {
                uri,
                mime_type,
                blob,
            } => Block::Resource(Resource {
                uri,
                mime_type,
                contents: if blob {
                    ResourceContents::Blob(payload)
                } else {
                    ResourceContents::Text(text(payload, "an embedded resource's text")?)
                },
            }),
            BlockHead::Link(link) if payload.is_empty() => Block::Link(link),
            BlockHead::Link(link) => {
                return Err(format!(
                    "the link to `{}` carries {} bytes",
                    link.uri,
                    payload.len()
                ));
            }
        })
    }
}

/// A [`Block`] without its payload, as JSON: what crosses the plugin boundary and the worker
/// protocol beside the raw payload, so a new kind of block needs no new ABI type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockHead {
    /// Text (the payload, UTF-8).
    Text,
    /// An image (the payload, encoded).
    Image {
        /// e.g. `image/png`.
        mime_type: String,
    },
    /// Audio (the payload, encoded).
    Audio {
        /// e.g. `audio/wav`.
        mime_type: String,
    },
    /// An embedded resource (the payload: its text, or its bytes when `blob`).
    Resource {
        /// Its URI.
        uri: String,
        /// Its mime type.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Whether the payload is bytes rather than text.
        #[serde(default)]
        blob: bool,
    },
    /// A link (no payload).
    Link(ResourceLink),
}
