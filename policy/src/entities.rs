//! A [`PolicyQuery`] as Cedar reads it: the request (principal, action, tool, context) and the
//! entities it names, shaped as `rho.cedarschema` says.

use std::str::FromStr;

use cedar_policy::{
    Context, Entities, Entity, EntityId, EntityTypeName, EntityUid, Request, RestrictedExpression,
};
use rho_runtime::{Origin, PolicyAction, PolicyQuery, Principal, source_name};
use serde_json::Value;

/// The principal of the host's own calls.
pub(crate) const HOST: &str = "host";

fn uid(kind: &str, id: &str) -> Result<EntityUid, String> {
    let kind = EntityTypeName::from_str(kind).map_err(|e| e.to_string())?;
    Ok(EntityUid::from_type_name_and_id(kind, EntityId::new(id)))
}

/// The entity of the tool called `name`.
pub(crate) fn tool_uid(name: &str) -> Result<EntityUid, String> {
    uid("Rho::Tool", name)
}

/// The entity of principal `id`.
pub(crate) fn principal_uid(id: &str) -> Result<EntityUid, String> {
    uid("Rho::Principal", id)
}

fn text(value: impl Into<String>) -> RestrictedExpression {
    RestrictedExpression::new_string(value.into())
}

/// A JSON value as a tag: a string as it is, anything else as its JSON text.
fn tag(value: &Value) -> RestrictedExpression {
    match value {
        Value::String(s) => text(s.clone()),
        other => text(other.to_string()),
    }
}

/// An argument as a tag's text: a string as it is, anything else as its JSON text; but an
/// absolute path (a string starting with `/`) as the path it names, its `.`, `..` and repeated
/// `/` resolved, so that `like "/srv/docs/*"` cannot be passed by `/srv/docs/../../etc/passwd`
/// (links are the sandbox's to confine, not a policy's).
pub(crate) fn argument_text(value: &Value) -> String {
    match value {
        Value::String(s) if s.starts_with('/') => lexical_path(s),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `path` (absolute) with its `.`, `..` and empty segments resolved; `..` at the root stays at
/// the root. A trailing `/` is kept.
pub(crate) fn lexical_path(path: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            other => kept.push(other),
        }
    }
    let mut resolved = format!("/{}", kept.join("/"));
    let ends_as_dir = path.ends_with('/') || path.ends_with("/.") || path.ends_with("/..");
    if ends_as_dir && resolved != "/" {
        resolved.push('/');
    }
    resolved
}

fn principal_entity(principal: Option<&Principal>) -> Result<Entity, String> {
    let Some(p) = principal else {
        let attrs = [
            ("id".to_owned(), text(HOST)),
            ("auth".to_owned(), text(HOST)),
            ("issuer".to_owned(), text("")),
            ("scopes".to_owned(), RestrictedExpression::new_set([])),
        ];
        return Entity::new_with_tags(principal_uid(HOST)?, attrs, [], [])
            .map_err(|e| e.to_string());
    };
    let auth = match serde_json::to_value(p.auth) {
        Ok(Value::String(auth)) => auth,
        _ => p.auth.as_str().to_owned(),
    };
    let attrs = [
        ("id".to_owned(), text(p.id.clone())),
        ("auth".to_owned(), text(auth)),
        (
            "issuer".to_owned(),
            text(p.issuer.clone().unwrap_or_default()),
        ),
        (
            "scopes".to_owned(),
            RestrictedExpression::new_set(p.scopes.iter().map(|s| text(s.clone()))),
        ),
    ];
    let groups: Vec<EntityUid> = match p.claims.get("groups") {
        Some(Value::Array(groups)) => groups
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|g| uid("Rho::Group", g).ok())
            .collect(),
        Some(Value::String(group)) => uid("Rho::Group", group).into_iter().collect(),
        _ => Vec::new(),
    };
    let tags = p.claims.iter().map(|(k, v)| (k.clone(), tag(v)));
    Entity::new_with_tags(principal_uid(&p.id)?, attrs, groups, tags).map_err(|e| e.to_string())
}

fn tool_entity(query: &PolicyQuery<'_>) -> Result<Entity, String> {
    let spec = query.tool;
    let kind = match query.origin {
        Origin::Host => "host",
        Origin::Plugin { .. } => "plugin",
        Origin::Remote { .. } => "remote",
    };
    let hints = &spec.hints;
    let attrs = [
        ("name".to_owned(), text(spec.name.clone())),
        (
            "title".to_owned(),
            text(spec.title.clone().unwrap_or_default()),
        ),
        ("source_kind".to_owned(), text(kind)),
        ("source".to_owned(), text(source_name(query.origin))),
        (
            "plugin".to_owned(),
            text(spec.plugin.clone().unwrap_or_default()),
        ),
        (
            "version".to_owned(),
            text(spec.plugin_version.clone().unwrap_or_default()),
        ),
        (
            "read_only".to_owned(),
            RestrictedExpression::new_bool(hints.read_only),
        ),
        (
            "destructive".to_owned(),
            RestrictedExpression::new_bool(hints.destructive),
        ),
        (
            "idempotent".to_owned(),
            RestrictedExpression::new_bool(hints.idempotent),
        ),
        (
            "open_world".to_owned(),
            RestrictedExpression::new_bool(hints.open_world),
        ),
    ];
    Entity::new_with_tags(tool_uid(&spec.name)?, attrs, [], []).map_err(|e| e.to_string())
}

/// The request and entities of `query`. `Err`: a name Cedar cannot hold (never for names rho
/// accepts), said in a line.
pub(crate) fn request(query: &PolicyQuery<'_>) -> Result<(Request, Entities), String> {
    let principal = principal_entity(query.principal)?;
    let tool = tool_entity(query)?;
    let action = uid("Rho::Action", query.action.as_str())?;
    let mut context = vec![("transport".to_owned(), text(query.via.as_str()))];
    let mut entities = vec![principal.clone(), tool.clone()];
    if query.action == PolicyAction::Call {
        let arguments_uid = uid("Rho::Arguments", "call")?;
        let tags: Vec<(String, RestrictedExpression)> = match query.arguments {
            Some(Value::Object(arguments)) => arguments
                .iter()
                .map(|(k, v)| (k.clone(), text(argument_text(v))))
                .collect(),
            _ => Vec::new(),
        };
        let arguments = Entity::new_with_tags(arguments_uid.clone(), [], [], tags)
            .map_err(|e| e.to_string())?;
        entities.push(arguments);
        context.push((
            "arguments".to_owned(),
            RestrictedExpression::new_entity_uid(arguments_uid),
        ));
    }
    let context = Context::from_pairs(context).map_err(|e| e.to_string())?;
    let request = Request::new(principal.uid(), action, tool.uid(), context, None)
        .map_err(|e| e.to_string())?;
    let entities = Entities::from_entities(entities, None).map_err(|e| e.to_string())?;
    Ok((request, entities))
}

#[cfg(test)]
mod tests {
    use super::lexical_path;

    #[test]
    fn absolute_paths_are_resolved_as_named() {
        for (given, resolved) in [
            ("/srv/docs/a.txt", "/srv/docs/a.txt"),
            ("/srv/docs/../../etc/passwd", "/etc/passwd"),
            ("/srv//docs/./a", "/srv/docs/a"),
            ("/../../etc", "/etc"),
            ("/srv/docs/", "/srv/docs/"),
            ("/srv/docs/x/..", "/srv/docs/"),
            ("/", "/"),
        ] {
            assert_eq!(lexical_path(given), resolved, "{given}");
        }
    }
}
