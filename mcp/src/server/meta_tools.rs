//! The meta-tools of `rho serve` (`[serve] meta_tools = true` or `--meta-tools`), for clients that
//! read the tool list once and never again (they ignore `tools/list_changed`): besides the tools
//! themselves, the list holds
//!
//! - `rho_find_tools` `{query?, limit?}`: the tools as they are *now* (after any reload, without
//!   quarantined ones) whose name, title or description hold every word of `query` (no case),
//!   name matches first; each with its name, title, description, input schema and hints. A view
//!   of the list, like `tools/list`: it runs no plugin and makes no event.
//! - `rho_call_tool` `{name, arguments?}`: calls the tool `name` with `arguments` exactly as a
//!   direct call would (same gate rules, on the tool's own name and hints; same timeout, events,
//!   outcome). It cannot call a meta-tool.
//!
//! With the switch on, a plugin tool named like a meta-tool is hidden (the meta-tool answers).

use std::sync::Arc;

use rho_runtime::{Outcome, ToolResult};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

/// The name of the tool that searches the current tool list.
pub const FIND: &str = "rho_find_tools";
/// The name of the tool that calls a tool by name.
pub const CALL: &str = "rho_call_tool";

/// How many tools `rho_find_tools` answers at most by default, and at all.
const DEFAULT_LIMIT: u64 = 20;
const MAX_LIMIT: u64 = 200;

/// Whether `name` is a meta-tool's.
pub fn is_meta(name: &str) -> bool {
    name == FIND || name == CALL
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::default(),
    }
}

/// The two meta-tools as MCP lists them.
pub fn tools() -> [Tool; 2] {
    let find = Tool::new(
        FIND,
        "Search the tools available now (the list may have changed since it was first read): \
         every tool whose name, title or description holds all words of `query`, with its input \
         schema. Call one with rho_call_tool.",
        schema(json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for; empty: every tool."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                          "description": "At most this many tools (default 20)."}
            },
            "additionalProperties": false
        })),
    )
    .with_title("Find tools")
    .with_annotations(
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    );
    let call = Tool::new(
        CALL,
        "Call a tool by name with its arguments, as found by rho_find_tools (for tools that are \
         not in the list this client read).",
        schema(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name."},
                "arguments": {"type": "object", "description": "Its arguments, per its input schema."}
            },
            "required": ["name"],
            "additionalProperties": false
        })),
    )
    .with_title("Call a tool by name")
    // It may call any tool: MCP's cautious defaults.
    .with_annotations(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
    );
    [find, call]
}

/// A meta-tool refused its arguments: an error result (`invalid_arguments`) the model reads, in
/// the shape of every other result.
fn refused(tool: &str, text: String) -> CallToolResult {
    let result = ToolResult::failed("", tool, Outcome::InvalidArguments, text);
    crate::convert::mcp_result(&result, usize::MAX)
}

/// `rho_find_tools`: the matching tools among `tools` (the listed ones, quarantined ones left
/// out), as structured content `{tools: [...]}` with its JSON as text.
pub fn find(tools: &[Tool], arguments: &Map<String, Value>) -> CallToolResult {
    let query = match arguments.get("query") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(query)) => query.to_lowercase(),
        Some(_) => return refused(FIND, format!("{FIND}: `query` must be a string")),
    };
    if let Some(unknown) = arguments.keys().find(|k| *k != "query" && *k != "limit") {
        return refused(FIND, format!("{FIND}: unknown argument `{unknown}`"));
    }
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(value) => match value.as_u64() {
            Some(n @ 1..=MAX_LIMIT) => n,
            _ => {
                return refused(
                    FIND,
                    format!("{FIND}: `limit` must be an integer from 1 to {MAX_LIMIT}"),
                );
            }
        },
    };
    let words: Vec<&str> = query.split_whitespace().collect();
    let mut found: Vec<(usize, &Tool)> = tools
        .iter()
        .filter(|t| !is_meta(&t.name))
        .filter_map(|tool| {
            let name = tool.name.to_lowercase();
            let text = format!(
                "{name} {} {}",
                tool.title.as_deref().unwrap_or_default().to_lowercase(),
                tool.description
                    .as_deref()
                    .unwrap_or_default()
                    .to_lowercase()
            );
            words.iter().all(|w| text.contains(w)).then(|| {
                let in_name = words.iter().filter(|w| name.contains(**w)).count();
                (in_name, tool)
            })
        })
        .collect();
    found.sort_by(|(a, ta), (b, tb)| b.cmp(a).then_with(|| ta.name.cmp(&tb.name)));
    let total = found.len();
    let listed: Vec<Value> = found
        .into_iter()
        .take(limit as usize)
        .map(|(_, tool)| {
            json!({
                "name": tool.name,
                "title": tool.title,
                "description": tool.description,
                "inputSchema": tool.input_schema,
                "annotations": tool.annotations,
            })
        })
        .collect();
    CallToolResult::structured(json!({ "tools": listed, "total": total }))
}

/// `rho_call_tool`'s request as the call of the tool it names, or why it cannot be.
pub fn unwrap_call(
    mut request: CallToolRequestParams,
) -> Result<CallToolRequestParams, Box<CallToolResult>> {
    let refused = |tool: &str, text: String| Box::new(refused(tool, text));
    let mut arguments = request.arguments.take().unwrap_or_default();
    let name = match arguments.remove("name") {
        Some(Value::String(name)) => name,
        _ => {
            return Err(refused(
                CALL,
                format!("{CALL}: `name` (a string) is required"),
            ));
        }
    };
    if is_meta(&name) {
        return Err(refused(
            CALL,
            format!("{CALL}: `{name}` is a meta-tool; call it directly"),
        ));
    }
    let inner = match arguments.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(refused(
                CALL,
                format!("{CALL}: `arguments` must be an object"),
            ));
        }
    };
    if let Some(unknown) = arguments.keys().next() {
        return Err(refused(
            CALL,
            format!("{CALL}: unknown argument `{unknown}`"),
        ));
    }
    request.name = name.into();
    request.arguments = Some(inner);
    Ok(request)
}
