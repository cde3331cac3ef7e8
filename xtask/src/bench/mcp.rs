//! `mcp_call`: `echo` through `rho serve` from an MCP client, against the same client talking to a
//! minimal rmcp server with an in-binary echo tool (`xtask mcp-echo-server`); `mcp_http_call`:
//! the same over Streamable HTTP (`rho serve --http` against the minimal server on rmcp's HTTP
//! transport and axum, as rho's), from one keep-alive HTTP client; `mcp_http_oauth`: that call
//! behind OAuth 2.1 (an issuer in the bench's process, the key set cached) against a static
//! token.

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

use super::{Ctx, Figure, median};
use crate::plugins::target_dir;

/// The baseline server: one `echo` tool answered in the server's own code.
#[derive(Clone)]
struct EchoServer;

impl ServerHandler for EchoServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
        let schema = schema.as_object().cloned().unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo",
            "Echo",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(|t| t.as_str())
            .unwrap_or_default()
            .to_owned();
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(text),
        ])))
    }
}

/// `xtask mcp-echo-server`: serves [`EchoServer`] on stdio until the client leaves, or over HTTP
/// at `http` (printing `serving MCP at http://ADDR/mcp` on stderr, as `rho serve --http` does)
/// until killed.
pub fn echo_server(http: Option<std::net::SocketAddr>) -> Result<(), String> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let Some(addr) = http else {
            let service = EchoServer
                .serve(rmcp::transport::stdio())
                .await
                .map_err(|e| e.to_string())?;
            return service.waiting().await.map_err(|e| e.to_string()).map(drop);
        };
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
        };
        let service = StreamableHttpService::new(
            || Ok(EchoServer),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let app = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| e.to_string())?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!("rho: serving MCP at http://{bound}/mcp");
        // As rho's: TCP_NODELAY, or every answer waits for the client's delayed ACK.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).await.map_err(|e| e.to_string())
    })
}

/// Starts `command` (a server given `--http 127.0.0.1:0`) and reads the address it serves at.
async fn http_server(
    mut command: tokio::process::Command,
) -> Result<(tokio::process::Child, String), String> {
    use tokio::io::AsyncBufReadExt;
    let mut child = command
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| e.to_string())?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        if let Some(rest) = line.strip_prefix("rho: serving MCP at http://") {
            let addr = rest.trim_end_matches("/mcp").to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok((child, addr));
        }
    }
    Err("the server ended before it served".into())
}

/// A keep-alive HTTP/1.1 MCP client of one session: initialize, then `tools/call`s whose SSE
/// answers are read to their end.
struct HttpClient {
    reader: tokio::io::BufReader<tokio::net::TcpStream>,
    addr: String,
    session: String,
    /// An `Authorization` header line, or nothing.
    auth: String,
    next_id: u64,
}

impl HttpClient {
    async fn connect(addr: &str) -> Result<HttpClient, String> {
        HttpClient::connect_with(addr, None).await
    }

    /// A client sending `Authorization: Bearer TOKEN` with each request.
    async fn connect_with(addr: &str, token: Option<&str>) -> Result<HttpClient, String> {
        let socket = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        socket.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut client = HttpClient {
            reader: tokio::io::BufReader::new(socket),
            addr: addr.to_owned(),
            session: String::new(),
            auth: token
                .map(|t| format!("Authorization: Bearer {t}\r\n"))
                .unwrap_or_default(),
            next_id: 1,
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}});
        let (headers, _) = client.post(&init.to_string()).await?;
        client.session = headers
            .lines()
            .find_map(|l| {
                let lower = l.to_ascii_lowercase();
                lower
                    .starts_with("mcp-session-id:")
                    .then(|| l[15..].trim().to_owned())
            })
            .ok_or("no session id")?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        client.post(&initialized.to_string()).await?;
        Ok(client)
    }

    /// One POST; the response head and body (chunked bodies reassembled).
    async fn post(&mut self, body: &str) -> Result<(String, String), String> {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let session = if self.session.is_empty() {
            String::new()
        } else {
            format!(
                "Mcp-Session-Id: {}\r\nMcp-Protocol-Version: 2025-11-25\r\n",
                self.session
            )
        };
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{session}{}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            self.auth,
            body.len()
        );
        let io = |e: std::io::Error| e.to_string();
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .map_err(io)?;
        let mut head = String::new();
        let (mut length, mut chunked) = (None, false);
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).await.map_err(io)? == 0 {
                return Err("the server closed the connection".into());
            }
            let lower = line.to_ascii_lowercase();
            if let Some(n) = lower.strip_prefix("content-length:") {
                length = n.trim().parse::<usize>().ok();
            }
            chunked |= lower.starts_with("transfer-encoding: chunked");
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size).await.map_err(io)?;
                let n = usize::from_str_radix(size.trim(), 16).map_err(|e| e.to_string())?;
                let mut chunk = vec![0; n + 2];
                self.reader.read_exact(&mut chunk).await.map_err(io)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            self.reader.read_exact(&mut body).await.map_err(io)?;
        }
        Ok((head, String::from_utf8_lossy(&body).into_owned()))
    }

    async fn echo(&mut self) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hello"}}});
        let (_, body) = self.post(&call.to_string()).await?;
        if !body.contains("hello") || body.contains("\"isError\":true") {
            return Err(format!("echo over HTTP failed: {body}"));
        }
        Ok(())
    }
}

/// Events per second through `/events` to 16 subscribers at once (until every subscriber has
/// every event of `calls` echo calls), and per second produced by the same calls alone.
async fn page_stream(
    command: tokio::process::Command,
    calls: usize,
    runs: usize,
) -> Result<(f64, f64), String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (_server, addr) = http_server(command).await?;
    let mut client = HttpClient::connect(&addr).await?;
    // Three events per call: start, running, end.
    let events = 3 * calls;
    let (mut with_16, mut alone) = (Vec::new(), Vec::new());
    for _ in 0..=runs {
        let started = Instant::now();
        for _ in 0..calls {
            client.echo().await?;
        }
        alone.push(events as f64 / started.elapsed().as_secs_f64());
        let mut readers = Vec::new();
        for _ in 0..16 {
            let mut socket = tokio::net::TcpStream::connect(&addr)
                .await
                .map_err(|e| e.to_string())?;
            // No Last-Event-ID: events from now on; the head comes once the stream subscribed.
            let request = format!("GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n");
            socket
                .write_all(request.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut lines = tokio::io::BufReader::new(socket).lines();
            while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
                if line.is_empty() {
                    break;
                }
            }
            readers.push(tokio::spawn(async move {
                let mut seen = 0;
                while seen < events {
                    match lines.next_line().await {
                        Ok(Some(line)) if line.starts_with("data:") => seen += 1,
                        Ok(Some(_)) => {}
                        _ => break,
                    }
                }
                seen
            }));
        }
        let started = Instant::now();
        for _ in 0..calls {
            client.echo().await?;
        }
        for reader in readers {
            let seen = reader.await.map_err(|e| e.to_string())?;
            if seen < events {
                return Err(format!("a subscriber got {seen} of {events} events"));
            }
        }
        with_16.push(16.0 * events as f64 / started.elapsed().as_secs_f64());
    }
    Ok((median(&mut with_16[1..]), median(&mut alone[1..])))
}

async fn http_per_call_us(
    command: tokio::process::Command,
    calls: usize,
    runs: usize,
) -> Result<f64, String> {
    let (_server, addr) = http_server(command).await?;
    let mut client = HttpClient::connect(&addr).await?;
    let mut samples = Vec::new();
    for _ in 0..=runs {
        let started = Instant::now();
        for _ in 0..calls {
            client.echo().await?;
        }
        samples.push(started.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
    Ok(median(&mut samples[1..]))
}

/// Microseconds per `echo` over HTTP through two servers measured in pairs of runs (one run of
/// each, one after the other, `runs` times after a warm-up pair), each client sending its token.
async fn paired_http_per_call_us(
    (first, first_token): (tokio::process::Command, &str),
    (second, second_token): (tokio::process::Command, &str),
    calls: usize,
    runs: usize,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let (_one, one_addr) = http_server(first).await?;
    let (_two, two_addr) = http_server(second).await?;
    let mut one = HttpClient::connect_with(&one_addr, Some(first_token)).await?;
    let mut two = HttpClient::connect_with(&two_addr, Some(second_token)).await?;
    let (mut ones, mut twos) = (Vec::new(), Vec::new());
    for _ in 0..=runs {
        for (client, samples) in [(&mut one, &mut ones), (&mut two, &mut twos)] {
            let started = Instant::now();
            for _ in 0..calls {
                client.echo().await?;
            }
            samples.push(started.elapsed().as_secs_f64() * 1e6 / calls as f64);
        }
    }
    ones.remove(0);
    twos.remove(0);
    Ok((ones, twos))
}

/// An OAuth issuer for `mcp_http_oauth`, in the bench's process: OpenID discovery and a key set
/// of one Ed25519 key (`/.well-known/openid-configuration`, `/jwks`), and access tokens it signs.
struct BenchIssuer {
    url: String,
    key: ed25519_dalek::SigningKey,
    stop: tokio::task::JoinHandle<()>,
}

impl BenchIssuer {
    async fn start() -> Result<BenchIssuer, String> {
        use base64::Engine;
        let mut seed = [0u8; 32];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").map_err(|e| e.to_string())?,
            &mut seed,
        )
        .map_err(|e| e.to_string())?;
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let url = format!(
            "http://{}",
            listener.local_addr().map_err(|e| e.to_string())?
        );
        let x =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
        let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "bench",
            "alg": "EdDSA", "use": "sig"}]})
        .to_string();
        let discovery = json!({"issuer": url, "jwks_uri": format!("{url}/jwks")}).to_string();
        let json = |body: String| {
            axum::routing::get(move || {
                let body = body.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        body,
                    )
                }
            })
        };
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", json(discovery))
            .route("/jwks", json(jwks));
        let stop = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(BenchIssuer { url, key, stop })
    }

    /// An access token for `audience`, good for an hour.
    fn token(&self, audience: &str) -> String {
        use base64::Engine;
        use ed25519_dalek::Signer;
        let b64 = |value: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let input = format!(
            "{}.{}",
            b64(json!({"alg": "EdDSA", "typ": "at+jwt", "kid": "bench"})),
            b64(
                json!({"iss": self.url, "sub": "bench", "aud": audience, "iat": now,
                "exp": now + 3600, "scope": "tools:call"})
            )
        );
        let signature = self.key.sign(input.as_bytes());
        format!(
            "{input}.{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature.to_bytes())
        )
    }
}

impl Drop for BenchIssuer {
    fn drop(&mut self) {
        self.stop.abort();
    }
}

/// `mcp_http_oauth`: `rho serve --http` behind OAuth (`[serve.oauth]`, the key set cached, each
/// request carrying the same access token) against the same server with a static token (a
/// token file), measured in pairs.
async fn oauth_figure(ctx: &Ctx, dir: &std::path::Path, calls: usize) -> Result<Figure, String> {
    let release = target_dir().join("release");
    let issuer = BenchIssuer::start().await?;
    let config = dir.join("oauth.toml");
    std::fs::write(
        &config,
        format!(
            "[serve.oauth]\nissuers = [\"{}\"]\naudience = \"rho-bench\"\nscopes = [\"tools:call\"]\n",
            issuer.url
        ),
    )
    .map_err(|e| e.to_string())?;
    let static_token = "a-static-token-of-the-benchmark";
    let token_file = dir.join("token");
    owner_only(&token_file, static_token)?;
    let mut oauth = tokio::process::Command::new(release.join("rho"));
    oauth
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--plugins")
        .arg(dir);
    let tokens = token_server(&token_file, dir);
    let access = issuer.token("rho-bench");
    let runs = ctx.runs().min(9);
    let (mut with_oauth, mut with_token) =
        paired_http_per_call_us((oauth, &access), (tokens, static_token), calls, runs).await?;
    Ok(Figure::paired(
        "mcp_http_oauth",
        "us/call",
        "the same server with a static token (a token file), in pairs of runs",
        &mut with_oauth,
        &mut with_token,
    ))
}

async fn per_call_us(
    command: tokio::process::Command,
    calls: usize,
    runs: usize,
) -> Result<f64, String> {
    let transport = TokioChildProcess::new(command).map_err(|e| e.to_string())?;
    let client = ().serve(transport).await.map_err(|e| e.to_string())?;
    let args = json!({"text": "hello"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut samples = Vec::new();
    for _ in 0..=runs {
        let started = Instant::now();
        for _ in 0..calls {
            let result = client
                .call_tool(CallToolRequestParams::new("echo").with_arguments(args.clone()))
                .await
                .map_err(|e| e.to_string())?;
            if result.is_error == Some(true) {
                return Err(format!("echo failed: {:?}", result.content));
            }
        }
        samples.push(started.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
    let _ = client.cancel().await;
    Ok(median(&mut samples[1..]))
}

/// `mcp_call`, `mcp_call_inproc`, `mcp_http_call`, `page_stream_16`, `mcp_http_oauth`,
/// `mcp_http_policy_100`.
pub async fn figures(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let calls = if ctx.quick { 300 } else { 2000 };
    let runs = ctx.runs().min(9);
    let release = target_dir().join("release");
    let dir = std::env::temp_dir().join(format!("rho-bench-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::copy(ctx.plugin("echo"), dir.join("libecho.so")).map_err(|e| e.to_string())?;
    let mut rho = tokio::process::Command::new(release.join("rho"));
    rho.arg("serve").arg("--plugins").arg(&dir);
    let mut raw = tokio::process::Command::new(release.join("xtask"));
    raw.arg("mcp-echo-server");
    let rho_us = per_call_us(rho, calls, runs).await?;
    let raw_us = per_call_us(raw, calls, runs).await?;
    // The same server with the plugin in process: the MCP path without the worker's round trip
    // (the minimal server's echo is in process too).
    let mut rho_inproc = tokio::process::Command::new(release.join("rho"));
    rho_inproc
        .args(["serve", "--in-process", "--plugins"])
        .arg(&dir);
    let rho_inproc_us = per_call_us(rho_inproc, calls, runs).await?;
    let mut rho_http = tokio::process::Command::new(release.join("rho"));
    rho_http
        .args(["serve", "--http", "127.0.0.1:0", "--plugins"])
        .arg(&dir);
    let mut raw_http = tokio::process::Command::new(release.join("xtask"));
    raw_http.args(["mcp-echo-server", "--http", "127.0.0.1:0"]);
    let rho_http_us = http_per_call_us(rho_http, calls, runs).await?;
    let raw_http_us = http_per_call_us(raw_http, calls, runs).await?;
    let mut streamed = tokio::process::Command::new(release.join("rho"));
    streamed
        .args(["serve", "--http", "127.0.0.1:0", "--plugins"])
        .arg(&dir);
    let (with_16, alone) = page_stream(streamed, calls, runs).await?;
    let oauth = oauth_figure(ctx, &dir, calls).await;
    let policed = policy_figure(&dir, calls, runs).await;
    let _ = std::fs::remove_dir_all(&dir);
    let oauth = oauth?;
    let policed = policed?;
    Ok(vec![
        Figure {
            name: "mcp_call".into(),
            value: rho_us,
            unit: "us/call".into(),
            baseline: "same client, minimal rmcp server with an in-binary echo".into(),
            baseline_value: raw_us,
            runs,
            spread: None,
        },
        Figure {
            name: "mcp_call_inproc".into(),
            value: rho_inproc_us,
            unit: "us/call".into(),
            baseline: "the same minimal rmcp server (`rho serve --in-process`)".into(),
            baseline_value: raw_us,
            runs,
            spread: None,
        },
        Figure {
            name: "page_stream_16".into(),
            value: with_16,
            unit: "events/s".into(),
            baseline: "the same calls' events per second with no subscriber".into(),
            baseline_value: alone,
            runs,
            spread: None,
        },
        Figure {
            name: "mcp_http_call".into(),
            value: rho_http_us,
            unit: "us/call".into(),
            baseline: "same keep-alive HTTP client, minimal rmcp HTTP server (axum) with an in-binary echo".into(),
            baseline_value: raw_http_us,
            runs,
            spread: None,
        },
        oauth,
        policed,
    ])
}

/// `rho serve --http` on a free port over the plugins of `dir`, taking the token of `token_file`.
fn token_server(token_file: &std::path::Path, dir: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(target_dir().join("release").join("rho"));
    command
        .args(["serve", "--http", "127.0.0.1:0", "--token-file"])
        .arg(token_file)
        .arg("--plugins")
        .arg(dir);
    command
}

/// Writes `text` to a new owner-only file at `path` (a token file).
fn owner_only(path: &std::path::Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// `mcp_http_policy_100`: `rho serve --http` with a token file and the 100-policy set against
/// the same server without it, measured in pairs.
async fn policy_figure(dir: &std::path::Path, calls: usize, runs: usize) -> Result<Figure, String> {
    let policy = dir.join("bench.cedar");
    std::fs::write(&policy, super::policy::hundred_policies()).map_err(|e| e.to_string())?;
    let token = "a-static-token-of-the-benchmark";
    let token_file = dir.join("policy-token");
    owner_only(&token_file, token)?;
    let mut policed = token_server(&token_file, dir);
    policed.arg("--policy").arg(&policy);
    let (mut with, mut without) = paired_http_per_call_us(
        (policed, token),
        (token_server(&token_file, dir), token),
        calls,
        runs,
    )
    .await?;
    Ok(Figure::paired(
        "mcp_http_policy_100",
        "us/call",
        "the same server with no policy, in pairs of runs",
        &mut with,
        &mut without,
    ))
}
