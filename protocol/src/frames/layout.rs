//! The blob layouts of the frames that carry them, each with its encoder beside its decoder:
//!
//! - an answer ([`encode_answer`] / [`decode_answer`]): of text and images, the text's bytes
//!   then each image's, as `text_len` and the image heads announce; of blocks, each block's
//!   payload in order, as the block heads announce; details and structured content stay JSON
//!   text in the message, parsed once by the host within the answer codec's bounds;
//! - a call's questions ([`encode_questions`] / [`decode_questions`]): each question's message
//!   then its schema's JSON text, question after question, as the heads announce.
//!
//! The worker encodes (its plugin's answer is checked already); the host decodes, and checks
//! everything again: the worker runs the plugin's code, so whatever a frame says may be forged,
//! and a frame that does not add up is the worker's crash (`CrashReason::Protocol`).

use rho_plugin_api::{Answer, Image, Output, Question};
use serde_json::Value;

use super::{BlockFrameHead, BlockHeads, FromWorker, ImageHead, ImageHeads, QuestionHead};
use crate::answer::{self, OutputKind};
use crate::outcome::{CrashReason, Failure};

/// The parts of an `Answer` frame that describe its blobs (its message but the call's id and
/// `spent`), as [`decode_answer`] takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerLayout {
    /// The answer's shape.
    pub kind: OutputKind,
    /// The length of the text blob (not of blocks).
    pub text_len: usize,
    /// The images' heads (not of blocks).
    pub images: ImageHeads,
    /// The blocks' heads (of blocks).
    pub blocks: BlockHeads,
    /// Details, JSON text.
    pub details: Option<String>,
    /// Structured content, JSON text.
    pub structured: Option<String>,
}

/// The `Answer` frame of call `id` for `output` with its structured content and details as the
/// plugin wrote them (JSON text), and its blobs, borrowed from `output`.
pub fn encode_answer(
    id: u64,
    output: &Output,
    structured: Option<String>,
    details: Option<String>,
    spent: bool,
) -> (FromWorker, Vec<&[u8]>) {
    let kind = OutputKind::of(output);
    // Of blocks, the text is in them.
    let text: &str = match output {
        Output::Text(text) | Output::Image { text, .. } | Output::Images { text, .. } => text,
        Output::Blocks(_) => "",
    };
    let images = match output {
        Output::Blocks(_) => Vec::new(),
        _ => output.images(),
    };
    let blocks = output.blocks();
    let block_heads = BlockHeads::new(
        blocks
            .iter()
            .map(|b| BlockFrameHead {
                head: b.head(),
                len: b.payload().len(),
            })
            .collect(),
    );
    let image_heads = ImageHeads::new(
        images
            .iter()
            .map(|i| ImageHead {
                mime_type: i.mime_type.clone(),
                len: i.bytes.len(),
            })
            .collect(),
    );
    let message = FromWorker::Answer {
        id,
        kind,
        text_len: text.len(),
        images: image_heads,
        blocks: block_heads,
        details,
        structured,
        spent,
    };
    let blobs = match kind {
        OutputKind::Blocks => blocks.iter().map(|b| b.payload()).collect(),
        _ => std::iter::once(text.as_bytes())
            .chain(images.iter().map(|i| i.bytes.as_slice()))
            .collect(),
    };
    (message, blobs)
}

/// The answer of `tool` an `Answer` frame carries: its layout and its blobs (the bytes after its
/// JSON), checked against each other and against the answer codec's limits.
pub fn decode_answer(
    tool: &str,
    layout: AnswerLayout,
    mut blobs: Vec<u8>,
) -> Result<Answer, Failure> {
    let AnswerLayout {
        kind,
        text_len,
        images,
        blocks,
        details,
        structured,
    } = layout;
    if kind == OutputKind::Blocks {
        return decode_blocks(tool, blocks, blobs, details, structured);
    }
    // The heads' lengths were summed as they were read (none past the limit was kept).
    let announced = images.total_len().and_then(|len| len.checked_add(text_len));
    if announced != Some(blobs.len()) {
        return Err(Failure::Crash(CrashReason::Protocol(format!(
            "an answer announcing {text_len} text bytes and {} image bytes carried {}",
            images
                .total_len()
                .map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string()),
            blobs.len()
        ))));
    }
    if images.count() > answer::MAX_IMAGES {
        return Err(answer::too_many_images(tool, images.count()));
    }
    let heads = images.heads();
    // The common shapes keep the buffer the frame was read into: text alone is the whole of it,
    // and so is a lone image after empty text. Others copy each part out once.
    let (text, images) = match heads {
        [] => (blobs, Vec::new()),
        [head] if text_len == 0 => (Vec::new(), vec![Image::new(head.mime_type.clone(), blobs)]),
        _ => {
            let mut at = text_len;
            let images = heads
                .iter()
                .map(|head| {
                    let image = Image::new(head.mime_type.clone(), &blobs[at..at + head.len]);
                    at += head.len;
                    image
                })
                .collect();
            blobs.truncate(text_len);
            (blobs, images)
        }
    };
    let text = String::from_utf8(text).map_err(|e| {
        Failure::Crash(CrashReason::Protocol(format!(
            "invalid UTF-8 in the answer's text: {}",
            e.utf8_error()
        )))
    })?;
    Ok(Answer {
        output: answer::output(tool, kind, text, images)?,
        structured: json_of(tool, "structured content", structured)?,
        details: decode_details(tool, details)?,
    })
}

/// An answer of blocks: each head's payload cut from `blobs` in order.
fn decode_blocks(
    tool: &str,
    blocks: BlockHeads,
    mut blobs: Vec<u8>,
    details: Option<String>,
    structured: Option<String>,
) -> Result<Answer, Failure> {
    if blocks.total_len() != Some(blobs.len()) {
        return Err(Failure::Crash(CrashReason::Protocol(format!(
            "an answer announcing {} block bytes carried {}",
            blocks
                .total_len()
                .map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string()),
            blobs.len()
        ))));
    }
    let count = blocks.count();
    if count > answer::MAX_BLOCKS {
        return Err(answer::too_many_blocks(tool, count));
    }
    // Cut from the end, so each payload is moved out once.
    let mut parts: Vec<_> = blocks
        .into_heads()
        .into_iter()
        .rev()
        .map(|frame| {
            let payload = blobs.split_off(blobs.len() - frame.len);
            (frame.head, payload)
        })
        .collect();
    parts.reverse();
    let output = answer::blocks(tool, count, parts).map_err(as_protocol)?;
    Ok(Answer {
        output,
        structured: json_of(tool, "structured content", structured)?,
        details: decode_details(tool, details)?,
    })
}

/// The details of an `Answer` or `Failure` frame of `tool` (JSON text) as a value, within the
/// answer codec's bounds.
pub fn decode_details(tool: &str, details: Option<String>) -> Result<Option<Value>, Failure> {
    json_of(tool, "details", details)
}

/// A worker's JSON text (`what` of `tool`: details, structured content) as a value, through the
/// answer codec's one reader of such parts.
fn json_of(tool: &str, what: &str, json: Option<String>) -> Result<Option<Value>, Failure> {
    json.map(|json| answer::json_part(tool, what, &json))
        .transpose()
        .map_err(as_protocol)
}

/// The worker checked the plugin's text before sending it: text the host cannot read was forged
/// on the channel.
fn as_protocol(failure: Failure) -> Failure {
    match failure {
        Failure::Crash(CrashReason::Formatted(text)) => Failure::Crash(CrashReason::Protocol(text)),
        other => other,
    }
}

/// The `Ask` frame of call `id` for `questions`, and its blob: each question's message then
/// its schema's JSON text.
pub fn encode_questions(id: u64, questions: &[Question]) -> (FromWorker, Vec<u8>) {
    let mut blob = Vec::new();
    let heads = questions
        .iter()
        .map(|q| {
            let schema = crate::details::sorted_json(&q.schema);
            blob.extend_from_slice(q.message.as_bytes());
            blob.extend_from_slice(schema.as_bytes());
            QuestionHead {
                key: q.key.clone(),
                message_len: q.message.len(),
                schema_len: schema.len(),
            }
        })
        .collect();
    (
        FromWorker::Ask {
            id,
            questions: heads,
        },
        blob,
    )
}

/// The questions of an `Ask` frame, from their heads and the frame's blobs: what the worker
/// checked, checked again (at least one and at most `MAX_QUESTIONS_AT_ONCE` questions, within
/// `MAX_QUESTION_BYTES`, UTF-8 messages, JSON schemas, valid and unique keys). `Err`: why they
/// are not (a forged frame).
pub fn decode_questions(heads: &[QuestionHead], blobs: Vec<u8>) -> Result<Vec<Question>, String> {
    let announced = heads.iter().try_fold(0usize, |sum, head| {
        sum.checked_add(head.message_len)?
            .checked_add(head.schema_len)
    });
    if heads.is_empty()
        || heads.len() > answer::MAX_QUESTIONS_AT_ONCE
        || announced.is_none_or(|n| n > answer::MAX_QUESTION_BYTES)
        || announced != Some(blobs.len())
    {
        return Err(format!(
            "{} questions announcing {announced:?} bytes carried {}",
            heads.len(),
            blobs.len()
        ));
    }
    let mut keys = std::collections::HashSet::new();
    let mut at = 0;
    let mut questions = Vec::with_capacity(heads.len());
    for head in heads {
        let mut text = |len: usize, what: &str| {
            let part = std::str::from_utf8(&blobs[at..at + len])
                .map_err(|_| format!("a question's {what} not UTF-8"));
            at += len;
            part
        };
        let message = text(head.message_len, "message")?.to_owned();
        let schema = crate::details::parse(text(head.schema_len, "schema")?)
            .map_err(|e| format!("a question's schema {e}"))?;
        let question = Question::new(message, schema);
        questions.push(match &head.key {
            Some(key) if !rho_plugin_api::is_valid_key(key) || !keys.insert(key.clone()) => {
                return Err(format!("a question's key `{key}` is not one or not unique"));
            }
            Some(key) => question.with_key(key.clone()),
            None => question,
        });
    }
    Ok(questions)
}
