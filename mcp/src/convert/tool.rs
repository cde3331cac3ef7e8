//! A tool in both directions: a [`ToolSpec`] as `tools/list` shows it, and a server's listed
//! tool as a [`ToolSpec`].

use std::sync::Arc;

use rho_runtime::{ToolHints, ToolSpec};
use rmcp::model::{Tool, ToolAnnotations};
use serde_json::Value;

use crate::source::ToolOverride;

/// A tool as MCP lists it: every hint stated (a tool that declares none gets MCP's cautious
/// defaults, stated too: clients treat a missing annotation as unknown), its title and, for a tool
/// that answers structured data, its output schema.
pub fn mcp_tool(spec: &ToolSpec) -> Tool {
    let object = |schema: &Value| match schema {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    let hints = spec.hints;
    let mut annotations = ToolAnnotations::new()
        .read_only(hints.read_only)
        .destructive(hints.destructive)
        .idempotent(hints.idempotent)
        .open_world(hints.open_world);
    annotations.title = spec.title.clone();
    let mut tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(object(&spec.parameters)),
    )
    .with_annotations(annotations);
    if let Some(title) = &spec.title {
        tool = tool.with_title(title.clone());
    }
    if let Some(schema) = &spec.output_schema {
        tool = tool.with_raw_output_schema(Arc::new(object(schema)));
    }
    tool
}

/// `tool` of server `server` as rho lists it (its origin `mcp:SERVER`): MCP's cautious defaults
/// for the hints it leaves out, then the entry's overrides (hints, title, timeouts).
pub fn tool_spec(server: &str, tool: &Tool, over: Option<&ToolOverride>) -> ToolSpec {
    let defaults = ToolHints::default();
    let annotations = tool.annotations.as_ref();
    let hint = |get: fn(&ToolAnnotations) -> Option<bool>, default: bool| {
        annotations.and_then(get).unwrap_or(default)
    };
    let mut hints = ToolHints {
        read_only: hint(|a| a.read_only_hint, defaults.read_only),
        destructive: hint(|a| a.destructive_hint, defaults.destructive),
        idempotent: hint(|a| a.idempotent_hint, defaults.idempotent),
        open_world: hint(|a| a.open_world_hint, defaults.open_world),
    };
    let mut title = tool
        .title
        .clone()
        .or_else(|| annotations.and_then(|a| a.title.clone()));
    let (mut timeout_ms, mut idle_timeout_ms) = (None, None);
    if let Some(over) = over {
        hints.read_only = over.read_only.unwrap_or(hints.read_only);
        hints.destructive = over.destructive.unwrap_or(hints.destructive);
        hints.idempotent = over.idempotent.unwrap_or(hints.idempotent);
        hints.open_world = over.open_world.unwrap_or(hints.open_world);
        title = over.title.clone().or(title);
        timeout_ms = over.timeout_ms;
        idle_timeout_ms = over.idle_timeout_ms;
    }
    ToolSpec {
        name: tool.name.to_string(),
        title,
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        parameters: Value::Object((*tool.input_schema).clone()),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|schema| Value::Object((**schema).clone())),
        hints,
        max_result_bytes: None,
        timeout_ms,
        idle_timeout_ms,
        // A server's own tasks are not relayed: rho calls it within one request, and runs the
        // call as a task of its own when the host's threshold says the tool is long.
        task_support: Default::default(),
        asks_first: false,
        plugin: Some(format!("mcp:{server}")),
        plugin_version: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What MCP carries of a tool comes back as it went: name, title, description, both
    /// schemas and all four hints.
    #[test]
    fn a_tool_round_trips() {
        let mut spec = ToolSpec::native(
            "read_text_file",
            "Reads a file.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        )
        .with_hints(ToolHints {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        });
        spec.title = Some("Read a text file".into());
        spec.output_schema =
            Some(json!({"type": "object", "properties": {"content": {"type": "string"}}}));
        spec.plugin = Some("mcp:files".into());
        assert_eq!(tool_spec("files", &mcp_tool(&spec), None), spec);
    }

    /// A tool that states no hints reads MCP's cautious defaults, and states them when listed.
    #[test]
    fn missing_hints_are_the_cautious_defaults_both_ways() {
        let bare = Tool::new("t", "d", Arc::new(serde_json::Map::new()));
        let spec = tool_spec("s", &bare, None);
        assert_eq!(spec.hints, ToolHints::default());
        let listed = mcp_tool(&spec);
        let annotations = listed.annotations.expect("annotations stated");
        assert_eq!(annotations.destructive_hint, Some(true));
        assert_eq!(annotations.open_world_hint, Some(true));
    }
}
