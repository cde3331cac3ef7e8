//! How results and events look for a person, and as JSON.

use rho_runtime::{Event, EventKind, OutputView};
use rho_runtime::{Output, ToolResult};
use serde_json::{Value, json};

/// `rho call --json`: {"outcome", "text", "images": [{"mime_type", "bytes", "sha256"}],
/// "details", "duration_ms"}, and for an answer of blocks "content": its audio, resources and
/// links summarized in order, as events show them.
pub fn result_json(result: &ToolResult) -> Value {
    // One view of the output: its images hashed once, its other content summarized.
    let view = OutputView::from(&result.output);
    let mut value = json!({
        "outcome": result.outcome,
        "text": result.text(),
        "images": view.images,
        "details": result.details,
        "duration_ms": result.duration.as_secs_f64() * 1000.0,
    });
    // Only when there: other content, structured content, and the whole text of a result cut
    // at its limit.
    if !view.content.is_empty() {
        value["content"] = json!(view.content);
    }
    if let Some(structured) = &result.structured {
        value["structured"] = structured.clone();
    }
    if let Some(full_text) = &result.full_text {
        value["full_text"] = Value::String(full_text.clone());
    }
    value
}

/// `text: string, size?: integer` from a JSON Schema object: the required arguments first, `?`
/// marking the optional ones.
pub fn parameters_summary(schema: &Value) -> String {
    parameters(schema)
        .iter()
        .map(|p| {
            let mark = if p.required { "" } else { "?" };
            format!("{}{mark}: {}", p.name, p.ty)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One argument of a tool, as `rho tools` shows it.
pub struct Parameter {
    /// Its name.
    pub name: String,
    /// Its JSON Schema type (`string`, `integer | null`, `any`).
    pub ty: String,
    /// Whether the schema requires it.
    pub required: bool,
    /// Its description, if the schema gives one.
    pub description: Option<String>,
    /// Its default, as JSON, if the schema gives one.
    pub default: Option<String>,
}

/// The arguments a JSON Schema object declares: the required ones first, each group by name.
pub fn parameters(schema: &Value) -> Vec<Parameter> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut list: Vec<Parameter> = props
        .iter()
        .map(|(name, p)| Parameter {
            name: name.clone(),
            ty: p.get("type").map(type_name).unwrap_or_else(|| "any".into()),
            required: required.contains(&name.as_str()),
            description: p
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            default: p.get("default").map(Value::to_string),
        })
        .collect();
    list.sort_by_key(|p| !p.required);
    list
}

fn type_name(ty: &Value) -> String {
    match ty {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        other => other.to_string(),
    }
}

/// `text` safe for a terminal: control characters other than newline and tab (escape sequences
/// that move the cursor, set the title or the clipboard) shown escaped, never sent as they are.
/// Plugin text is untrusted.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// At most `max` characters of `text` on one line, safe for a terminal.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = terminal_safe(text)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}

fn size(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

fn output_summary(output: &OutputView) -> String {
    let mut s = one_line(&output.text, 100);
    if !output.images.is_empty() {
        let images: Vec<String> = output
            .images
            .iter()
            .map(|i| format!("{} {}", i.mime_type, size(i.bytes)))
            .collect();
        s.push_str(&format!(
            " [{} image(s): {}]",
            images.len(),
            images.join(", ")
        ));
    }
    s
}

fn details_summary(details: &Option<Value>) -> String {
    match details {
        None => String::new(),
        Some(Value::Object(map)) => {
            let fields: Vec<String> = map
                .iter()
                .take(6)
                .map(|(k, v)| format!("{k}={}", one_line(&v.to_string(), 30)))
                .collect();
            format!(" {{{}}}", fields.join(" "))
        }
        Some(other) => format!(" {{{}}}", one_line(&other.to_string(), 60)),
    }
}

/// How much of the stream a view shows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Assistant messages and ended calls (what `rho run` prints).
    Calls,
    /// Every event (what `rho watch` prints).
    All,
}

/// Now, in Unix milliseconds (0 before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn clock(ts_ms: u64) -> String {
    let secs = ts_ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60,
        ts_ms % 1000
    )
}

/// A tool's quarantine as the views show it at `now_ms` (Unix milliseconds): empty when it
/// serves, `probing` while a call probes it, `QUARANTINED, probe in 95 s` while it cools down,
/// `QUARANTINED` when no cool-down ends it.
pub fn quarantine_state(tool: &rho_runtime::ToolStats, now_ms: u64) -> String {
    match (&tool.quarantine, tool.probing, tool.probe_after_ms) {
        (None, ..) => String::new(),
        (Some(_), true, _) => "probing".into(),
        (Some(_), false, Some(at)) if at > now_ms => {
            format!("QUARANTINED, probe in {} s", (at - now_ms).div_ceil(1000))
        }
        (Some(_), false, Some(_)) => "QUARANTINED, next call probes".into(),
        (Some(_), false, None) => "QUARANTINED".into(),
    }
}

/// The count line at the end of a session: `12 calls: 3 ok, 1 error, ...`, every outcome that
/// occurred, in `Outcome::ALL`'s order.
pub fn outcome_counts(ended: &[rho_runtime::Outcome]) -> String {
    let counts: Vec<String> = rho_runtime::Outcome::ALL
        .iter()
        .filter_map(|o| {
            let n = ended.iter().filter(|e| *e == o).count();
            (n > 0).then(|| format!("{n} {o}"))
        })
        .collect();
    let calls = if ended.len() == 1 { "call" } else { "calls" };
    format!("{} {calls}: {}", ended.len(), counts.join(", "))
}

/// A build's short identity: the first 8 hex digits of its SHA-256 (`?` when unknown).
pub fn build(sha256: &str) -> &str {
    match sha256.get(..8) {
        Some(prefix) if !prefix.is_empty() => prefix,
        _ => "?",
    }
}

/// ` (allowed by policy `x`)` for a call a policy let through; nothing otherwise (a refused
/// call's text says its decision).
pub fn decision_note(decision: Option<&rho_runtime::Decision>) -> String {
    match decision {
        Some(decision) if decision.allows() && !decision.policies().is_empty() => {
            format!(" ({decision})")
        }
        _ => String::new(),
    }
}

/// One line for a person, or `None` for events this view does not show.
pub fn event_line(event: &Event, detail: Detail) -> Option<String> {
    let all = detail == Detail::All;
    let body = match &event.kind {
        EventKind::ToolExecutionEnd {
            call_id,
            tool,
            outcome,
            output,
            details,
            duration_ms,
            decision,
            ..
        } => {
            let mark = if outcome.is_error() { "!!" } else { "ok" };
            format!(
                "{mark} {tool} #{call_id} {outcome} {duration_ms:.1} ms{}: {}{}",
                decision_note(decision.as_ref()),
                output_summary(output),
                details_summary(details)
            )
        }
        EventKind::MessageEnd {
            role,
            text,
            tool_calls,
        } => {
            let calls: Vec<String> = tool_calls
                .iter()
                .map(|c| format!("{}#{}", c.name, c.id))
                .collect();
            let calls = if calls.is_empty() {
                String::new()
            } else {
                format!(" -> {}", calls.join(", "))
            };
            format!("{role}: {}{calls}", one_line(text, 120))
        }
        _ if !all => return None,
        EventKind::AgentStart {} => "session started".into(),
        EventKind::AgentEnd { turns, reason } => {
            format!("session ended after {turns} turn(s): {reason}")
        }
        EventKind::TurnStart { turn } => format!("turn {turn}"),
        EventKind::TurnEnd { turn, tool_calls } => {
            format!("turn {turn} done ({tool_calls} call(s))")
        }
        EventKind::ToolExecutionStart {
            call_id,
            tool,
            args,
            principal,
            ..
        } => {
            let by = match principal.as_deref() {
                Some(p) if p.auth != rho_runtime::AuthMethod::Local => format!(" by {}", p.id),
                _ => String::new(),
            };
            format!(
                "-> {tool} #{call_id}{by} {}",
                one_line(&args.to_string(), 100)
            )
        }
        EventKind::ToolGateWaiting { call_id, tool } => {
            format!(".. {tool} #{call_id} waiting for approval")
        }
        EventKind::ToolRunning {
            call_id,
            tool,
            timeout_ms,
        } => {
            format!(".. {tool} #{call_id} running (timeout {timeout_ms} ms)")
        }
        EventKind::ToolExecutionUpdate {
            call_id,
            tool,
            partial,
        } => {
            format!(".. {tool} #{call_id} update: {}", one_line(partial, 100))
        }
        EventKind::ToolExecutionLog {
            call_id,
            tool,
            level,
            message,
        } => {
            format!(".. {tool} #{call_id} {level}: {}", one_line(message, 100))
        }
        EventKind::PluginLoaded {
            plugin,
            version,
            tools,
            isolated,
            sha256,
            ..
        } => format!(
            "plugin {plugin}@{version} ({}) loaded{}: {}",
            build(sha256),
            if *isolated { " (isolated)" } else { "" },
            tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        EventKind::PluginLoadFailed { error, .. } => format!("plugin load failed: {error}"),
        EventKind::PluginReloaded {
            plugin,
            old_version,
            new_version,
            old_sha256,
            new_sha256,
            tools_added,
            tools_removed,
            ..
        } => {
            let mut s = format!(
                "plugin {plugin} reloaded {old_version} ({}) -> {new_version} ({})",
                build(old_sha256),
                build(new_sha256)
            );
            if !tools_added.is_empty() {
                s.push_str(&format!(", added {}", tools_added.join(", ")));
            }
            if !tools_removed.is_empty() {
                s.push_str(&format!(", removed {}", tools_removed.join(", ")));
            }
            s
        }
        EventKind::PluginRemoved { plugin, tools, .. } => {
            format!("plugin {plugin} removed, tools gone: {}", tools.join(", "))
        }
        EventKind::ToolNameConflict {
            tool,
            kept,
            ignored,
        } => {
            format!("tool name conflict: `{tool}` served by {kept}, {ignored} ignored")
        }
        EventKind::ToolQuarantined {
            reason,
            probe_after_ms,
            ..
        } => match probe_after_ms {
            Some(at) => format!(
                "quarantined: {reason} (a call probes it from {})",
                clock(*at)
            ),
            None => format!("quarantined: {reason}"),
        },
        EventKind::ToolProbing {
            tool,
            origin,
            call_id,
        } => format!("probing `{tool}` ({origin}) with call {call_id}"),
        EventKind::ToolRestored {
            tool,
            origin,
            reason,
        } => format!("restored `{tool}` ({origin}): {reason}"),
        EventKind::Warning { subject, message } => format!("warning ({subject}): {message}"),
        EventKind::AccessRefused {
            status,
            reason,
            peer,
        } => format!("refused {status} from {peer}: {reason}"),
        EventKind::PolicyChanged {
            policy: Some(policy),
        } => format!("policy in force: {policy}"),
        EventKind::PolicyChanged { policy: None } => {
            "no policy in force: everything is allowed".into()
        }
        EventKind::RemoteToolsChanged {
            source,
            added,
            removed,
            ..
        } => {
            let mut s = format!("tools of {source}:");
            if !added.is_empty() {
                s.push_str(&format!(" added {}", added.join(", ")));
            }
            if !removed.is_empty() {
                s.push_str(&format!(" removed {}", removed.join(", ")));
            }
            s
        }
        EventKind::ExportStatus {
            exporter,
            connected,
            confirmed,
            behind,
            reason,
            dropped,
        } => {
            let mut line = match (connected, reason) {
                (false, Some(reason)) => format!(
                    "export to {exporter} interrupted ({reason}): {behind} events waiting, seq {confirmed} confirmed"
                ),
                _ if *behind == 0 => format!("export to {exporter}: caught up at seq {confirmed}"),
                _ => format!(
                    "export to {exporter}: {behind} events behind, seq {confirmed} confirmed"
                ),
            };
            if *dropped > 0 {
                line.push_str(&format!(", {dropped} dropped"));
            }
            line
        }
        EventKind::SourceStateChanged {
            source,
            kind,
            state,
            retry_in_ms,
            message,
        } => {
            let mut s = format!("{source} ({kind}): {state}");
            if let Some(ms) = retry_in_ms {
                s.push_str(&format!(" in {:.1} s", *ms as f64 / 1000.0));
            }
            if !message.is_empty() {
                s.push_str(&format!(": {message}"));
            }
            s
        }
        EventKind::TaskChanged {
            task_id,
            status,
            tool,
            call_id,
            ..
        } => {
            let status = serde_json::to_value(status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("task {task_id} ({tool}, call {call_id}): {status}")
        }
        // A kind newer than this view: its type name says what it is.
        other => other.type_name().to_owned(),
    };
    Some(if all {
        format!("{} {body}", clock(event.ts_ms))
    } else {
        body
    })
}

/// Writes the images of `output` to `dir` as `<call_id>-<n>.<ext>`; returns the paths.
pub fn save_images(
    output: &Output,
    call_id: &str,
    dir: &std::path::Path,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut paths = Vec::new();
    for (n, image) in output.images().iter().enumerate() {
        let ext = image.mime_type.rsplit('/').next().unwrap_or("bin");
        let ext: String = ext.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        let safe_id: String = call_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("{safe_id}-{n}.{ext}"));
        std::fs::write(&path, &image.bytes)?;
        paths.push(path);
    }
    Ok(paths)
}

/// Prints one line on stdout, control sequences escaped (it may carry plugin or journal text);
/// `false` once stdout is gone (a closed pipe), so callers stop.
pub fn print_line(line: &str) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", terminal_safe(line))
        .and_then(|()| out.flush())
        .is_ok()
}
