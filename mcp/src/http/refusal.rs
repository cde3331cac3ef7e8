//! Why a request is refused for who sent it, and where its bearer token is: shared by every
//! way an endpoint tells callers apart ([`super::auth`], [`super::oauth`]).

use axum::http::{HeaderMap, header};

/// A request refused for who sent it: its status and `WWW-Authenticate` challenge, and why in
/// a few words (journaled; never the token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 401 (no usable token), 403 (a scope missing) or 404 (an MCP session another principal
    /// opened).
    pub status: u16,
    /// The `WWW-Authenticate` header (none when empty).
    pub challenge: String,
    /// Why, in a few words.
    pub reason: String,
}

impl Refusal {
    /// A 401 with a plain bearer challenge.
    pub(crate) fn unauthorized(reason: impl Into<String>) -> Refusal {
        Refusal {
            status: 401,
            challenge: "Bearer".into(),
            reason: reason.into(),
        }
    }

    /// A 404 for a request naming an MCP session another principal opened: told apart from
    /// an unknown one by nothing but the journal.
    pub(crate) fn foreign_session() -> Refusal {
        Refusal {
            status: 404,
            challenge: String::new(),
            reason: "an MCP session another principal opened".into(),
        }
    }
}

/// The bearer token of `headers`' `Authorization`, if it carries one.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, given) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(given.trim())
        .filter(|t| !t.is_empty())
}
