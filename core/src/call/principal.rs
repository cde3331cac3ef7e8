//! [`Principal`]: who asks — for a call, a tool list, a task. The gate reads it with the call
//! ([`ToolCall::principal`](crate::ToolCall::principal)), the start and end events carry it into
//! the journal and the views, exporters name it (`enduser.id`), and a host serving others tells
//! one caller from the next by it. Never a token: what a token proved, not the token.
//!
//! ```
//! use rho_runtime::{AuthMethod, Principal};
//! let ci = Principal::new("ci", AuthMethod::StaticToken).with_scopes(["tools:call"]);
//! assert!(ci.has_scope("tools:call"));
//! assert_eq!(ci.to_string(), "ci (static token)");
//! assert_eq!(Principal::local().to_string(), "local (local user)");
//! assert_eq!(serde_json::to_value(AuthMethod::OAuth).unwrap(), "oauth");
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who asks, as the host told them apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Principal {
    /// Its id: an OAuth token's subject (`sub`), a named token's name, `token` for the one
    /// token of a token file, `local` for this machine's user (stdio, `rho call`),
    /// `anonymous` for a loopback HTTP client without a token.
    pub id: String,
    /// How it was told apart.
    pub auth: AuthMethod,
    /// Who vouched for it: an OAuth token's issuer (`iss`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// What it may do, as its token says (OAuth `scope`, a named token's scopes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The other claims of its token a policy may read (`groups`, `email`, ...; never the
    /// signature or the token itself).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub claims: Map<String, Value>,
}

/// How a [`Principal`] was told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMethod {
    /// This machine's user: a stdio client, a one-shot command.
    Local,
    /// Nothing: a loopback HTTP client on a server without tokens.
    None,
    /// A bearer token of the server's own (a token file; a named token).
    StaticToken,
    /// An OAuth 2.1 access token an issuer signed, checked by the server.
    #[serde(rename = "oauth")]
    OAuth,
}

impl AuthMethod {
    /// `local user`, `none`, `static token`, `oauth`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Local => "local user",
            AuthMethod::None => "none",
            AuthMethod::StaticToken => "static token",
            AuthMethod::OAuth => "oauth",
        }
    }
}

impl Principal {
    /// A principal `id`, told apart by `auth`, with no issuer, scopes or claims.
    pub fn new(id: impl Into<String>, auth: AuthMethod) -> Principal {
        Principal {
            id: id.into(),
            auth,
            issuer: None,
            scopes: Vec::new(),
            claims: Map::new(),
        }
    }

    /// This machine's user (`local`).
    pub fn local() -> Principal {
        Principal::new("local", AuthMethod::Local)
    }

    /// A loopback HTTP client of a server without tokens (`anonymous`).
    pub fn anonymous() -> Principal {
        Principal::new("anonymous", AuthMethod::None)
    }

    /// The same principal with `scopes`.
    pub fn with_scopes<I, S>(mut self, scopes: I) -> Principal
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Whether its token grants `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

impl std::fmt::Display for Principal {
    /// `ci (static token)`, `alice (oauth, https://id.example.com)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.issuer {
            Some(issuer) => write!(f, "{} ({}, {issuer})", self.id, self.auth.as_str()),
            None => write!(f, "{} ({})", self.id, self.auth.as_str()),
        }
    }
}
