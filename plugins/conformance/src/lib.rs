//! `conformance`: the tools the official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! calls on a server, answered through rho (run by `tests/tests/conformance.rs`).

use std::time::Duration;

use rho_plugin_api::{Answer, Ctx, JsonSchema, LogLevel, Tool, ToolError, export_plugin};
use serde::Deserialize;

/// No arguments.
#[derive(Deserialize, JsonSchema)]
pub struct NoArgs {}

/// A 1x1 red PNG.
const RED_PIXEL: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

fn simple_text(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::text("This is a simple text response for testing."))
}

fn image_content(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::image("image/png", RED_PIXEL, ""))
}

fn with_progress(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    for step in ["0/100", "50/100", "100/100"] {
        ctx.update(step);
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Answer::text("Progress tool completed"))
}

fn with_logging(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    ctx.log(LogLevel::Info, "Tool execution started");
    std::thread::sleep(Duration::from_millis(50));
    ctx.log(LogLevel::Info, "Tool processing data");
    std::thread::sleep(Duration::from_millis(50));
    ctx.log(LogLevel::Info, "Tool execution completed");
    Ok(Answer::text("Logging tool completed"))
}

fn error_handling(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Err(ToolError::new(
        "This tool intentionally returns an error for testing",
    ))
}

export_plugin! {
    Tool::new("test_simple_text", "Answers a simple text.", simple_text)
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    Tool::new("test_image_content", "Answers a 1x1 red PNG.", image_content)
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    Tool::new("test_tool_with_progress", "Reports progress 0, 50, 100 of 100.", with_progress)
        .read_only(true)
        .open_world(false),
    Tool::new("test_tool_with_logging", "Logs three lines at info level.", with_logging)
        .read_only(true)
        .open_world(false),
    Tool::new("test_error_handling", "Always fails.", error_handling)
        .read_only(true)
        .open_world(false),
}
