//! `rho watch --attach http://HOST:PORT`: a host's events over HTTP (`rho serve --http`'s
//! `/events` stream of Server-Sent Events). On a dropped connection it reconnects with the last
//! seq it showed (`Last-Event-ID`), so it shows every event once; a server that restarted starts
//! a new run, followed from its start.

use std::process::ExitCode;
use std::time::Duration;

use rho_runtime::Event;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::display::Display;

/// The longest SSE line (one event's JSON) read.
const MAX_LINE: usize = 64 << 20;

/// Why a connection ended.
enum Ended {
    /// Ctrl-C, or the display is done.
    Stop,
    /// Reconnect (the connection dropped or failed): the line says why.
    Retry(String),
    /// Give up: the server refused us.
    Refused(String),
}

/// Follows `authority`'s events until Ctrl-C.
pub async fn follow(authority: &str, token: Option<&str>, mut display: Display) -> ExitCode {
    let mut last = Last::default();
    let mut tick = display.ticker();
    let stop = crate::signals::stopped();
    tokio::pin!(stop);
    let mut quiet_retries = 0u32;
    loop {
        let ended = tokio::select! {
            ended = stream(authority, token, &mut last, &mut display, &mut tick) => ended,
            _ = &mut stop => Ended::Stop,
        };
        match ended {
            Ended::Stop => {
                display.finish();
                return ExitCode::SUCCESS;
            }
            Ended::Refused(why) => {
                let line = format!("rho: {authority}: {why}");
                eprintln!("{}", crate::render::terminal_safe(&line));
                return ExitCode::from(1);
            }
            Ended::Retry(why) => {
                if quiet_retries == 0 {
                    let line = format!("rho: {authority}: {why}; reconnecting");
                    eprintln!("{}", crate::render::terminal_safe(&line));
                }
                quiet_retries = (quiet_retries + 1) % 20;
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(250)) => {}
                    _ = &mut stop => {
                        display.finish();
                        return ExitCode::SUCCESS;
                    }
                }
            }
        }
    }
}

/// The last event shown: its id (`RUN-SEQ`, sent back on a reconnect) and run.
#[derive(Default)]
struct Last {
    id: String,
    run: String,
}

/// One connection: the request, the head, then events until it drops.
async fn stream(
    authority: &str,
    token: Option<&str>,
    last: &mut Last,
    display: &mut Display,
    tick: &mut tokio::time::Interval,
) -> Ended {
    let mut socket = match tokio::net::TcpStream::connect(authority).await {
        Ok(socket) => socket,
        Err(e) => return Ended::Retry(format!("cannot connect ({e})")),
    };
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET /events HTTP/1.1\r\nHost: {authority}\r\nAccept: text/event-stream\r\n\
         Last-Event-ID: {}\r\n{auth}Connection: close\r\n\r\n",
        if last.id.is_empty() { "0" } else { &last.id }
    );
    if let Err(e) = socket.write_all(request.as_bytes()).await {
        return Ended::Retry(format!("cannot send the request ({e})"));
    }
    let mut reader = BufReader::new(socket);
    let mut head = String::new();
    let mut chunked = false;
    loop {
        head.clear();
        match (&mut reader).take(16 << 10).read_line(&mut head).await {
            Ok(0) | Err(_) => return Ended::Retry("the connection closed".into()),
            Ok(_) => {}
        }
        let line = head.trim_end();
        if let Some(status) = line.strip_prefix("HTTP/1.1 ") {
            match status.split(' ').next() {
                Some("200") => {}
                Some("401") => {
                    return Ended::Refused("a bearer token is required (--token-file)".into());
                }
                _ => return Ended::Refused(format!("the server answered {status}")),
            }
        } else if line
            .to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
        {
            chunked = true;
        } else if line.is_empty() {
            break;
        }
    }
    let mut body = Body {
        reader,
        chunked,
        left: 0,
    };
    let mut data = String::new();
    let mut id = String::new();
    loop {
        let line = tokio::select! {
            line = body.line() => line,
            _ = tick.tick() => {
                display.tick();
                continue;
            }
        };
        let Some(line) = line else {
            return Ended::Retry("the server closed the stream".into());
        };
        if let Some(value) = line.strip_prefix("id:") {
            id = value.trim().to_owned();
        } else if let Some(value) = line.strip_prefix("data:") {
            if data.len() + value.len() > MAX_LINE {
                return Ended::Retry("an event of more than 64 MiB".into());
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        } else if line.is_empty() && !data.is_empty() {
            if let Ok(event) = serde_json::from_str::<Event>(&data) {
                let run = id.split_once('-').map(|(run, _)| run).unwrap_or_default();
                if !last.run.is_empty() && run != last.run {
                    eprintln!("rho: the server restarted; following its new run from its start");
                }
                last.run = run.to_owned();
                last.id = std::mem::take(&mut id);
                if !display.show(&event) {
                    return Ended::Stop;
                }
            }
            data.clear();
        }
    }
}

/// An HTTP/1.1 body read line by line, through chunked transfer encoding when the server uses it.
struct Body {
    reader: BufReader<tokio::net::TcpStream>,
    chunked: bool,
    /// Bytes left in the current chunk.
    left: usize,
}

impl Body {
    /// The next line (without its end), `None` at the end of the body or on an error.
    async fn line(&mut self) -> Option<String> {
        let mut line = Vec::new();
        loop {
            let byte = self.byte().await?;
            if byte == b'\n' {
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return String::from_utf8(line).ok();
            }
            if line.len() >= MAX_LINE {
                return None;
            }
            line.push(byte);
        }
    }

    async fn byte(&mut self) -> Option<u8> {
        if self.chunked && self.left == 0 {
            let mut size = String::new();
            loop {
                size.clear();
                let n = (&mut self.reader)
                    .take(1024)
                    .read_line(&mut size)
                    .await
                    .ok()?;
                if n == 0 {
                    return None;
                }
                if !size.trim().is_empty() {
                    break;
                }
            }
            let hex = size.trim().split(';').next().unwrap_or_default();
            self.left = usize::from_str_radix(hex, 16).ok()?;
            if self.left == 0 {
                return None;
            }
        }
        let byte = self.reader.read_u8().await.ok()?;
        if self.chunked {
            self.left -= 1;
        }
        Some(byte)
    }
}
