//! rho's protocol: the one vocabulary of a call and its end, and the frames between a host and
//! its worker processes. Types and codecs only, no I/O of its own (the frame codec reads and
//! writes through `std::io` traits it is given): the runtime, the loader and the worker all
//! stand on it, and it stands on `rho-plugin-api` alone.
//!
//! **Internal to rho**: embedders reach these types through `rho-runtime` (its re-exports, and
//! `rho_runtime::protocol`); the frames change with [`PROTOCOL_VERSION`] between releases.
//!
//! - a tool ([`ToolSpec`]) and how its calls end ([`Outcome`], [`ToolResult`], [`Failure`],
//!   [`CrashReason`]), with the seed's texts ([`timeout_text`], [`crash_text`]) and the one
//!   answer codec ([`answer`]: shapes, failure kinds and the per-answer limits every source is
//!   held to);
//! - details as they arrive ([`details`]: parsed within a depth bound, without recursion);
//! - what a sandbox is asked for and reports ([`Grants`], [`Identity`], [`WorkerLimits`],
//!   [`SandboxReport`]);
//! - the worker frames ([`frames`]) and their version ([`PROTOCOL_VERSION`]).
//!
//! ```
//! use rho_protocol::{Outcome, ToolResult};
//! let result = ToolResult::failed("c1", "spin", Outcome::TimedOut, "tool `spin` timed out after 500 ms");
//! assert!(result.is_error());
//! assert_eq!(result.outcome.as_str(), "timed_out");
//! ```

#![warn(missing_docs)]

pub mod answer;
mod decision;
pub mod details;
pub mod frames;
pub mod grants;
mod outcome;
mod sandbox;
mod spec;

pub use answer::{MAX_DETAILS_BYTES, MAX_IMAGES};
pub use decision::Decision;
pub use grants::{Grants, MAX_GRANTS};
pub use outcome::{
    CrashReason, Failure, Normalized, Outcome, ToolResult, crash_text, cut_output,
    idle_timeout_text, normalize, timeout_text, with_text,
};
pub use sandbox::{Identity, NOBODY, SandboxReport, WasmSandbox, WorkerLimits};
pub use spec::{
    MAX_SCHEMA_BYTES, MAX_SCHEMA_PATTERNS, RawTool, ToolSpec, check_tools, schema_cost_problem,
    spec_problem,
};

/// The version of the host <-> worker protocol. A host and a worker check each other's before
/// anything else crosses: a mismatch is one clear line and a load error.
pub const PROTOCOL_VERSION: u32 = 7;
