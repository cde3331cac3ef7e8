//! One tool call, from request to result: the gate and its rules, the runner (task, timeout,
//! cancellation), argument validation and the arguments' JSON text, panics, the typed outcome and the answer's details.

pub(crate) mod ask;
pub(crate) mod gate;
pub(crate) mod invoke;
pub(crate) mod json;
pub(crate) mod limits;
pub(crate) mod options;
pub(crate) mod panic;
pub(crate) mod policy;
pub(crate) mod principal;
pub(crate) mod rules;
pub(crate) mod runner;
pub(crate) mod sender;
pub(crate) mod task;
pub(crate) mod validate;
