//! [`Limits`]: how often and how many at once a caller may call a tool. Each [`LimitRule`]
//! (`[[limit]]` in `rho.toml`) picks calls by tool, source, principal and scope, and counts them
//! apart for each principal × tool: a rate (a token bucket, `5/s` with a burst of 5 by default)
//! and a concurrency (calls running at once).
//!
//! - Over a rate, a call ends at once `rate_limited`, its [`Decision::RateLimited`] naming the
//!   rule and when a call would be let through; neither the gate nor the tool is asked.
//! - Over a concurrency, a call waits for a running one to end, before the gate and outside its
//!   timeout (as a gate's wait is); it can still be cancelled or stopped while it waits.
//! - A call every rule lets through is counted against each. Calls without a principal (the
//!   host's own) count as principal `host`.
//!
//! ```
//! use rho_runtime::{LimitRule, Limits};
//! let rule: LimitRule = serde_json::from_str(
//!     r#"{ "tool": "write_*", "rate": "5/s", "concurrency": 2 }"#,
//! ).unwrap();
//! assert_eq!(rule.to_string(), "5/s, 2 at once, for tools `write_*`, per principal and tool");
//! let limits = Limits::new(vec![rule]);
//! assert!(!limits.is_empty());
//! ```

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};

use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::call::principal::Principal;
use crate::call::rules::pattern_matches;
use crate::registry::origin::Origin;
use rho_protocol::Decision;

/// A rate: `calls` per `per`. Written `5/s`, `100/min`, `1000/h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Rate {
    /// How many calls.
    pub calls: NonZeroU32,
    /// In how long.
    pub per: Per,
}

/// The period of a [`Rate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    /// `s`.
    Second,
    /// `min`.
    Minute,
    /// `h`.
    Hour,
}

impl Per {
    fn as_str(self) -> &'static str {
        match self {
            Per::Second => "s",
            Per::Minute => "min",
            Per::Hour => "h",
        }
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wrong = || format!("rate `{text}` is not CALLS/s, CALLS/min or CALLS/h (as in `5/s`)");
        let (calls, per) = text.split_once('/').ok_or_else(wrong)?;
        let calls = calls.trim().parse::<NonZeroU32>().map_err(|_| wrong())?;
        let per = match per.trim() {
            "s" => Per::Second,
            "min" => Per::Minute,
            "h" => Per::Hour,
            _ => return Err(wrong()),
        };
        Ok(Rate { calls, per })
    }
}

impl TryFrom<String> for Rate {
    type Error = String;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<Rate> for String {
    fn from(rate: Rate) -> String {
        rate.to_string()
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.calls, self.per.as_str())
    }
}

/// One limit: which calls it counts and what it allows each principal × tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitRule {
    /// Tools it counts: a name, or a pattern with `*` (`write_*`); every tool by default.
    #[serde(default = "any_tool")]
    pub tool: String,
    /// Only tools of this source: a plugin's name, a remote source's name (an MCP server's,
    /// a NATS subject's), or `host` for the host's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Only calls of this principal (its id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Only calls of principals whose token grants this scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Calls let through per period, for each principal × tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// How many may come at once after a quiet time (the bucket's size); the rate's calls by
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<NonZeroU32>,
    /// Calls running at once, for each principal × tool; others wait their turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<NonZeroU32>,
}

fn any_tool() -> String {
    "*".into()
}

impl LimitRule {
    /// Whether the rule counts a call of `tool` (from `origin`) by `principal`.
    pub fn applies(&self, tool: &str, origin: &Origin, principal: Option<&Principal>) -> bool {
        pattern_matches(&self.tool, tool)
            && self
                .source
                .as_deref()
                .is_none_or(|source| source_name(origin) == source)
            && self
                .principal
                .as_deref()
                .is_none_or(|id| principal.is_some_and(|p| p.id == id))
            && self
                .scope
                .as_deref()
                .is_none_or(|scope| principal.is_some_and(|p| p.has_scope(scope)))
    }

    /// Why the rule cannot be used, if it cannot: it limits nothing.
    pub fn check(&self) -> Result<(), String> {
        if self.rate.is_none() && self.concurrency.is_none() {
            return Err(format!(
                "limit for tools `{}` sets neither `rate` nor `concurrency`",
                self.tool
            ));
        }
        if self.burst.is_some() && self.rate.is_none() {
            return Err(format!(
                "limit for tools `{}` sets `burst` without `rate`",
                self.tool
            ));
        }
        Ok(())
    }

    fn quota(&self) -> Option<Quota> {
        let rate = self.rate?;
        let quota = match rate.per {
            Per::Second => Quota::per_second(rate.calls),
            Per::Minute => Quota::per_minute(rate.calls),
            Per::Hour => Quota::per_hour(rate.calls),
        };
        Some(quota.allow_burst(self.burst.unwrap_or(rate.calls)))
    }
}

impl std::fmt::Display for LimitRule {
    /// `5/s, 2 at once, for tools `write_*` of files, principal alice, scope tools:write, per
    /// principal and tool`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(rate) = self.rate {
            match self.burst {
                Some(burst) => parts.push(format!("{rate} (burst {burst})")),
                None => parts.push(rate.to_string()),
            }
        }
        if let Some(at_once) = self.concurrency {
            parts.push(format!("{at_once} at once"));
        }
        let mut whom = format!("for tools `{}`", self.tool);
        if let Some(source) = &self.source {
            whom.push_str(&format!(" of {source}"));
        }
        if let Some(principal) = &self.principal {
            whom.push_str(&format!(", principal {principal}"));
        }
        if let Some(scope) = &self.scope {
            whom.push_str(&format!(", scope {scope}"));
        }
        write!(f, "{}, {whom}, per principal and tool", parts.join(", "))
    }
}

/// The name a [`LimitRule::source`] matches: the plugin's, the remote source's, or `host`.
pub fn source_name(origin: &Origin) -> &str {
    match origin {
        Origin::Host => "host",
        Origin::Plugin { plugin, .. } => plugin,
        Origin::Remote { via, .. } => via,
    }
}

/// Principal × tool: what a rule counts apart.
type Key = (String, String);

/// A rule's running calls: the semaphore of each principal × tool with calls running or waiting.
type Running = Arc<Mutex<HashMap<Key, Arc<Semaphore>>>>;

/// How many keys a rule's bucket map holds before the full ones are forgotten.
const TIDY_AFTER: usize = 4096;

/// One rule and its counts.
struct Counted {
    rule: LimitRule,
    label: String,
    rate: Option<RateLimiter<Key, HashMapStateStore<Key>, DefaultClock>>,
    running: Option<Running>,
}

/// The host's limits and their counts, shared by every call ([`crate::HostBuilder::limits`]).
/// Empty: no limit, nothing counted.
#[derive(Clone, Default)]
pub struct Limits {
    rules: Arc<Vec<Counted>>,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|c| &c.label))
            .finish()
    }
}

/// A call's turns under the concurrency limits it falls under: held until it ends.
pub(crate) struct Turns {
    _held: Vec<Turn>,
}

struct Turn {
    key: Key,
    semaphore: Arc<Semaphore>,
    permit: Option<OwnedSemaphorePermit>,
    running: Running,
}

impl Drop for Turn {
    fn drop(&mut self) {
        drop(self.permit.take());
        // Forget the key's semaphore once no call holds or waits for it (the map's own and
        // this one are the only references).
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&self.semaphore) == 2 {
            running.remove(&self.key);
        }
    }
}

impl Limits {
    /// Limits of `rules` (each should pass [`LimitRule::check`]; one that does not limits
    /// nothing).
    pub fn new(rules: Vec<LimitRule>) -> Self {
        let rules = rules
            .into_iter()
            .map(|rule| Counted {
                label: rule.to_string(),
                rate: rule.quota().map(RateLimiter::hashmap),
                running: rule.concurrency.map(|_| Arc::default()),
                rule,
            })
            .collect();
        Limits {
            rules: Arc::new(rules),
        }
    }

    /// Whether there is no limit.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Counts a call of `tool` by `principal` against the rates: `Err` with the decision when
    /// one is exceeded (the longest wait of those exceeded).
    pub(crate) fn admit(
        &self,
        tool: &str,
        origin: &Origin,
        principal: Option<&Principal>,
    ) -> Result<(), Decision> {
        let mut refused: Option<Decision> = None;
        for counted in self.rules.iter() {
            let Some(rate) = &counted.rate else { continue };
            if !counted.rule.applies(tool, origin, principal) {
                continue;
            }
            let key = key(tool, principal);
            if rate.len() > TIDY_AFTER {
                rate.retain_recent();
            }
            if let Err(not_until) = rate.check_key(&key) {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                let retry_after_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
                let longer = match &refused {
                    Some(Decision::RateLimited {
                        retry_after_ms: before,
                        ..
                    }) => retry_after_ms > *before,
                    _ => true,
                };
                if longer {
                    refused = Some(Decision::RateLimited {
                        limit: counted.label.clone(),
                        retry_after_ms,
                    });
                }
            }
        }
        refused.map_or(Ok(()), Err)
    }

    /// Whether a call of `tool` by `principal` falls under a concurrency limit.
    pub(crate) fn queues(
        &self,
        tool: &str,
        origin: &Origin,
        principal: Option<&Principal>,
    ) -> bool {
        self.rules
            .iter()
            .any(|c| c.running.is_some() && c.rule.applies(tool, origin, principal))
    }

    /// Waits for the call's turn under every concurrency limit it falls under, in rule order.
    pub(crate) async fn turns(
        &self,
        tool: &str,
        origin: &Origin,
        principal: Option<&Principal>,
    ) -> Turns {
        let mut turns = Vec::new();
        for counted in self.rules.iter() {
            let (Some(running), Some(at_once)) = (&counted.running, counted.rule.concurrency)
            else {
                continue;
            };
            if !counted.rule.applies(tool, origin, principal) {
                continue;
            }
            let key = key(tool, principal);
            let semaphore = running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(key.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(at_once.get() as usize)))
                .clone();
            // Never closed: a permit always comes.
            let permit = semaphore.clone().acquire_owned().await.ok();
            turns.push(Turn {
                key,
                semaphore,
                permit,
                running: running.clone(),
            });
        }
        Turns { _held: turns }
    }
}

fn key(tool: &str, principal: Option<&Principal>) -> Key {
    let id = principal.map_or("host", |p| p.id.as_str());
    (id.to_owned(), tool.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_and_write_as_people_write_them() {
        for text in ["5/s", "100/min", "1000/h"] {
            assert_eq!(text.parse::<Rate>().unwrap().to_string(), text);
        }
        for wrong in ["0/s", "5", "5/day", "x/s", ""] {
            let error = wrong.parse::<Rate>().unwrap_err();
            assert!(error.contains("is not CALLS/s"), "{error}");
        }
    }

    #[test]
    fn a_rate_counts_each_principal_and_tool_apart() {
        let rule: LimitRule = serde_json::from_str(r#"{"tool": "w*", "rate": "2/min"}"#).unwrap();
        let limits = Limits::new(vec![rule]);
        let alice = Principal::new("alice", crate::AuthMethod::StaticToken);
        let bob = Principal::new("bob", crate::AuthMethod::StaticToken);
        let host = Origin::Host;
        for _ in 0..2 {
            assert!(limits.admit("write", &host, Some(&alice)).is_ok());
        }
        let Err(Decision::RateLimited {
            limit,
            retry_after_ms,
        }) = limits.admit("write", &host, Some(&alice))
        else {
            panic!("the third call was let through");
        };
        assert_eq!(limit, "2/min, for tools `w*`, per principal and tool");
        assert!((1..=30_000).contains(&retry_after_ms), "{retry_after_ms}");
        assert!(limits.admit("wipe", &host, Some(&alice)).is_ok());
        assert!(limits.admit("write", &host, Some(&bob)).is_ok());
        assert!(limits.admit("read", &host, Some(&alice)).is_ok());
    }

    #[test]
    fn a_rule_that_limits_nothing_is_refused() {
        let rule: LimitRule = serde_json::from_str(r#"{"tool": "w*"}"#).unwrap();
        assert!(rule.check().unwrap_err().contains("neither `rate` nor"));
        assert!(serde_json::from_str::<LimitRule>(r#"{"rate": "5/s", "tol": "x"}"#).is_err());
    }
}
