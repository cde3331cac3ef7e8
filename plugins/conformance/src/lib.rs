//! `conformance`: the tools the official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! calls on a server, answered through rho (run by `tests/tests/conformance.rs`).

use std::time::Duration;

use rho_plugin_api::declare::TaskSupport;
use rho_plugin_api::{
    Answer, Block, Ctx, JsonSchema, LogLevel, Question, Reply, Tool, ToolError, export_plugin, json,
};
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

/// A WAV file of 8 silent samples (8 kHz, 8-bit mono): the smallest audio a client can play.
fn silent_wav() -> Vec<u8> {
    let samples = [0x80u8; 8];
    let mut wav = Vec::new();
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + samples.len() as u32).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&8000u32.to_le_bytes()); // sample rate
    wav.extend_from_slice(&8000u32.to_le_bytes()); // byte rate
    wav.extend_from_slice(&1u16.to_le_bytes()); // block align
    wav.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&(samples.len() as u32).to_le_bytes());
    wav.extend_from_slice(&samples);
    wav
}

fn audio_content(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::blocks(vec![Block::audio(
        "audio/wav",
        silent_wav(),
    )]))
}

fn embedded_resource(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::blocks(vec![Block::resource_text(
        "test://embedded-resource",
        "text/plain",
        "This is an embedded resource content.",
    )]))
}

fn multiple_content_types(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::blocks(vec![
        Block::text("Multiple content types test:"),
        Block::image("image/png", RED_PIXEL),
        Block::resource_text(
            "test://mixed-content-resource",
            "application/json",
            r#"{"test":"data","value":123}"#,
        ),
    ]))
}

/// Arguments of `test_elicitation`.
#[derive(Deserialize, JsonSchema)]
pub struct ElicitationArgs {
    /// The message to show the user.
    pub message: String,
}

/// The reply as the suite's tools describe it.
fn described(reply: &Reply) -> String {
    match reply {
        Reply::Accepted(content) => format!("action=accept, content={content}"),
        Reply::Declined(why) => format!("action=decline ({why})"),
        Reply::Cancelled(why) => format!("action=cancel ({why})"),
    }
}

fn elicitation(args: ElicitationArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    });
    let reply = ctx.ask(Question::new(args.message, schema));
    Ok(Answer::text(format!(
        "User response: {}",
        described(&reply)
    )))
}

fn elicitation_defaults(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": true},
        },
    });
    let reply = ctx.ask(Question::new("Please review your details", schema));
    Ok(Answer::text(format!(
        "Elicitation completed: {}",
        described(&reply)
    )))
}

fn elicitation_enums(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ]},
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "items": {"anyOf": [
                {"const": "value1", "title": "First Choice"},
                {"const": "value2", "title": "Second Choice"},
                {"const": "value3", "title": "Third Choice"},
            ]}},
        },
    });
    let reply = ctx.ask(Question::new("Please choose", schema));
    Ok(Answer::text(format!(
        "Elicitation completed: {}",
        described(&reply)
    )))
}

fn error_handling(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Err(ToolError::new(
        "This tool intentionally returns an error for testing",
    ))
}

/// Whom to greet.
#[derive(Deserialize, JsonSchema)]
pub struct GreetArgs {
    /// The name.
    pub name: String,
}

fn greet(args: GreetArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::text(format!("Hello, {}!", args.name)))
}

/// How long to compute.
#[derive(Deserialize, JsonSchema)]
pub struct ComputeArgs {
    /// Seconds (0: at once).
    #[serde(default)]
    pub seconds: f64,
}

/// Sleeps `seconds` in short steps, stopping early when the call is cancelled.
fn sleep_unless_cancelled(seconds: f64, ctx: &Ctx) -> bool {
    let until = std::time::Instant::now() + Duration::from_secs_f64(seconds.clamp(0.0, 600.0));
    while std::time::Instant::now() < until {
        if ctx.is_cancelled() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn slow_compute(args: ComputeArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    if !sleep_unless_cancelled(args.seconds, ctx) {
        return Err(ToolError::new("cancelled"));
    }
    Ok(Answer::text(format!(
        "Computed after {} seconds",
        args.seconds
    )))
}

fn failing_job(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    sleep_unless_cancelled(1.0, ctx);
    Err(ToolError::new("The job failed, as it always does"))
}

/// An argument no client sends: a call of `protocol_error_job` is refused before it runs.
#[derive(Deserialize, JsonSchema)]
pub struct NeverSentArgs {
    /// Never sent by the suite.
    pub never_sent: String,
}

fn protocol_error_job(_args: NeverSentArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::text("unreachable: the arguments are refused first"))
}

/// What to delete.
#[derive(Deserialize, JsonSchema)]
pub struct DeleteArgs {
    /// The file.
    #[serde(default)]
    pub path: String,
}

fn confirm_delete(args: DeleteArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let reply = ctx.ask(Question::confirm(format!("Delete {}?", args.path)));
    let confirmed = matches!(&reply, Reply::Accepted(content) if content["confirm"] == true);
    Ok(Answer::text(if confirmed {
        format!("Deleted {}", args.path)
    } else {
        format!("Kept {} ({})", args.path, described(&reply))
    }))
}

/// A question whose answer is an object of one required string `field`.
fn text_question(message: &str, field: &str) -> Question {
    let schema = json!({
        "type": "object",
        "properties": {field: {"type": "string"}},
        "required": [field],
    });
    Question::new(message, schema)
}

/// The string `field` of an accepted answer, else what the reply was.
fn field_of(reply: &Reply, field: &str) -> String {
    match reply {
        Reply::Accepted(content) => content[field].as_str().unwrap_or_default().to_owned(),
        other => described(other),
    }
}

/// Two questions at once: the client sees both pending, and may answer them one at a time.
fn multi_input(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let replies = ctx.ask_all(vec![
        text_question("Your first name?", "first").with_key("first"),
        text_question("Your last name?", "last").with_key("last"),
    ]);
    Ok(Answer::text(format!(
        "first: {}; last: {}",
        field_of(&replies[0], "first"),
        field_of(&replies[1], "last")
    )))
}

/// Asks a name first (within the request), then runs as a task and greets it.
fn tool_with_task(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let reply = ctx.ask(text_question("What is your name?", "name").with_key("user_name"));
    match reply {
        Reply::Accepted(_) => Ok(Answer::text(format!(
            "Hello, {}!",
            field_of(&reply, "name")
        ))),
        other => Err(ToolError::new(described(&other))),
    }
}

/// The 2026-07-28 suite's input-required tools: one question under the key `user_name`.
fn input_required_elicitation(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let reply = ctx.ask(text_question("What is your name?", "name").with_key("user_name"));
    Ok(Answer::text(format!(
        "Hello, {}!",
        field_of(&reply, "name")
    )))
}

/// Two rounds: `step1` (a name), then `step2` (a color).
fn input_required_multi_round(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let name = ctx.ask(text_question("Step 1: What is your name?", "name").with_key("step1"));
    let color =
        ctx.ask(text_question("Step 2: What is your favorite color?", "color").with_key("step2"));
    Ok(Answer::text(format!(
        "{} likes {}",
        field_of(&name, "name"),
        field_of(&color, "color")
    )))
}

/// One question under `confirm`. The call goes on only after a retry that carries the
/// `requestState` rho gave (it names the parked call; any other state is refused), so reaching
/// the answer means the state was checked: `state-ok`.
fn input_required_request_state(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let schema = json!({
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
    });
    let reply = ctx.ask(Question::new("Please confirm", schema).with_key("confirm"));
    Ok(Answer::text(format!("state-ok: {}", described(&reply))))
}

export_plugin! {
    // The MCP Tasks extension's fixtures (the 0.2 suite's tasks-* scenarios).
    Tool::new("greet", "Greets a name, at once.", greet)
        .read_only(true)
        .open_world(false),
    Tool::new("slow_compute", "Sleeps `seconds`, then answers; a task for clients that declare tasks.", slow_compute)
        .read_only(true)
        .open_world(false)
        .timeout_ms(600_000)
        .task_support(TaskSupport::Optional),
    Tool::new("failing_job", "Fails after a second; runs only as a task.", failing_job)
        .read_only(true)
        .open_world(false)
        .task_support(TaskSupport::Required),
    Tool::new("protocol_error_job", "Takes an argument no client sends: refused before it runs.", protocol_error_job)
        .read_only(true)
        .open_world(false)
        .task_support(TaskSupport::Optional),
    Tool::new("confirm_delete", "Asks before it deletes (it deletes nothing).", confirm_delete)
        .open_world(false)
        .task_support(TaskSupport::Optional),
    Tool::new("multi_input", "Asks two questions.", multi_input)
        .read_only(true)
        .open_world(false)
        .task_support(TaskSupport::Optional),
    Tool::new("test_tool_with_task", "Asks the user's name first, then greets it; runs only as a task.", tool_with_task)
        .read_only(true)
        .open_world(false)
        .task_support(TaskSupport::Required)
        .asks_first(),
    // The 2026-07-28 suite's input-required (MRTR) fixtures.
    Tool::new("test_input_required_result_elicitation", "Asks a name (key `user_name`), then greets it.", input_required_elicitation)
        .read_only(true)
        .open_world(false),
    Tool::new("test_input_required_result_multi_round", "Asks a name (`step1`), then a color (`step2`).", input_required_multi_round)
        .read_only(true)
        .open_world(false),
    Tool::new("test_input_required_result_request_state", "Asks for a confirmation (`confirm`).", input_required_request_state)
        .read_only(true)
        .open_world(false),
    Tool::new("test_input_required_result_tampered_state", "Asks for a confirmation (`confirm`).", input_required_request_state)
        .read_only(true)
        .open_world(false),
    Tool::new("test_input_required_result_capabilities", "Asks a name (key `user_name`), then greets it.", input_required_elicitation)
        .read_only(true)
        .open_world(false),
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
    Tool::new("test_audio_content", "Answers a short silent WAV.", audio_content)
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    Tool::new("test_embedded_resource", "Answers an embedded text resource.", embedded_resource)
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    Tool::new(
        "test_multiple_content_types",
        "Answers text, an image and an embedded resource, in that order.",
        multiple_content_types,
    )
    .read_only(true)
    .idempotent(true)
    .open_world(false),
    Tool::new("test_elicitation", "Asks the user for a username and an email.", elicitation)
        .read_only(true)
        .open_world(false),
    Tool::new(
        "test_elicitation_sep1034_defaults",
        "Asks the user with a default for each primitive type.",
        elicitation_defaults,
    )
    .read_only(true)
    .open_world(false),
    Tool::new(
        "test_elicitation_sep1330_enums",
        "Asks the user with the five kinds of enum.",
        elicitation_enums,
    )
    .read_only(true)
    .open_world(false),
}
