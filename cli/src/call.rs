//! `rho call`: one call through the same runner a host uses.

use std::path::PathBuf;
use std::process::ExitCode;

use rho_core::{Bus, RunOptions, ToolCall};
use serde_json::Value;

use crate::host::{self, PluginFlags, RunFlags};
use crate::render;

/// `rho call` flags.
#[derive(clap::Args)]
pub struct Args {
    /// The tool to call.
    tool: String,
    /// Its arguments, a JSON object (default `{}`).
    args: Option<String>,
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Print {outcome, text, images, details, duration_ms} as JSON.
    #[arg(long)]
    json: bool,
    /// Write the answer's images into this directory.
    #[arg(long, value_name = "DIR")]
    save_images: Option<PathBuf>,
}

pub async fn main(args: Args, config: crate::config::Config) -> ExitCode {
    let arguments: Value = match args.args.as_deref() {
        None => Value::Object(Default::default()),
        Some(text) => match serde_json::from_str(text) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return host::usage("ARGS_JSON must be a JSON object"),
            Err(e) => return host::usage(&format!("ARGS_JSON is not JSON: {e}")),
        },
    };
    let asker = std::sync::Arc::new(crate::gates::TerminalAsker::default());
    let gate = match host::gate(&config, &args.run, asker) {
        Ok(gate) => gate,
        Err(message) => return host::usage(&message),
    };
    let bus = Bus::default();
    let (registry, _dirs) = match host::registry(&bus, &config, &args.plugins).await {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let runner = host::runner(registry, &config, &args.run);
    let call = ToolCall::new("call-1", args.tool, arguments);
    let result = runner.run(&call, &gate, &RunOptions::default()).await;
    let mut saved = true;
    if let Some(dir) = &args.save_images {
        match render::save_images(&result.output, &call.id, dir) {
            Ok(paths) => {
                for path in paths {
                    eprintln!("rho: saved {}", path.display());
                }
            }
            Err(e) => {
                eprintln!("rho: cannot save images to {}: {e}", dir.display());
                saved = false;
            }
        }
    }
    if args.json {
        outln!("{}", render::result_json(&result));
    } else if result.is_error() {
        let text = render::terminal_safe(result.text());
        eprintln!("rho: {}: {text}", result.outcome);
    } else {
        outln!("{}", render::terminal_safe(result.text()));
        for image in result.output.images() {
            let mime = render::terminal_safe(&image.mime_type);
            outln!("[image {mime} {} bytes]", image.bytes.len());
        }
        if let Some(details) = &result.details {
            outln!("details: {details}");
        }
    }
    if result.is_error() || !saved {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
