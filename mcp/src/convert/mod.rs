//! rho's words and MCP's, both directions, in one place: a tool ([`mcp_tool`] / [`tool_spec`]),
//! a content block ([`content`] / [`block`]), a call's result ([`mcp_result`] / [`answer`]) and a
//! log level ([`logs`]). No I/O: the server sends what these make, the source reads what they
//! read, and a round trip through both gives back what went in (tests below).
//!
//! ```
//! use rho_mcp::convert::{block, content};
//! use rho_runtime::Block;
//! let text = Block::Text("remember the milk".into());
//! assert_eq!(block("files", content(&text)).ok(), Some(text));
//! ```

pub mod logs;
mod result;
mod tool;

pub use result::{answer, mcp_result};
pub use tool::{mcp_tool, tool_spec};

use base64::Engine;
use rho_runtime::{Block, Failure, Image, ResourceContents as Contents};
use rmcp::model::{ContentBlock, ResourceContents};

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An image as MCP's image content (its bytes base64).
pub fn image_content(image: &Image) -> ContentBlock {
    ContentBlock::image(base64(&image.bytes), image.mime_type.clone())
}

/// A block as MCP's content: text as text, images and audio base64, an embedded resource as one
/// (text, or its blob base64), a link as a resource link.
pub fn content(block: &Block) -> ContentBlock {
    match block {
        Block::Text(text) => ContentBlock::text(text.clone()),
        Block::Image(image) => image_content(image),
        Block::Audio(audio) => ContentBlock::audio(base64(&audio.bytes), audio.mime_type.clone()),
        Block::Resource(r) => ContentBlock::resource(match &r.contents {
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
        }),
        Block::Link(link) => {
            let mut resource = rmcp::model::Resource::new(link.uri.clone(), link.name.clone());
            resource.title = link.title.clone();
            resource.description = link.description.clone();
            resource.mime_type = link.mime_type.clone();
            resource.size = link.size;
            ContentBlock::resource_link(resource)
        }
    }
}

/// MCP's content from server `server` as a block. Base64 that does not decode, and content rho
/// has no block for, are the server's broken contract: `crashed`, naming the server.
pub fn block(server: &str, content: ContentBlock) -> Result<Block, Failure> {
    let bytes = |what: &str, data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| {
                Failure::crashed(format!(
                    "mcp server `{server}` answered with {what} that is not base64: {e}"
                ))
            })
    };
    Ok(match content {
        ContentBlock::Text(text) => Block::Text(text.text),
        ContentBlock::Image(image) => {
            Block::Image(Image::new(image.mime_type, bytes("an image", &image.data)?))
        }
        ContentBlock::Audio(audio) => Block::audio(audio.mime_type, bytes("audio", &audio.data)?),
        ContentBlock::Resource(embedded) => match embedded.resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => Block::Resource(rho_runtime::Resource {
                uri,
                mime_type,
                contents: Contents::Text(text),
            }),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => Block::Resource(rho_runtime::Resource {
                uri,
                mime_type,
                contents: Contents::Blob(bytes("a blob", &blob)?),
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of block comes back as it went.
    #[test]
    fn blocks_round_trip() {
        let mut link = rho_runtime::ResourceLink::new("file:///a.txt", "a.txt");
        link.title = Some("A".into());
        link.description = Some("the letter".into());
        link.mime_type = Some("text/plain".into());
        link.size = Some(3);
        let blocks = [
            Block::Text("hi ✓".into()),
            Block::Image(Image::new("image/png", vec![0, 1, 2, 255])),
            Block::audio("audio/wav", vec![9; 10]),
            Block::Resource(rho_runtime::Resource {
                uri: "file:///t".into(),
                mime_type: Some("text/plain".into()),
                contents: Contents::Text("text".into()),
            }),
            Block::Resource(rho_runtime::Resource {
                uri: "file:///b".into(),
                mime_type: None,
                contents: Contents::Blob(vec![0, 0, 7]),
            }),
            Block::Link(link),
        ];
        for original in blocks {
            assert_eq!(block("s", content(&original)).ok(), Some(original));
        }
    }

    #[test]
    fn broken_base64_is_the_servers_crash_naming_it() {
        let broken = ContentBlock::image("%%%", "image/png");
        let Err(failure) = block("files", broken) else {
            panic!("accepted");
        };
        assert!(
            format!("{failure:?}").contains("mcp server `files`"),
            "{failure:?}"
        );
    }
}
