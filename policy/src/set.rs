//! [`CedarPolicy`]: a Cedar policy set, read, named and validated, as a [`Policy`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use cedar_policy::{
    Authorizer, Decision as CedarDecision, Effect, Policy as CedarRule, PolicyId, PolicySet,
    PrincipalConstraint, ResourceConstraint, Schema, ValidationMode, Validator,
};
use rho_runtime::{Decision, Origin, Policy, PolicyAction, PolicyQuery, Principal, ToolSpec, Via};

use crate::entities::{self, HOST};

/// rho's Cedar schema: the entities, actions and context a policy may name (see the crate
/// docs). Every policy set is validated against it, strictly, before it is used.
pub const SCHEMA: &str = include_str!("rho.cedarschema");

/// Past this many policies that can apply to one call, its decision runs on the blocking pool
/// ([`Policy::never_blocks`]).
const INLINE_POLICIES: usize = 1000;

/// How many principal × tool slices are kept before they are made again.
const MAX_SLICES: usize = 4096;

/// How many decisions are remembered before they are all forgotten.
const MAX_REMEMBERED: usize = 4096;

/// Why a policy set cannot be used. One line naming the file and, where it can, the policy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read.
    #[error("policy file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The text is not Cedar, or names a policy twice.
    #[error("policy file {file}: {message}")]
    Parse {
        /// The file (or the name the text was given).
        file: String,
        /// What is wrong, where.
        message: String,
    },
    /// A policy does not fit rho's schema (an attribute or action that does not exist, a type
    /// that does not match).
    #[error("policy file {file}: policy `{policy}` does not fit rho's schema: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// The policy's id.
        policy: String,
        /// What does not fit.
        message: String,
    },
    /// The file could not be watched.
    #[error("policy file {}: cannot watch it: {message}", path.display())]
    Watch {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// What a principal may do with one tool ([`CedarPolicy::what_may`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTool {
    /// The tool's name.
    pub tool: String,
    /// The decision on listing it.
    pub list: Decision,
    /// The decision on calling it with no arguments.
    pub call: Decision,
}

/// A Cedar policy set in force: each policy named by its `@id` (else `policy0`, `policy1`, ...,
/// in the order of the text), validated against [`SCHEMA`]. Cheap to share; deciding never
/// changes it.
///
/// A call is decided by the policies that can apply to it: those whose scope names neither a
/// principal nor a tool, those naming its tool (`resource == Rho::Tool::"x"`) and those naming
/// its principal. That slice is made once per principal × tool and kept, so a set of many
/// per-tool or per-principal rules costs a call what its few applicable rules cost.
pub struct CedarPolicy {
    name: String,
    count: usize,
    /// The most policies one call's slice can hold.
    largest_slice: usize,
    whole: PolicySet,
    general: Vec<CedarRule>,
    by_tool: HashMap<String, Vec<CedarRule>>,
    by_principal: HashMap<String, Vec<CedarRule>>,
    slices: Mutex<HashMap<(String, String), Arc<Slice>>>,
    remembered: Mutex<Remembered>,
    authorizer: Authorizer,
}

/// The policies that can apply to one principal × tool.
struct Slice {
    set: PolicySet,
    /// What of a call's arguments they read: a call's decision depends on those alone.
    reads: ArgumentsRead,
}

/// What of `context.arguments` a set of policies reads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ArgumentsRead {
    /// These tags, each named by a literal (`hasTag("path")`, `getTag("path")`): a decision
    /// depends on their values alone (none: on no argument).
    Tags(Vec<String>),
    /// Anything else (a tag named by an expression, the entity itself): every call's own.
    Any,
}

impl ArgumentsRead {
    /// What the policy of `est` (its JSON form) reads, joined to what was read before.
    fn add(self, est: &serde_json::Value) -> ArgumentsRead {
        let ArgumentsRead::Tags(mut tags) = self else {
            return ArgumentsRead::Any;
        };
        if read_tags(est, &mut tags) {
            tags.sort();
            tags.dedup();
            ArgumentsRead::Tags(tags)
        } else {
            ArgumentsRead::Any
        }
    }
}

/// Whether `node` is `context.arguments` in a policy's JSON form.
fn is_arguments(node: &serde_json::Value) -> bool {
    node.get(".").is_some_and(|dot| {
        dot.get("attr").and_then(serde_json::Value::as_str) == Some("arguments")
            && dot
                .get("left")
                .and_then(|l| l.get("Var"))
                .and_then(serde_json::Value::as_str)
                == Some("context")
    })
}

/// Adds to `tags` the argument tags `node` reads by name; `false` when it reads the arguments
/// otherwise, or `context` whole.
fn read_tags(node: &serde_json::Value, tags: &mut Vec<String>) -> bool {
    use serde_json::Value;
    match node {
        Value::Object(map) => {
            if is_arguments(node) {
                return false;
            }
            if map.get("Var").and_then(Value::as_str) == Some("context") {
                return false;
            }
            for op in ["hasTag", "getTag"] {
                if let Some(call) = map.get(op)
                    && call.get("left").is_some_and(is_arguments)
                {
                    return match call.get("right").and_then(|r| r.get("Value")) {
                        Some(Value::String(tag)) => {
                            tags.push(tag.clone());
                            true
                        }
                        _ => false,
                    };
                }
            }
            // `context.transport`: the transport is part of what a decision is remembered by.
            if let Some(dot) = map.get(".")
                && dot
                    .get("left")
                    .and_then(|l| l.get("Var"))
                    .and_then(Value::as_str)
                    == Some("context")
            {
                return true;
            }
            map.values().all(|v| read_tags(v, tags))
        }
        Value::Array(items) => items.iter().all(|v| read_tags(v, tags)),
        _ => true,
    }
}

/// Decisions that depend on nothing but what they are remembered with, by tool name: a
/// decision is a function of the principal, the action, the tool as policies see it and the
/// context, so one whose policies read no arguments is made once.
#[derive(Default)]
struct Remembered {
    by_tool: HashMap<String, Vec<Decided>>,
    count: usize,
}

/// One remembered decision and what it was made on.
struct Decided {
    action: PolicyAction,
    via: Via,
    principal: Option<Principal>,
    origin: Origin,
    title: Option<String>,
    plugin: Option<String>,
    version: Option<String>,
    hints: rho_runtime::plugin_api::declare::ToolHints,
    /// The argument tags its policies read, with the values this call had (`None`: absent).
    arguments: Vec<(String, Option<String>)>,
    decision: Decision,
}

/// The value the policies see of the call's argument `tag`.
fn seen(query: &PolicyQuery<'_>, tag: &str) -> Option<String> {
    query
        .arguments
        .and_then(|a| a.get(tag))
        .map(entities::argument_text)
}

impl Decided {
    fn of(query: &PolicyQuery<'_>, tags: &[String], decision: Decision) -> Decided {
        Decided {
            arguments: tags.iter().map(|t| (t.clone(), seen(query, t))).collect(),
            action: query.action,
            via: query.via,
            principal: query.principal.cloned(),
            origin: query.origin.clone(),
            title: query.tool.title.clone(),
            plugin: query.tool.plugin.clone(),
            version: query.tool.plugin_version.clone(),
            hints: query.tool.hints,
            decision,
        }
    }

    fn answers(&self, query: &PolicyQuery<'_>) -> bool {
        let tool = query.tool;
        self.action == query.action
            && self.via == query.via
            && self.principal.as_ref() == query.principal
            && self.origin == *query.origin
            && self.title == tool.title
            && self.plugin == tool.plugin
            && self.version == tool.plugin_version
            && self.hints == tool.hints
            && (self.arguments.iter()).all(|(tag, value)| seen(query, tag) == *value)
    }
}

impl std::fmt::Debug for CedarPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

fn schema() -> Result<Schema, String> {
    Schema::from_cedarschema_str(SCHEMA)
        .map(|(schema, _warnings)| schema)
        .map_err(|e| e.to_string())
}

/// The first line of `error`'s report, with its cause chain: Cedar's errors span lines.
fn one_line(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string().replace('\n', " ");
    let mut source = error.source();
    while let Some(cause) = source {
        line.push_str(&format!(": {}", cause.to_string().replace('\n', " ")));
        source = cause.source();
    }
    line
}

impl CedarPolicy {
    /// Reads, names and validates the policies of `path`.
    pub fn from_file(path: &Path) -> Result<CedarPolicy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_owned(),
            source,
        })?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        CedarPolicy::from_text(&name, &text)
    }

    /// Parses, names and validates the policies of `text`; `name` names it in errors and in
    /// [`Policy::describe`].
    pub fn from_text(name: &str, text: &str) -> Result<CedarPolicy, PolicyError> {
        let parse = |message: String| PolicyError::Parse {
            file: name.to_owned(),
            message,
        };
        let parsed: PolicySet = text.parse().map_err(|e: cedar_policy::ParseErrors| {
            let first = e
                .iter()
                .next()
                .map_or_else(|| e.to_string(), |e| one_line(e));
            parse(format!("not Cedar: {first}"))
        })?;
        if parsed.templates().next().is_some() {
            return Err(parse(
                "templates (policies with ?principal or ?resource) are not supported".into(),
            ));
        }
        let mut whole = PolicySet::new();
        for policy in parsed.policies() {
            let named = match policy.annotation("id") {
                Some(id) => policy.new_id(PolicyId::new(id)),
                None => policy.clone(),
            };
            let id = named.id().to_string();
            whole
                .add(named)
                .map_err(|_| parse(format!("two policies are named `{id}`")))?;
        }
        let schema = schema().map_err(|message| parse(format!("rho's schema: {message}")))?;
        let validated = Validator::new(schema).validate(&whole, ValidationMode::Strict);
        if let Some(error) = validated.validation_errors().next() {
            return Err(PolicyError::Invalid {
                file: name.to_owned(),
                policy: error.policy_id().to_string(),
                message: one_line(error),
            });
        }
        let mut general = Vec::new();
        let mut by_tool: HashMap<String, Vec<CedarRule>> = HashMap::new();
        let mut by_principal: HashMap<String, Vec<CedarRule>> = HashMap::new();
        for policy in whole.policies() {
            let tool = match policy.resource_constraint() {
                ResourceConstraint::Eq(uid) => Some(uid.id().unescaped().to_owned()),
                _ => None,
            };
            let principal = match policy.principal_constraint() {
                PrincipalConstraint::Eq(uid) => Some(uid.id().unescaped().to_owned()),
                _ => None,
            };
            match (tool, principal) {
                (Some(tool), _) => by_tool.entry(tool).or_default().push(policy.clone()),
                (None, Some(id)) => by_principal.entry(id).or_default().push(policy.clone()),
                (None, None) => general.push(policy.clone()),
            }
        }
        let largest = |buckets: &HashMap<String, Vec<CedarRule>>| {
            buckets.values().map(Vec::len).max().unwrap_or(0)
        };
        Ok(CedarPolicy {
            name: name.to_owned(),
            count: whole.num_of_policies(),
            largest_slice: general.len() + largest(&by_tool) + largest(&by_principal),
            whole,
            general,
            by_tool,
            by_principal,
            slices: Mutex::default(),
            remembered: Mutex::default(),
            authorizer: Authorizer::new(),
        })
    }

    /// How many policies the set holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the set holds no policy (it then forbids everything, as Cedar does).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The ids of its policies, in the order of the text.
    pub fn ids(&self) -> Vec<String> {
        self.whole.policies().map(|p| p.id().to_string()).collect()
    }

    /// The policies that can apply to `principal` calling `tool`.
    fn slice(&self, principal: &str, tool: &str) -> Arc<Slice> {
        let key = (principal.to_owned(), tool.to_owned());
        let mut slices = self.slices.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slice) = slices.get(&key) {
            return slice.clone();
        }
        if slices.len() >= MAX_SLICES {
            slices.clear();
        }
        let rules: Vec<CedarRule> = self
            .general
            .iter()
            .chain(self.by_tool.get(tool).into_iter().flatten())
            .chain(self.by_principal.get(principal).into_iter().flatten())
            .cloned()
            .collect();
        let reads = rules
            .iter()
            .fold(ArgumentsRead::Tags(Vec::new()), |read, rule| {
                match rule.to_json() {
                    Ok(est) => read.add(&est),
                    Err(_) => ArgumentsRead::Any,
                }
            });
        // Ids are unique in the whole set: adding never fails.
        let set = PolicySet::from_policies(rules).unwrap_or_else(|_| self.whole.clone());
        let slice = Arc::new(Slice { set, reads });
        slices.insert(key, slice.clone());
        slice
    }

    /// The decision remembered for `query`, if one is.
    fn recall(&self, query: &PolicyQuery<'_>) -> Option<Decision> {
        let remembered = self
            .remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let decided = remembered.by_tool.get(&query.tool.name)?;
        decided
            .iter()
            .find(|d| d.answers(query))
            .map(|d| d.decision.clone())
    }

    fn remember(&self, query: &PolicyQuery<'_>, tags: &[String], decision: &Decision) {
        let mut remembered = self
            .remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if remembered.count >= MAX_REMEMBERED {
            *remembered = Remembered::default();
        }
        remembered.count += 1;
        (remembered
            .by_tool
            .entry(query.tool.name.clone())
            .or_default())
        .push(Decided::of(query, tags, decision.clone()));
    }

    /// What `principal` may list and call of `tools` (each with its origin), reached by `via`:
    /// for each tool, the decision on listing it and on calling it with no arguments. What
    /// `rho policy check` prints.
    pub fn what_may(
        &self,
        principal: Option<&Principal>,
        tools: &[(ToolSpec, Origin)],
        via: Via,
    ) -> Vec<ListedTool> {
        let no_arguments = serde_json::Value::Object(Default::default());
        tools
            .iter()
            .map(|(spec, origin)| {
                let ask = |action, arguments| {
                    self.decide(&PolicyQuery {
                        action,
                        principal,
                        tool: spec,
                        origin,
                        arguments,
                        via,
                    })
                };
                ListedTool {
                    tool: spec.name.clone(),
                    list: ask(PolicyAction::List, None),
                    call: ask(PolicyAction::Call, Some(&no_arguments)),
                }
            })
            .collect()
    }
}

impl Policy for CedarPolicy {
    fn decide(&self, query: &PolicyQuery<'_>) -> Decision {
        if let Some(decision) = self.recall(query) {
            return decision;
        }
        let (decision, depends_on) = self.decide_now(query);
        if let Some(tags) = depends_on {
            self.remember(query, &tags, &decision);
        }
        decision
    }

    fn never_blocks(&self) -> bool {
        self.largest_slice <= INLINE_POLICIES
    }

    fn describe(&self) -> String {
        match self.count {
            1 => format!("{} (1 policy)", self.name),
            n => format!("{} ({n} policies)", self.name),
        }
    }
}

impl CedarPolicy {
    /// Decides `query` with Cedar; and, when the decision holds for every query like it (see
    /// [`Remembered`]), the argument tags it depends on.
    fn decide_now(&self, query: &PolicyQuery<'_>) -> (Decision, Option<Vec<String>>) {
        let (request, entities) = match entities::request(query) {
            Ok(made) => made,
            Err(message) => {
                tracing::warn!(tool = %query.tool.name, %message, "a call Cedar cannot read: forbidden");
                let forbidden = Decision::Forbidden {
                    policies: Vec::new(),
                };
                return (forbidden, None);
            }
        };
        let principal = query.principal.map_or(HOST, |p| p.id.as_str());
        let slice = self.slice(principal, &query.tool.name);
        let response = self
            .authorizer
            .is_authorized(&request, &slice.set, &entities);
        for error in response.diagnostics().errors() {
            tracing::warn!(policy_file = %self.name, tool = %query.tool.name, error = %error, "a policy failed to evaluate and counts as not matching");
        }
        let mut policies: Vec<String> = response
            .diagnostics()
            .reason()
            .map(ToString::to_string)
            .collect();
        policies.sort();
        let decision = match response.decision() {
            CedarDecision::Allow => Decision::Allowed { policies },
            CedarDecision::Deny => {
                // The forbids that matched (a deny without one: no permit matched).
                policies.retain(|id| {
                    slice
                        .set
                        .policy(&PolicyId::new(id.as_str()))
                        .is_some_and(|p| p.effect() == Effect::Forbid)
                });
                Decision::Forbidden { policies }
            }
        };
        // Made again next time: one some policy failed to evaluate on (so that it is logged each
        // time), and a call's when its policies read the arguments otherwise than by tag names.
        if response.diagnostics().errors().next().is_some() {
            return (decision, None);
        }
        match (&slice.reads, query.action) {
            (_, PolicyAction::List) => (decision, Some(Vec::new())),
            (ArgumentsRead::Tags(tags), PolicyAction::Call) => (decision, Some(tags.clone())),
            (ArgumentsRead::Any, PolicyAction::Call) => (decision, None),
        }
    }
}

/// `[policy]` of `rho.toml`: the file of Cedar policies a host puts in force and reloads.
///
/// ```toml
/// [policy]
/// file = "policy.cedar"   # relative to rho.toml
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// The policy file; none: everything is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
}

impl PolicyConfig {
    /// Makes a relative `file` relative to `base`, the configuration file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        if let Some(file) = &mut self.file {
            rho_runtime::resolve_path(base, file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_runtime::AuthMethod;

    fn query<'a>(
        principal: &'a Principal,
        spec: &'a ToolSpec,
        arguments: &'a serde_json::Value,
    ) -> PolicyQuery<'a> {
        PolicyQuery {
            action: PolicyAction::Call,
            principal: Some(principal),
            tool: spec,
            origin: &Origin::Host,
            arguments: Some(arguments),
            via: Via::Http,
        }
    }

    #[test]
    fn a_decision_is_remembered_only_for_what_it_depends_on() {
        let policy = CedarPolicy::from_text(
            "t.cedar",
            r#"@id("ci-writes") permit(principal, action, resource == Rho::Tool::"write")
                 when { principal.scopes.contains("w") };
               @id("read-only") permit(principal, action, resource) when { resource.read_only };
               @id("docs") permit(principal, action == Rho::Action::"call", resource == Rho::Tool::"read")
                 when { context.arguments.hasTag("path") && context.arguments.getTag("path") like "/docs/*" };"#,
        )
        .unwrap();
        let write = ToolSpec::native("write", "w", serde_json::json!({"type": "object"}));
        let read = ToolSpec::native("read", "r", serde_json::json!({"type": "object"}));
        let none = serde_json::json!({});
        let ci = Principal::new("ci", AuthMethod::StaticToken).with_scopes(["w"]);
        // The same id with other scopes is another principal to a policy.
        let ci_without = Principal::new("ci", AuthMethod::StaticToken);
        for _ in 0..2 {
            assert!(policy.decide(&query(&ci, &write, &none)).allows());
            assert!(!policy.decide(&query(&ci_without, &write, &none)).allows());
        }
        // A tool whose hints changed under the same name is decided again.
        let read_only = write
            .clone()
            .with_hints(rho_runtime::plugin_api::declare::ToolHints {
                read_only: true,
                ..Default::default()
            });
        assert!(!policy.decide(&query(&ci_without, &write, &none)).allows());
        assert!(
            policy
                .decide(&query(&ci_without, &read_only, &none))
                .allows()
        );
        // Decisions that read the arguments are made for each call's own.
        let inside = serde_json::json!({"path": "/docs/a"});
        let outside = serde_json::json!({"path": "/etc/passwd"});
        for _ in 0..2 {
            assert!(policy.decide(&query(&ci, &read, &inside)).allows());
            assert!(!policy.decide(&query(&ci, &read, &outside)).allows());
        }
    }

    #[test]
    fn what_policies_read_of_the_arguments_is_found_in_their_form() {
        let reads = |condition: &str| {
            let text = format!(
                "permit(principal, action == Rho::Action::\"call\", resource) when {{ {condition} }};"
            );
            let set: PolicySet = text.parse().unwrap();
            let policy = set.policies().next().unwrap();
            ArgumentsRead::Tags(Vec::new()).add(&policy.to_json().unwrap())
        };
        let tags =
            |names: &[&str]| ArgumentsRead::Tags(names.iter().map(|n| n.to_string()).collect());
        assert_eq!(reads("true"), tags(&[]));
        assert_eq!(reads("context.transport == \"nats\""), tags(&[]));
        assert_eq!(
            reads(
                "context.arguments.hasTag(\"path\") && context.arguments.getTag(\"path\") like \"/d/*\" && context.arguments.hasTag(\"mode\")"
            ),
            tags(&["mode", "path"])
        );
        assert_eq!(
            reads("context.arguments.hasTag(principal.id)"),
            ArgumentsRead::Any
        );
        assert_eq!(reads("context has arguments"), ArgumentsRead::Any);
    }
}
