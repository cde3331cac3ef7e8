//! The one answer codec: how an answer's shape and a failure's kind are named (typed, never
//! strings), and the one place an [`Output`] is assembled from its parts and a [`Failure`] from its
//! kind, whether the parts came through the FFI (in process) or the worker protocol (isolated).

use rho_plugin_api::ffi::{FfiFailureKind, FfiOutputKind};
use rho_plugin_api::{Image, Output, ToolError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::call::invoke::Failure;
use crate::call::outcome::CrashReason;

/// An answer's shape: text only, exactly one image, or any number of images (each with text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OutputKind {
    Text,
    Image,
    Images,
}

impl OutputKind {
    /// The shape of `output`.
    pub fn of(output: &Output) -> Self {
        match output {
            Output::Text(_) => OutputKind::Text,
            Output::Image { .. } => OutputKind::Image,
            Output::Images { .. } => OutputKind::Images,
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
pub(crate) enum FailureKind {
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
            Failure::Crash(reason) => {
                (FailureKind::Panic, crate::call::outcome::crash_text(reason))
            }
            Failure::InvalidArguments(m) => (FailureKind::InvalidArguments, m.clone()),
            // Never from a worker's plugin (only remote tools are unavailable): the nearest kind.
            Failure::UnknownTool(m) | Failure::Unavailable(m) => {
                (FailureKind::UnknownTool, m.clone())
            }
        }
    }
}

/// The output of shape `kind` from its text and images; a shape that does not match the number
/// of images (`Text` with images, `Image` without exactly one) is the plugin's broken contract.
pub(crate) fn output(
    kind: OutputKind,
    text: String,
    mut images: Vec<Image>,
) -> Result<Output, Failure> {
    match (kind, images.len()) {
        (OutputKind::Text, 0) => Ok(Output::Text(text)),
        (OutputKind::Image, 1) => match images.pop() {
            Some(image) => Ok(Output::Image { image, text }),
            None => Ok(Output::Text(text)),
        },
        (OutputKind::Images, _) => Ok(Output::Images { images, text }),
        (kind, n) => Err(Failure::Crash(CrashReason::Protocol(format!(
            "an answer of kind `{kind:?}` with {n} image(s)"
        )))),
    }
}

/// The failure of `kind` with `message`; `details` (already decoded) belong to errors only.
pub(crate) fn failure(
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
