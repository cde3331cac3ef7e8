//! The wire of tools served over NATS: subjects and message types, in one place, with no I/O.
//!
//! | subject | who publishes | what |
//! |---|---|---|
//! | `rho-rpc.announce.<node>` | node `<node>`, every [`ANNOUNCE_EVERY`] and at once when its tools change | [`Announce`]: its tools (a node silent for [`NODE_GONE_AFTER`] is gone); a host takes it only when the payload names the node of the subject |
//! | `rho-rpc.hello` | a host that starts following nodes | nothing; every node announces at once |
//! | `rho-rpc.call.<node>.<tool>.<version>` | a calling host, with a reply inbox | [`CallRequest`] to the node it chose among those serving that tool's version (in turn), with the caller's principal in the [`PRINCIPAL_HEADER`] header (never a token); the node serves it as a NATS service endpoint (`nats micro info rho-node` lists them) |
//! | the call's reply inbox | the node running it | [`Reply`]s: `accepted` (naming the node the host chose) at once, `update`s, a `beat` every [`BEAT_EVERY`], then `done` (split into [`CHUNK_HEADER`] parts when larger than a message) |
//! | `rho-rpc.cancel.<node>` | the calling host | [`Cancel`]: stop the call (its timeout passed, its caller went away) |
//!
//! Every subject a node publishes or hears names it, so the server's permissions can tell nodes
//! apart: with `deploy/nats/rho.conf`, node `n1` may announce only on `rho-rpc.announce.n1`,
//! hears only calls and cancels for `n1`, and answers only the requests it received
//! (`allow_responses`); a watcher can neither announce nor answer. These subjects are outside
//! `rho.>`, so the events stream never stores them.
//!
//! A node takes the principal a call's header names as who the call is for (its gate, its
//! journal, its spans see it): with the shipped permissions only hosts may publish on
//! `rho-rpc.call.>`, so only a host, which told its caller apart, can name one; a node or a
//! watcher that tries is refused by the server and the node never hears it.

use std::time::Duration;

use rho_runtime::{Outcome, ToolSpec};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where every node announces its tools (`rho-rpc.announce.<node>`), for a host to follow.
pub const ANNOUNCE_ALL: &str = "rho-rpc.announce.*";

/// Where node `node` announces its tools.
pub fn announce_subject(node: &str) -> String {
    format!("rho-rpc.announce.{node}")
}

/// The node an announcement's subject names (its last token).
pub fn announcer(subject: &str) -> Option<&str> {
    subject.strip_prefix("rho-rpc.announce.")
}
/// Where a host asks every node to announce now.
pub const HELLO: &str = "rho-rpc.hello";
/// The queue group of a node's endpoints (instances of one node name share its calls).
pub const QUEUE: &str = "rho-node";
/// How often a node announces itself.
pub const ANNOUNCE_EVERY: Duration = Duration::from_millis(500);
/// How long a node may stay silent before a host counts it gone.
pub const NODE_GONE_AFTER: Duration = Duration::from_secs(2);
/// How often a node running a call says so.
pub const BEAT_EVERY: Duration = Duration::from_millis(200);
/// How long a call's node may stay silent before the call ends `crashed`.
pub const SILENT_AFTER: Duration = Duration::from_millis(1500);
/// The header of a call naming who it is for: the caller's
/// [`Principal`](rho_runtime::Principal) as JSON (what a token proved, never the token).
pub const PRINCIPAL_HEADER: &str = "Rho-Principal";
/// The header numbering the parts of a large reply: `INDEX/COUNT`, from 1.
pub const CHUNK_HEADER: &str = "Rho-Part";

/// The subject of `tool` in the version `origin` (`plugin@version`) on node `node`: the version
/// as a digest, one subject token.
pub fn call_subject(node: &str, tool: &str, origin: &str) -> String {
    let digest = rho_runtime::sha256_hex(origin.as_bytes());
    format!("rho-rpc.call.{node}.{tool}.{}", &digest[..16])
}

/// The subject a node hears cancellations on.
pub fn cancel_subject(node: &str) -> String {
    format!("rho-rpc.cancel.{node}")
}

/// A node's tools.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Announce {
    /// The node's name.
    pub node: String,
    /// Its tools, each with its plugin version.
    pub tools: Vec<Offer>,
    /// The node is stopping: count it gone now.
    #[serde(default)]
    pub leaving: bool,
}

/// One tool a node serves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Offer {
    /// The tool, as its plugin declares it.
    pub spec: ToolSpec,
    /// `plugin@version`.
    pub origin: String,
}

/// One call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallRequest {
    /// The call's id on the calling host.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments (checked by the calling host).
    pub arguments: Value,
    /// What is left of the call's timeout on the calling host, ms.
    pub time_left_ms: Option<u64>,
    /// The call's W3C trace context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A call's end of the conversation, node to caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// The node has the call.
    Accepted {
        /// Its name.
        node: String,
    },
    /// A partial update.
    Update {
        /// Its text.
        text: String,
    },
    /// Still running.
    Beat,
    /// The end.
    Done(Done),
}

/// How a call ended on its node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Done {
    /// The node's outcome.
    pub outcome: Outcome,
    /// The text the model reads.
    pub text: String,
    /// Images, base64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<WireImage>,
    /// Structured content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Details for screens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// An image on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireImage {
    /// Its type.
    pub mime_type: String,
    /// Its bytes, base64.
    pub base64: String,
}

/// Stop a call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cancel {
    /// The call's id, as in its request.
    pub call_id: String,
}
