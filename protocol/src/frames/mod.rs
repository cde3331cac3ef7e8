//! The host <-> worker protocol: length-prefixed frames on a private socket (the worker's fd 3),
//! JSON for the small parts and raw bytes for image payloads (no base64).
//!
//! The worker has two sockets: [`CHANNEL_FD`] for calls, updates and answers, [`CANCEL_FD`] for
//! cancellations; the channel first brings it its other descriptors ([`HANDED_OVER`]).
//!
//! A frame is `u32 LE body length`, then the body: `u32 LE JSON length`, the JSON message, and the
//! raw blobs the message announces, back to back. Messages are externally tagged
//! (`{"answer": {...}}`): decoding one reads it once, where an internal tag would first buffer
//! the whole message to find its kind. Host and worker are one build (`rho-worker` ships with the
//! host); the protocol is theirs alone. The blobs' layouts, each with its encoder beside its
//! decoder, are in `layout` ([`encode_answer`] / [`decode_answer`], [`encode_questions`] /
//! [`decode_questions`]); `protocol/snapshots/` freezes every frame's bytes.

mod layout;

pub use layout::{
    AnswerLayout, decode_answer, decode_details, decode_questions, encode_answer, encode_questions,
};

use std::io::{IoSlice, Read, Write};

use serde::{Deserialize, Serialize};

use crate::answer::{FailureKind, OutputKind};
use crate::grants::{GrantPath, Grants};
use crate::sandbox::{SandboxReport, WorkerLimits};
use crate::spec::ToolSpec;

/// The fd the worker keeps its channel on (its stdin at `exec`, moved here first thing): calls go
/// in, updates and answers come out.
pub const CHANNEL_FD: i32 = 3;

/// The fd the worker finds its cancel channel on: `Cancel` messages only, read by a thread of
/// their own, so the worker's main thread can run each call itself (no hand-off per call).
pub const CANCEL_FD: i32 = 4;

/// The fd the worker finds the plugin on: a sealed memfd holding the library's bytes (no path
/// that anyone could swap or write; gone with the last process holding it).
pub const PLUGIN_FD: i32 = 5;

/// The fd the sandboxed worker reports on once its plugin process has ended: that process's wait
/// status, 4 bytes (native order), written before the worker tears its namespaces down and ends
/// itself, so the host knows how a call's process ended without waiting for that. Only the
/// worker holds it: the namespace's init closes it first thing, before it forks the plugin
/// process. An unsandboxed worker closes it at once (it is the plugin process).
pub const STATUS_FD: i32 = 6;

/// The descriptors the host hands a worker on its channel, in this order: one byte carrying
/// them (`SCM_RIGHTS`), before any frame. The channel itself is the worker's stdin, which it
/// moves to [`CHANNEL_FD`]; it places these on the numbers listed, and the granted paths after
/// them (see [`GRANT_FDS`]).
pub const HANDED_OVER: [i32; 3] = [CANCEL_FD, PLUGIN_FD, STATUS_FD];

/// In a worker started to run a program ([`ToWorker::Exec`]), the fd handed over in
/// [`CANCEL_FD`]'s place: the reading end of the program's stdin.
pub const EXEC_STDIN_FD: i32 = CANCEL_FD;

/// In a worker started to run a program ([`ToWorker::Exec`]), the fd handed over in
/// [`PLUGIN_FD`]'s place: the writing end of the program's stdout.
pub const EXEC_STDOUT_FD: i32 = PLUGIN_FD;

/// The first of the descriptors of the granted paths (`O_PATH`, one per
/// [`SandboxSpec::grant_paths`] entry, in its order), handed over after [`HANDED_OVER`]: the
/// sandbox's Landlock rules and mounts use them, never the paths, and every process of the
/// sandbox closes them before the plugin's code runs.
pub const GRANT_FDS: i32 = 7;

/// The room (in 8-byte words) for the control message that hands the descriptors over: the
/// [`HANDED_OVER`] ones and [`MAX_GRANTS`](crate::grants::MAX_GRANTS) grants.
pub const HANDED_CONTROL_WORDS: usize =
    (16 + 4 * (HANDED_OVER.len() + crate::grants::MAX_GRANTS)).div_ceil(8);

/// The line the sandboxed worker writes on stderr before it reports the status on
/// [`STATUS_FD`]: everything the plugin process wrote on stderr comes before it, so its last
/// words are in once the host has read this line.
pub const STDERR_END_MARK: &str = "rho-worker: the plugin process has ended";

/// The default largest frame a host accepts from a worker: 64 MiB.
pub const DEFAULT_MAX_FRAME: usize = 64 << 20;

/// What the host sends a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToWorker {
    /// The first frame a worker reads: how to confine itself before it loads the plugin.
    Start {
        /// The host's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION).
        protocol: u32,
        /// The sandbox to enter.
        sandbox: SandboxSpec,
    },
    /// The first frame of a worker started to run a program instead of loading a plugin (an MCP
    /// server): it enters and confines itself as for a plugin, says `Confined`, then replaces
    /// itself with the program, its stdin and stdout the descriptors handed over as
    /// [`EXEC_STDIN_FD`] and [`EXEC_STDOUT_FD`], its stderr the worker's. The channel closes at
    /// the `exec`; a program that cannot be run is reported with `LoadFailed`. The program's
    /// wait status is reported on [`STATUS_FD`] as a plugin process's is.
    Exec {
        /// The host's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION).
        protocol: u32,
        /// The sandbox to enter (child processes must be granted for the `exec`).
        sandbox: SandboxSpec,
        /// The program: a path, or a name looked up on the `PATH` of the worker's environment.
        program: String,
        /// Its arguments (without the program's name).
        args: Vec<String>,
        /// The directory it starts in (it must be readable in the sandbox).
        cwd: std::path::PathBuf,
    },
    /// Run one call. The arguments (JSON text) follow as the frame's blob, raw: a large argument
    /// is not escaped into a JSON string and parsed twice.
    Call {
        /// The host's number for the call.
        id: u64,
        /// The tool.
        tool: String,
        /// The model's call id.
        call_id: String,
        /// Milliseconds until the host ends the call, as of sending.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time_left_ms: Option<u64>,
        /// The call's W3C `traceparent`, checked by the host.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
    /// The replies to a call's questions (`FromWorker::Ask`), one per question in their order,
    /// and the call's time left once they came (the wait moved the deadline).
    Answered {
        /// The host's number for the call.
        id: u64,
        /// The replies.
        replies: Vec<rho_plugin_api::Reply>,
        /// Milliseconds until the host ends the call, as of sending.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time_left_ms: Option<u64>,
    },
    /// Give up on a call: the worker sets the tool's cancellation flag.
    Cancel {
        /// The host's number for the call.
        id: u64,
    },
}

/// An image's head in an answer; its bytes follow the JSON as a blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageHead {
    /// e.g. `image/png`.
    pub mime_type: String,
    /// Its length in bytes.
    pub len: usize,
}

/// A block's head in an answer of blocks; its payload follows the JSON as a blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockFrameHead {
    /// The block without its payload.
    pub head: rho_plugin_api::BlockHead,
    /// The payload's length in bytes.
    pub len: usize,
}

/// A head announcing a blob of `len` bytes, at most [`Announce::LIMIT`] of them kept per answer.
pub trait Announce: Sized {
    /// The most heads one answer keeps.
    const LIMIT: usize;
    /// What a list of them is, for errors ("a list of image heads").
    const WHAT: &'static str;
    /// The length of its blob.
    fn blob_len(&self) -> usize;
}

impl Announce for ImageHead {
    const LIMIT: usize = crate::answer::MAX_IMAGES;
    const WHAT: &'static str = "a list of image heads";
    fn blob_len(&self) -> usize {
        self.len
    }
}

impl Announce for BlockFrameHead {
    const LIMIT: usize = crate::answer::MAX_BLOCKS;
    const WHAT: &'static str = "a list of block heads";
    fn blob_len(&self) -> usize {
        self.len
    }
}

/// An answer's heads as a worker announced them. Read from a frame, at most [`Announce::LIMIT`]
/// heads are kept; the rest are counted and their lengths summed as they are read, never
/// stored, so an answer announcing 300,000 images costs the host the frame's bytes and no more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announced<H> {
    heads: Vec<H>,
    count: usize,
    total_len: Option<usize>,
}

/// An answer's image heads.
pub type ImageHeads = Announced<ImageHead>;

/// An answer's block heads.
pub type BlockHeads = Announced<BlockFrameHead>;

impl<H> Default for Announced<H> {
    fn default() -> Self {
        Announced {
            heads: Vec::new(),
            count: 0,
            total_len: Some(0),
        }
    }
}

impl<H: Announce> Announced<H> {
    /// The heads of an answer's blobs, in order.
    pub fn new(heads: Vec<H>) -> Self {
        let total_len = heads
            .iter()
            .try_fold(0usize, |sum, h| sum.checked_add(h.blob_len()));
        Announced {
            count: heads.len(),
            heads,
            total_len,
        }
    }

    /// How many were announced.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether none were.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The heads kept (all of them, unless more than the limit were announced).
    pub fn heads(&self) -> &[H] {
        &self.heads
    }

    /// The heads kept, owned.
    pub fn into_heads(self) -> Vec<H> {
        self.heads
    }

    /// The announced blobs' lengths summed; `None` when the sum overflows.
    pub fn total_len(&self) -> Option<usize> {
        self.total_len
    }
}

impl<H: Serialize> Serialize for Announced<H> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.heads.serialize(serializer)
    }
}

impl<'de, H: Announce + Deserialize<'de>> Deserialize<'de> for Announced<H> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Heads<H>(std::marker::PhantomData<H>);
        impl<'de, H: Announce + Deserialize<'de>> serde::de::Visitor<'de> for Heads<H> {
            type Value = Announced<H>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(H::WHAT)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Announced<H>, A::Error> {
                let mut heads = Announced::default();
                while let Some(head) = seq.next_element::<H>()? {
                    heads.count += 1;
                    heads.total_len = heads
                        .total_len
                        .and_then(|sum| sum.checked_add(head.blob_len()));
                    if heads.heads.len() < H::LIMIT {
                        heads.heads.push(head);
                    }
                }
                Ok(heads)
            }
        }
        deserializer.deserialize_seq(Heads(std::marker::PhantomData))
    }
}

/// What a worker sends the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FromWorker {
    /// The worker is confined: what of the sandbox is in force. Sent before the plugin is loaded,
    /// so the plugin's own code cannot forge it.
    Confined {
        /// The worker's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION) (0: a worker from before
        /// the versions were said).
        #[serde(default)]
        protocol: u32,
        /// What of the sandbox is in force.
        sandbox: SandboxReport,
    },
    /// The plugin loaded: its identity and tools (the plugin's word: the host checks them).
    Ready {
        /// Plugin name.
        name: String,
        /// Plugin version.
        version: String,
        /// Interface version it was built against.
        interface_version: u32,
        /// Its tools.
        tools: Vec<ToolSpec>,
        /// One line per tool refused.
        rejected: Vec<String>,
        /// What it says it needs.
        #[serde(default)]
        capabilities: rho_plugin_api::Capabilities,
    },
    /// The plugin did not load: the one-line error.
    LoadFailed {
        /// What went wrong.
        error: String,
    },
    /// A partial update of a running call.
    Update {
        /// The host's number for the call.
        id: u64,
        /// The update.
        partial: String,
    },
    /// A log line of a running call (interface 3).
    Log {
        /// The host's number for the call.
        id: u64,
        /// Its level.
        level: rho_plugin_api::LogLevel,
        /// The line.
        line: String,
    },
    /// Questions of a running call, asked together (interface 3; several at once and keys:
    /// interface 4): the tool's thread waits for `ToWorker::Answered`. Each question's message
    /// then its schema's JSON text follow as blobs, question after question.
    Ask {
        /// The host's number for the call.
        id: u64,
        /// The questions' heads, in order.
        questions: Vec<QuestionHead>,
    },
    /// A call's answer; the text (UTF-8, `text_len` bytes) then the image bytes follow as blobs,
    /// in order; of an answer of blocks (`kind` `blocks`), the blocks' payloads.
    Answer {
        /// The host's number for the call.
        id: u64,
        /// The answer's shape.
        kind: OutputKind,
        /// The length of the text blob.
        text_len: usize,
        /// The images' heads.
        images: ImageHeads,
        /// The blocks' heads (kind `blocks`).
        #[serde(default, skip_serializing_if = "Announced::is_empty")]
        blocks: BlockHeads,
        /// Details, JSON text.
        details: Option<String>,
        /// Structured content, JSON text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        structured: Option<String>,
        /// The call left the worker damaged (its descriptors exhausted): the host stops it
        /// rather than giving it another call.
        #[serde(default, skip_serializing_if = "is_false")]
        spent: bool,
    },
    /// A call's failure.
    Failure {
        /// The host's number for the call.
        id: u64,
        /// Why there is no answer.
        kind: FailureKind,
        /// The message.
        message: String,
        /// Details, JSON text.
        details: Option<String>,
        /// As in `Answer`.
        #[serde(default, skip_serializing_if = "is_false")]
        spent: bool,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// How a worker confines itself; the host resolves it from its worker options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// `false`: no sandbox, only the limits (for measurements).
    pub enabled: bool,
    /// What the plugin may do beyond the defaults.
    pub grants: Grants,
    /// Resource limits, applied after the worker's own setup.
    pub limits: WorkerLimits,
    /// The user and group ids to run as, when the worker starts as root.
    pub identity: Option<(u32, u32)>,
    /// The host's pid: a worker whose parent is no longer the host exits.
    pub host_pid: i32,
    /// Bytes of the private tmpfs mounted at `/tmp` in the sandbox (the plugin's scratch).
    pub scratch_bytes: u64,
    /// The granted paths as the host resolved them, in the order of their descriptors from
    /// [`GRANT_FDS`] on.
    #[serde(default)]
    pub grant_paths: Vec<GrantPath>,
}

/// Why a frame could not be read. Displayed as one line saying what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The channel was closed (the peer is gone).
    #[error("the channel closed")]
    Closed,
    /// The channel failed.
    #[error("reading the channel failed: {0}")]
    Io(#[from] std::io::Error),
    /// A frame announced more than the limit.
    #[error("a frame of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The announced size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The frame's parts do not add up.
    #[error("a malformed frame: {0}")]
    Malformed(String),
    /// The JSON part is not UTF-8.
    #[error("invalid UTF-8 in a frame's text: {0}")]
    Utf8(std::str::Utf8Error),
    /// The JSON part does not parse as a message.
    #[error("malformed JSON in a frame: {0}")]
    Json(serde_json::Error),
}

/// One frame: a message and its blobs' bytes (back to back).
#[derive(Debug)]
pub struct Frame<M> {
    /// The message.
    pub message: M,
    /// The bytes after the JSON.
    pub blobs: Vec<u8>,
}

/// A frame's head: its length prefix, the JSON part's length and the JSON part, for a frame whose
/// blobs add up to `blob_len` bytes. The blobs follow it on the wire as they lie (a frame is
/// written as one vectored write of its head and blobs: no copy of a payload).
pub fn encode_head<M: Serialize>(message: &M, blob_len: usize) -> Vec<u8> {
    // Serializing these enums of strings and numbers cannot fail.
    let json = serde_json::to_vec(message).unwrap_or_default();
    let body = 4 + json.len() + blob_len;
    let mut out = Vec::with_capacity(8 + json.len());
    out.extend_from_slice(&(body as u32).to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

/// Encodes `message` and `blobs` into one frame, in one buffer.
pub fn encode<M: Serialize>(message: &M, blobs: &[&[u8]]) -> Vec<u8> {
    let blob_len: usize = blobs.iter().map(|b| b.len()).sum();
    let mut out = encode_head(message, blob_len);
    out.reserve_exact(blob_len);
    for blob in blobs {
        out.extend_from_slice(blob);
    }
    out
}

/// Room reserved up front for a frame's blobs: what it announces, up to 4 MiB (a frame that
/// announces more grows its buffer as its bytes arrive, so a lying length costs no memory).
fn blob_room(len: usize) -> usize {
    len.min(4 << 20)
}

/// The first bytes of a body are read at once, up to this many: a small frame takes one read
/// after its length, a large one copies no more than this of its blobs.
pub const BODY_PREFIX: usize = 8 << 10;

/// A read error as a frame error: an end of input before a whole frame is [`FrameError::Closed`].
pub fn closed_at_eof(e: std::io::Error) -> FrameError {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FrameError::Closed,
        _ => FrameError::Io(e),
    }
}

/// A body being read: its JSON part (after the 4-byte length) in `json`, up to `json_end` bytes
/// of which those in `json` have arrived; the blob bytes read so far in `blobs`. Neither buffer
/// is grown past the bytes that arrived (but for the worker's own reads of its host's frames,
/// see [`read_frame`]): a peer that announces a large part and stalls costs its buffer's room,
/// not the announced length.
pub struct Body {
    json: Vec<u8>,
    json_end: usize,
    blobs: Vec<u8>,
    blob_len: usize,
}

impl Body {
    /// Splits the first bytes of a body of `size` bytes (at least 4) into its parts.
    pub fn of(mut prefix: Vec<u8>, size: usize) -> Result<Body, FrameError> {
        let json_len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        if json_len > size - 4 {
            return Err(FrameError::Malformed(format!(
                "a JSON part of {json_len} bytes in a body of {size}"
            )));
        }
        let json_end = 4 + json_len;
        let blob_len = size - json_end;
        let json_read = json_end.min(prefix.len());
        let mut blobs = Vec::with_capacity(blob_room(blob_len));
        blobs.extend_from_slice(&prefix[json_read..]);
        prefix.truncate(json_read);
        Ok(Body {
            json: prefix,
            json_end,
            blobs,
            blob_len,
        })
    }

    /// JSON bytes still to read.
    pub fn json_missing(&self) -> usize {
        self.json_end - self.json.len()
    }

    /// Blob bytes still to read.
    pub fn blobs_missing(&self) -> usize {
        self.blob_len - self.blobs.len()
    }

    /// The parts still being filled: the JSON part and the blobs (append what arrives).
    pub fn parts_mut(&mut self) -> (&mut Vec<u8>, &mut Vec<u8>) {
        (&mut self.json, &mut self.blobs)
    }

    /// The frame, once every byte has arrived (`Closed` otherwise).
    pub fn frame<M: for<'de> Deserialize<'de>>(self) -> Result<Frame<M>, FrameError> {
        if self.json_missing() > 0 || self.blobs_missing() > 0 {
            return Err(FrameError::Closed);
        }
        let text = std::str::from_utf8(&self.json[4..]).map_err(FrameError::Utf8)?;
        Ok(Frame {
            message: serde_json::from_str(text).map_err(FrameError::Json)?,
            blobs: self.blobs,
        })
    }
}

/// The body length a frame's header announces: at most `limit`, and room for the body's own
/// 4-byte JSON length.
pub fn body_len(header: [u8; 4], limit: usize) -> Result<usize, FrameError> {
    let size = u32::from_le_bytes(header) as usize;
    if size > limit {
        return Err(FrameError::TooLarge { size, limit });
    }
    if size < 4 {
        return Err(FrameError::Malformed(format!("a body of {size} bytes")));
    }
    Ok(size)
}

/// Reads one frame (blocking). The blobs are read straight into their own buffer: past the first
/// [`BODY_PREFIX`] bytes, no copy.
pub fn read_frame<M: for<'de> Deserialize<'de>>(
    reader: &mut impl Read,
    limit: usize,
) -> Result<Frame<M>, FrameError> {
    let mut header = [0u8; 4];
    match reader.read_exact(&mut header) {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        other => other?,
    }
    let size = body_len(header, limit)?;
    let mut prefix = vec![0u8; size.min(BODY_PREFIX)];
    reader.read_exact(&mut prefix).map_err(closed_at_eof)?;
    let mut body = Body::of(prefix, size)?;
    let missing = body.json_missing() as u64;
    reader.take(missing).read_to_end(&mut body.json)?;
    // The rest of the blobs in reads as large as what is missing (up to 4 MiB at a time, so a
    // lying length costs no memory): one system call when it has all arrived.
    while body.blobs_missing() > 0 {
        let start = body.blobs.len();
        body.blobs
            .resize(start + body.blobs_missing().min(4 << 20), 0);
        reader
            .read_exact(&mut body.blobs[start..])
            .map_err(closed_at_eof)?;
    }
    body.frame()
}

/// Writes one frame (blocking): its head and blobs in one vectored write (more only when the
/// socket's buffer cannot take it all at once), the blobs from where they lie.
pub fn write_frame<M: Serialize>(
    writer: &mut impl Write,
    message: &M,
    blobs: &[&[u8]],
) -> std::io::Result<()> {
    let blob_len: usize = blobs.iter().map(|b| b.len()).sum();
    let head = encode_head(message, blob_len);
    let mut slices: Vec<IoSlice<'_>> = std::iter::once(&head[..])
        .chain(blobs.iter().copied())
        .filter(|part| !part.is_empty())
        .map(IoSlice::new)
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        match writer.write_vectored(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    writer.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_blobs_and_limits() {
        let msg = FromWorker::Answer {
            id: 7,
            kind: OutputKind::Images,
            text_len: 0,
            images: ImageHeads::new(vec![
                ImageHead {
                    mime_type: "image/png".into(),
                    len: 3,
                },
                ImageHead {
                    mime_type: "image/png".into(),
                    len: 2,
                },
            ]),
            blocks: BlockHeads::default(),
            details: None,
            structured: Some("{}".into()),
            spent: false,
        };
        let bytes = encode(&msg, &[b"abc", b"de"]);
        let frame: Frame<FromWorker> = read_frame(&mut &bytes[..], 1024).unwrap();
        assert_eq!(frame.message, msg);
        assert_eq!(frame.blobs, b"abcde");
        assert!(matches!(
            read_frame::<FromWorker>(&mut &bytes[..], 10),
            Err(FrameError::TooLarge { limit: 10, .. })
        ));
        assert!(matches!(
            read_frame::<FromWorker>(&mut &bytes[..3], 1024),
            Err(FrameError::Closed)
        ));
    }

    #[test]
    fn bad_text_and_json_are_named() {
        let mut bytes = Vec::new();
        let body = [&2u32.to_le_bytes()[..], &[0xff, 0xfe]].concat();
        bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&body);
        let err = read_frame::<FromWorker>(&mut &bytes[..], 1024).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid UTF-8 in a frame's text"),
            "{err}"
        );
        let bytes = encode(&serde_json::json!({"t": "nonsense"}), &[]);
        let err = read_frame::<FromWorker>(&mut &bytes[..], 1024).unwrap_err();
        assert!(
            err.to_string().starts_with("malformed JSON in a frame"),
            "{err}"
        );
    }

    /// A writer that takes at most 1000 bytes a call, as a full socket buffer would.
    struct Trickle(Vec<u8>);

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = buf.len().min(1000);
            self.0.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Frames whose JSON or blobs run past the first read, written in parts by a writer that
    /// takes a little at a time, read back whole both ways; a frame cut anywhere is `Closed`.
    #[test]
    fn large_parts_round_trip_and_a_cut_frame_is_closed() {
        let msg = FromWorker::Failure {
            id: 1,
            kind: FailureKind::Error,
            message: "m".repeat(3 * BODY_PREFIX),
            details: None,
            spent: false,
        };
        let big: Vec<u8> = (0..200_000).map(|i| i as u8).collect();
        for blobs in [
            &[][..],
            &[&b"xy"[..]][..],
            &[&big[..], &b""[..], &b"tail"[..]][..],
        ] {
            let mut written = Trickle(Vec::new());
            write_frame(&mut written, &msg, blobs).unwrap();
            let bytes = written.0;
            assert_eq!(bytes, encode(&msg, blobs));
            let whole: Vec<u8> = blobs.concat();
            let frame: Frame<FromWorker> = read_frame(&mut &bytes[..], 1 << 30).unwrap();
            assert_eq!((&frame.message, &frame.blobs), (&msg, &whole));
            for cut in [5, BODY_PREFIX, bytes.len() - 1] {
                assert!(matches!(
                    read_frame::<FromWorker>(&mut &bytes[..cut], 1 << 30),
                    Err(FrameError::Closed)
                ));
            }
        }
    }
}

/// One question of a [`FromWorker::Ask`]: its key and the lengths of its blobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionHead {
    /// The name it goes by, if the tool chose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The length of its message blob.
    pub message_len: usize,
    /// The length of its schema blob.
    pub schema_len: usize,
}
