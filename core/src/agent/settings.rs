//! How an agent loop runs: what a session keeps of the details ([`KeepDetails`]), which calls of a
//! turn run at once ([`CallOrder`]), and the loop's bounds ([`LoopConfig`]).

use serde_json::Value;

use crate::agent::model::KeptDetails;

/// How much of each result's details the session keeps (subscribers always get them whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeepDetails {
    /// Keep none.
    None,
    /// Keep all (the default).
    #[default]
    All,
    /// Keep details up to this many bytes of JSON; larger ones are dropped and marked.
    UpTo(usize),
}

impl KeepDetails {
    /// What this policy keeps of `details`.
    pub fn keep(self, details: Option<&Value>) -> KeptDetails {
        match (self, details) {
            (_, None) | (KeepDetails::None, _) => KeptDetails::None,
            (KeepDetails::All, Some(d)) => KeptDetails::Kept(d.clone()),
            (KeepDetails::UpTo(max), Some(d)) => {
                let bytes = d.to_string().len();
                if bytes <= max {
                    KeptDetails::Kept(d.clone())
                } else {
                    KeptDetails::Dropped { bytes }
                }
            }
        }
    }
}

/// Which calls of one turn run side by side.
///
/// The rule of [`CallOrder::ReadOnlyAtOnce`], the default: a call of a tool that declares itself
/// read-only ([`ToolHints::read_only`](crate::ToolHints)) starts at once; every other call starts
/// only when the one before it *among the others* has ended, so the calls that may change things
/// run one at a time in the order the model gave them, while reads run beside them. Both are
/// bounded by `max_parallel` together. A call's gate runs inside its turn: a write waiting for a
/// person's approval holds back the writes after it, never a read. A tool that is unknown or
/// declares nothing counts as not read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOrder {
    /// Read-only calls at once, the others one at a time in model order.
    #[default]
    ReadOnlyAtOnce,
    /// Every call at once, whatever it declares.
    AllAtOnce,
}

/// A loop's settings.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Calls of one turn that run at once.
    pub max_parallel: usize,
    /// Turns after which the loop stops even if the model goes on.
    pub max_turns: u32,
    /// How much of each result's details the session keeps.
    pub keep_details: KeepDetails,
    /// Which calls of a turn run side by side.
    pub call_order: CallOrder,
}

impl Default for LoopConfig {
    /// 8 calls at once, read-only ones beside the others taken in model order, 32 turns, all
    /// details kept.
    fn default() -> Self {
        LoopConfig {
            max_parallel: 8,
            max_turns: 32,
            keep_details: KeepDetails::All,
            call_order: CallOrder::ReadOnlyAtOnce,
        }
    }
}
