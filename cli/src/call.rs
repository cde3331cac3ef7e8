//! `rho call`: one call through the same runner a host uses.

use std::path::PathBuf;
use std::process::ExitCode;

use rho_runtime::{CallOptions, ToolCall};
use serde_json::Value;

use crate::host::{self, PluginFlags, RunFlags};
use crate::render;

/// `rho call` flags.
#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 when the outcome is ok, 1 for any other outcome or an unusable plugin directory, 2 for a usage error."
)]
pub struct Args {
    /// The tool to call.
    #[arg(value_name = "TOOL")]
    tool: String,
    /// Its arguments, a JSON object (default `{}`).
    #[arg(value_name = "ARGS_JSON")]
    args: Option<String>,
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Print {outcome, text, images, details, duration_ms} as JSON (and `structured`, `full_text`
    /// when the result has them).
    #[arg(long)]
    json: bool,
    /// Write the answer's images into this directory.
    #[arg(long, value_name = "DIR")]
    save_images: Option<PathBuf>,
    /// Run the call in a running host (`rho serve`, `rho watch --plugins`) through its control
    /// socket: SOCKET, or without one the newest host's; the call then shows in that host's
    /// views and journal. Plugin and run flags do not apply.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, conflicts_with_all = ["plugins", "gate", "timeout_ms"])]
    host: Option<Option<PathBuf>>,
}

/// What the exit hook reports if the process ends during the call (an in-process plugin called
/// `exit`): the call, and the descriptor its result goes to.
struct InFlight {
    call_id: String,
    tool: String,
    json: bool,
    out: i32,
}

static IN_FLIGHT: std::sync::Mutex<Option<InFlight>> = std::sync::Mutex::new(None);

/// Runs at `exit`: if a call is in flight, its plugin ended the process. The call's result is
/// written as `crashed` (JSON or the error line) and the process ends with status 1: an exit
/// during a call never looks like success.
extern "C" fn exit_during_call() {
    let Ok(slot) = IN_FLIGHT.try_lock() else {
        // SAFETY: _exit ends the process at once; nothing else runs.
        unsafe { libc::_exit(1) }
    };
    let Some(call) = slot.as_ref() else { return };
    let text = format!(
        "tool `{}` ended the host process during the call (an in-process plugin called exit; \
         run it without --in-process)",
        call.tool
    );
    let (fd, line) = if call.json {
        let result = rho_runtime::ToolResult::failed(
            &call.call_id,
            &call.tool,
            rho_runtime::Outcome::Crashed,
            text,
        );
        (call.out, format!("{}\n", render::result_json(&result)))
    } else {
        (2, format!("rho: crashed: {text}\n"))
    };
    // SAFETY: writes a buffer we own to a descriptor, then ends the process at once.
    unsafe {
        libc::write(fd, line.as_ptr().cast(), line.len());
        libc::_exit(1);
    }
}

/// The descriptor results are written to: a private duplicate of stdout, fd 1 itself pointed at
/// stderr, so a plugin that prints or closes fd 1 cannot lose or corrupt the result.
fn result_out() -> Option<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: dup/dup2 on the standard descriptors; the duplicate is owned by the File.
    unsafe {
        let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 || libc::dup2(2, 1) < 0 {
            return None;
        }
        Some(std::fs::File::from_raw_fd(fd))
    }
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
    if let Some(socket) = &args.host {
        let socket = match crate::control::find(socket.as_deref()) {
            Ok(socket) => socket,
            Err(e) => {
                eprintln!("rho: {e}");
                return ExitCode::from(1);
            }
        };
        return match crate::control::call(&socket, &args.tool, arguments).await {
            Ok(result) => report(&result, &args, None),
            Err(e) => {
                eprintln!("rho: {e}");
                ExitCode::from(1)
            }
        };
    }
    let asker = std::sync::Arc::new(crate::gates::TerminalAsker::default());
    let built = host::build(&config, &args.plugins, Some(&args.run), |b| b.asker(asker)).await;
    let (host, _) = match built {
        Ok(built) => built,
        Err(code) => return code,
    };
    let call = ToolCall::new("call-1", args.tool.clone(), arguments)
        .by(std::sync::Arc::new(rho_runtime::Principal::local()));
    let out = result_out();
    {
        use std::os::fd::AsRawFd;
        static HOOK: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a plain function; atexit has no other precondition.
        HOOK.call_once(|| unsafe {
            libc::atexit(exit_during_call);
        });
        *IN_FLIGHT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(InFlight {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            json: args.json,
            out: out.as_ref().map_or(1, |f| f.as_raw_fd()),
        });
    }
    let result = host.call_with(&call, &CallOptions::default()).await;
    *IN_FLIGHT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    // Its sources (MCP servers) stopped and cleaned up before the process exits.
    host.shutdown().await;
    report(&result, &args, out)
}

/// Prints `result` as the flags ask (text, JSON, saved images) and returns the exit status.
fn report(
    result: &rho_runtime::ToolResult,
    args: &Args,
    mut out: Option<std::fs::File>,
) -> ExitCode {
    let call_id = &result.call_id;
    let mut print = |line: &str| {
        use std::io::Write;
        match out.as_mut() {
            Some(out) => {
                let _ = writeln!(out, "{line}");
            }
            None => outln!("{line}"),
        }
    };
    let mut saved = true;
    if let Some(dir) = &args.save_images {
        match render::save_images(&result.output, call_id, dir) {
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
        print(&render::result_json(result).to_string());
    } else if result.is_error() {
        let text = result.text();
        let text = render::terminal_safe(&text);
        eprintln!("rho: {}: {text}", result.outcome);
    } else {
        print(&render::terminal_safe(&result.text()));
        for image in result.output.images() {
            let mime = render::terminal_safe(&image.mime_type);
            print(&format!("[image {mime} {} bytes]", image.bytes.len()));
        }
        if let Some(details) = &result.details {
            print(&format!("details: {details}"));
        }
    }
    if result.is_error() || !saved {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
