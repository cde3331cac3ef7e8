//! rho's policies in [Cedar](https://www.cedarpolicy.com): who may list and call which tool.
//!
//! A [`CedarPolicy`] is a policy set read from a file (or text), each policy named by its
//! `@id("...")` annotation, validated against rho's schema ([`SCHEMA`]) before it is used; it is
//! a [`rho_runtime::Policy`], asked by the host for every call and every list it shows a
//! principal. [`watch`] puts a file's policies in force and reloads them when the file changes:
//! a file that does not parse or validate is refused in one line (a `warning` event) and the
//! policies in force stay, never "no policy".
//!
//! ```
//! use rho_policy::CedarPolicy;
//! use rho_runtime::{AuthMethod, Decision, Origin, Policy, PolicyAction, PolicyQuery, Principal, ToolSpec, Via};
//!
//! let policy = CedarPolicy::from_text("policy.cedar", r#"
//!     @id("everyone-reads")
//!     permit(principal, action, resource) when { resource.read_only };
//!     @id("writers-write")
//!     permit(principal, action == Rho::Action::"call", resource)
//!       when { principal.scopes.contains("tools:write") };
//! "#).unwrap();
//! let write = ToolSpec::native("write_note", "Writes a note.", serde_json::json!({"type": "object"}));
//! let alice = Principal::new("alice", AuthMethod::StaticToken);
//! let query = PolicyQuery {
//!     action: PolicyAction::Call,
//!     principal: Some(&alice),
//!     tool: &write,
//!     origin: &Origin::Host,
//!     arguments: Some(&serde_json::json!({})),
//!     via: Via::Http,
//! };
//! assert_eq!(policy.decide(&query), Decision::Forbidden { policies: vec![] });
//! let writer = alice.clone().with_scopes(["tools:write"]);
//! let query = PolicyQuery { principal: Some(&writer), ..query };
//! assert_eq!(policy.decide(&query), Decision::Allowed { policies: vec!["writers-write".into()] });
//! ```
//!
//! # What a policy sees
//!
//! Every entity is in namespace `Rho` (the whole of it is [`SCHEMA`]):
//!
//! - **principal** `Rho::Principal::"ID"`: the caller ([`rho_runtime::Principal`]) with `id`,
//!   `auth` (`local`, `none`, `static_token`, `oauth`; `host` for the host's own calls, whose
//!   principal is `Rho::Principal::"host"`), `issuer` (`""` when none) and `scopes`; its token's
//!   other claims are its tags (`principal.hasTag("email") && principal.getTag("email") ==
//!   "..."`: strings as they are, other values as their JSON text); its `groups` claim makes it a
//!   member of each `Rho::Group::"NAME"` (`principal in Rho::Group::"admins"`).
//! - **action** `Rho::Action::"list"` (see the tool in a list) or `Rho::Action::"call"`.
//! - **resource** `Rho::Tool::"NAME"` with `name`, `title`, `source_kind` (`host`, `plugin`,
//!   `remote`), `source` (the plugin's or remote source's name, `host`), `plugin` and `version`
//!   (`""` when none) and MCP's four hints `read_only`, `destructive`, `idempotent`,
//!   `open_world`.
//! - **context**: `transport` (`embedded`, `stdio`, `http`, `nats`); a call's also `arguments`,
//!   a `Rho::Arguments` entity whose tags are the call's top-level arguments
//!   (`context.arguments.hasTag("path") && context.arguments.getTag("path") like "/srv/docs/*"`);
//!   an absolute path (a string starting with `/`) is tagged as the path it names, `.`, `..`
//!   and repeated `/` resolved, so `/srv/docs/../../etc/passwd` reads `/etc/passwd`. Prefer
//!   `permit` on what is allowed to `forbid` on what is not: a relative path or a link is not
//!   resolved (the sandbox's grants confine those).
//!
//! As Cedar does, a set denies what no policy permits, and a `forbid` that matches wins over
//! every `permit`. A policy that fails to evaluate (a tag read without `hasTag`) counts as not
//! matching and is logged.

#![warn(missing_docs)]

mod entities;
mod set;
mod watch;

pub use set::{CedarPolicy, ListedTool, PolicyConfig, PolicyError, SCHEMA};
pub use watch::{PolicyWatcher, watch};
