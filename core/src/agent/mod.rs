//! The agent loop: a model's turns, their tool calls run through the runner, the session's
//! messages.

pub(crate) mod model;
pub(crate) mod session;
pub(crate) mod settings;
pub(crate) mod stop;
