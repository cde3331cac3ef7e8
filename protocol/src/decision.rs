//! [`Decision`]: what a host's policy and limits decided of one call, as its result and its end
//! event carry it (the audit of who was let through, by which rule, and who was not).
//!
//! ```
//! use rho_protocol::Decision;
//! let forbidden = Decision::Forbidden { policies: vec!["no-writes".into()] };
//! assert_eq!(forbidden.to_string(), "forbidden by policy `no-writes`");
//! assert_eq!(
//!     serde_json::to_value(&forbidden).unwrap(),
//!     serde_json::json!({"decision": "forbidden", "policies": ["no-writes"]})
//! );
//! let limited = Decision::RateLimited { limit: "5/s".into(), retry_after_ms: 200 };
//! assert_eq!(limited.retry_after(), Some(std::time::Duration::from_millis(200)));
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What the host's policy and limits decided of a call. Serialized as an object tagged by
/// `"decision"` (`allowed`, `forbidden`, `rate_limited`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// The call may run. `policies`: the ids of the policies that permitted it (empty when no
    /// policy set is in force and only limits were asked).
    Allowed {
        /// The permitting policies' ids.
        #[serde(default)]
        policies: Vec<String>,
    },
    /// A policy forbade the call (outcome `blocked`). `policies`: the ids of the `forbid`
    /// policies that matched; empty when none did and no policy permitted it (a policy set
    /// allows only what some policy permits).
    Forbidden {
        /// The forbidding policies' ids.
        #[serde(default)]
        policies: Vec<String>,
    },
    /// The caller is over a limit (outcome `rate_limited`); the tool did not run.
    RateLimited {
        /// The limit, as its configuration states it (`5/s for write_* per principal`).
        limit: String,
        /// How long until a call of the same caller and tool would be let through.
        retry_after_ms: u64,
    },
}

impl Decision {
    /// Whether the call may run.
    pub fn allows(&self) -> bool {
        matches!(self, Decision::Allowed { .. })
    }

    /// How long to wait before trying again, for a call over a limit.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Decision::RateLimited { retry_after_ms, .. } => {
                Some(Duration::from_millis(*retry_after_ms))
            }
            _ => None,
        }
    }

    /// `allowed`, `forbidden`, `rate_limited`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Decision::Allowed { .. } => "allowed",
            Decision::Forbidden { .. } => "forbidden",
            Decision::RateLimited { .. } => "rate_limited",
        }
    }

    /// The ids of the policies that decided (none for a limit).
    pub fn policies(&self) -> &[String] {
        match self {
            Decision::Allowed { policies } | Decision::Forbidden { policies } => policies,
            Decision::RateLimited { .. } => &[],
        }
    }
}

impl std::fmt::Display for Decision {
    /// `allowed by policy `read-all``, `allowed`, `forbidden by policy `no-writes``,
    /// `forbidden: no policy permits it`, `rate limited (5/s), retry after 200 ms`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named = |policies: &[String]| {
            policies
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Decision::Allowed { policies } if policies.is_empty() => f.write_str("allowed"),
            Decision::Allowed { policies } => {
                write!(f, "allowed by policy {}", named(policies))
            }
            Decision::Forbidden { policies } if policies.is_empty() => {
                f.write_str("forbidden: no policy permits it")
            }
            Decision::Forbidden { policies } => {
                write!(f, "forbidden by policy {}", named(policies))
            }
            Decision::RateLimited {
                limit,
                retry_after_ms,
            } => write!(f, "rate limited ({limit}), retry after {retry_after_ms} ms"),
        }
    }
}
