//! `needs`: a plugin that declares what it needs beyond computing, for rho's tests of declared
//! capabilities against a host's grants.

use rho_plugin_api::{Answer, Capabilities, Ctx, JsonSchema, Tool, ToolError, export_plugin};
use serde::Deserialize;

/// No arguments.
#[derive(Deserialize, JsonSchema)]
pub struct NoArgs {}

/// The path `needs` declares it reads.
pub const DATA: &str = "/var/tmp/rho-needs";

/// Answers `RHO_NEEDS_TOKEN`, which the plugin declares it reads.
fn token(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::text(
        std::env::var("RHO_NEEDS_TOKEN").unwrap_or_else(|_| "(unset)".into()),
    ))
}

export_plugin! {
    capabilities: Capabilities::none().read(DATA).network().env("RHO_NEEDS_TOKEN"),
    tools: [Tool::new("token", "Answers the RHO_NEEDS_TOKEN environment variable.", token).read_only(true)],
}
