//! A running host's control socket: `rho call --host` runs a call in an already running host
//! (`rho serve`, `rho watch --plugins`), so it goes through that host's gate, counts in its
//! stats and shows in its views and journal.
//!
//! The socket is `host-<pid>.sock` in `$XDG_RUNTIME_DIR/rho` (else `~/.local/state/rho`), a
//! directory of mode 0700; the socket itself is 0600, and a connection from another user is
//! closed unanswered (its peer's uid is checked). One connection is one call: a JSON line
//! `{"tool", "arguments"}` in, a JSON line with the result out. A client that goes away before
//! the answer cancels its call.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use rho_runtime::{CallOptions, Host, Image, Outcome, Output, ToolCall, ToolResult};
use rho_worker::sandbox::host::outside_sandboxes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The largest request read: 8 MiB of arguments.
const MAX_REQUEST: u64 = 8 << 20;

/// How long a connection may take to send its request.
const REQUEST_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// One call asked of a host.
#[derive(Serialize, Deserialize)]
struct Request {
    tool: String,
    #[serde(default)]
    arguments: Value,
}

/// An image of a result, its bytes in base64.
#[derive(Serialize, Deserialize)]
struct WireImage {
    mime_type: String,
    base64: String,
}

/// A call's result on the wire.
#[derive(Serialize, Deserialize)]
struct Response {
    call_id: String,
    tool: String,
    outcome: Outcome,
    text: String,
    #[serde(default)]
    images: Vec<WireImage>,
    #[serde(default)]
    structured: Option<Value>,
    #[serde(default)]
    details: Option<Value>,
    #[serde(default)]
    full_text: Option<String>,
    duration_ms: f64,
    #[serde(default)]
    decision: Option<rho_runtime::Decision>,
}

impl From<&ToolResult> for Response {
    fn from(r: &ToolResult) -> Self {
        let b64 = base64::engine::general_purpose::STANDARD;
        Response {
            call_id: r.call_id.clone(),
            tool: r.tool.clone(),
            outcome: r.outcome,
            text: r.text().into_owned(),
            images: r
                .output
                .images()
                .iter()
                .map(|i| WireImage {
                    mime_type: i.mime_type.clone(),
                    base64: b64.encode(&i.bytes),
                })
                .collect(),
            structured: r.structured.clone(),
            details: r.details.clone(),
            full_text: r.full_text.clone(),
            duration_ms: r.duration.as_secs_f64() * 1000.0,
            decision: r.decision.clone(),
        }
    }
}

impl Response {
    fn into_result(self) -> Result<ToolResult, String> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut images = Vec::new();
        for image in self.images {
            let bytes = b64
                .decode(image.base64)
                .map_err(|e| format!("the host sent an image that is not base64: {e}"))?;
            images.push(Image::new(image.mime_type, bytes));
        }
        let output = match images.len() {
            0 => Output::Text(self.text),
            _ => Output::Images {
                images,
                text: self.text,
            },
        };
        Ok(ToolResult {
            call_id: self.call_id,
            tool: self.tool,
            outcome: self.outcome,
            output,
            structured: self.structured,
            details: self.details,
            full_text: self.full_text,
            duration: std::time::Duration::from_secs_f64(self.duration_ms.max(0.0) / 1000.0),
            decision: self.decision,
        })
    }
}

/// The directory control sockets live in.
fn dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .map(|p| p.join("rho"))
        .unwrap_or_else(crate::journals::dir)
}

/// A host's listening control socket; removed when dropped.
pub struct Control {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Opens `host`'s control socket. A failure is reported on stderr and the host serves on
/// without one.
pub fn listen(host: &Host) -> Option<Control> {
    match bind() {
        Ok((path, listener)) => {
            let host = host.clone();
            let task = tokio::spawn(accept(listener, host));
            Some(Control { path, task })
        }
        Err(e) => {
            eprintln!("rho: no control socket ({e}); `rho call --host` cannot reach this host");
            None
        }
    }
}

fn bind() -> Result<(PathBuf, tokio::net::UnixListener), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = dir();
    crate::journals::make_private(&dir)?;
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is not a directory of this user's that only it can open",
            dir.display()
        ));
    }
    let path = dir.join(format!("host-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener =
        tokio::net::UnixListener::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((path, listener))
}

async fn accept(listener: tokio::net::UnixListener, host: Host) {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: wait rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        if !stream
            .peer_cred()
            .is_ok_and(|c| c.uid() == me && c.pid().is_some_and(outside_sandboxes))
        {
            tracing::warn!("a control connection from another user or a sandbox was refused");
            continue;
        }
        let host = host.clone();
        let n = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &host, n).await {
                tracing::warn!(error = %e, "a control connection failed");
            }
        });
    }
}

/// Reads one request, runs it (cancelled if the client goes first), writes the result.
async fn answer(stream: tokio::net::UnixStream, host: &Host, n: u64) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read.take(MAX_REQUEST + 1));
    let mut line = String::new();
    // A client that connects and says nothing does not hold a task for ever.
    match tokio::time::timeout(REQUEST_WAIT, reader.read_line(&mut line)).await {
        Ok(read) => read?,
        Err(_) => return Ok(()),
    };
    let response = match serde_json::from_str::<Request>(&line) {
        Err(e) => Response::from(&ToolResult::failed(
            &format!("ctl-{n}"),
            "",
            Outcome::InvalidArguments,
            format!("rho: a control request that is not {{\"tool\", \"arguments\"}}: {e}"),
        )),
        Ok(request) => {
            let arguments = match request.arguments {
                Value::Null => Value::Object(Default::default()),
                other => other,
            };
            // The socket is owner-only and its peer's uid checked: this machine's user.
            let call = ToolCall::new(format!("ctl-{n}"), request.tool, arguments)
                .by(std::sync::Arc::new(rho_runtime::Principal::local()));
            let mut rest = Vec::new();
            let options = CallOptions::default();
            tokio::select! {
                result = host.call_with(&call, &options) => Response::from(&result),
                // The client went away: dropping the call cancels it (it still ends once).
                _ = reader.read_to_end(&mut rest) => return Ok(()),
            }
        }
    };
    let mut text = serde_json::to_string(&response).map_err(std::io::Error::other)?;
    text.push('\n');
    write.write_all(text.as_bytes()).await
}

/// The socket `rho call --host` reaches: `given`, or the newest in the socket directory that a
/// host answers on.
pub fn find(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return Ok(path.to_owned());
    }
    let dir = dir();
    crate::journals::newest_first(&dir, "host-", ".sock")
        .into_iter()
        .find(|path| std::os::unix::net::UnixStream::connect(path).is_ok())
        .ok_or_else(|| {
            format!(
                "no running host found in {} (start `rho serve` or `rho watch --plugins`)",
                dir.display()
            )
        })
}

/// Runs `tool` with `arguments` in the host listening on `socket`.
pub async fn call(socket: &Path, tool: &str, arguments: Value) -> Result<ToolResult, String> {
    let shown = socket.display();
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("cannot reach the host at {shown}: {e}"))?;
    let mut request = serde_json::to_string(&Request {
        tool: tool.to_owned(),
        arguments,
    })
    .map_err(|e| e.to_string())?;
    request.push('\n');
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot reach the host at {shown}: {e}"))?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .await
        .map_err(|e| format!("the host at {shown} did not answer: {e}"))?;
    let response: Response = serde_json::from_str(&line)
        .map_err(|e| format!("the host at {shown} answered something else: {e}"))?;
    response.into_result()
}
