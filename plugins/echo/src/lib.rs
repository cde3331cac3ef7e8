//! `echo`: the smallest useful rho plugin. Its one tool answers with the text it was given.

use rho_plugin_api::{Answer, Ctx, JsonSchema, Tool, ToolError, export_plugin};
use serde::Deserialize;

/// Arguments of `echo`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// The text to send back.
    pub text: String,
}

/// Answers with `args.text`, unchanged.
pub fn echo(args: EchoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::text(args.text))
}

export_plugin! {
    Tool::new("echo", "Answers with the text it was given, unchanged.", echo)
        .title("Echo")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes() {
        let ctx = Ctx::detached("t1");
        let answer = echo(
            EchoArgs {
                text: "hello".into(),
            },
            &ctx,
        )
        .unwrap();
        assert_eq!(answer.output.text(), "hello");
    }
}
