//! What rho's MCP faces (stdio and HTTP) do with a client's message before rmcp sees it: every
//! message they cannot take gets the JSON-RPC error it calls for, with the request's id whenever
//! it can be read, even from a message that does not parse (a light scan of its head finds it),
//! so no client waits for an answer that never comes.
//!
//! | the client sends | the answer |
//! |---|---|
//! | a message over the face's bound (a stdio line of 16 MiB, an HTTP body of `serve.max_body_bytes`) | -32600, with the id of its head (the rest is skipped, not buffered) |
//! | a message that is not JSON | -32700, with the id of its head when it has one |
//! | a string with a lone surrogate escape (`"\ud800"`, as `JSON.stringify` and `json.dumps` write) | read leniently: the lone surrogate becomes U+FFFD, as browsers do, and the message goes on |
//! | JSON nested deeper than 128 levels (rmcp's parser gives up) | -32600, with the id of its head |
//! | `{}`, or an object that is neither a request, a notification nor a response | -32600 with its id (`null` without one) |
//! | not an object (a batch, a number) | -32600, `"id": null` |
//! | `"jsonrpc"` other than `"2.0"`, `params` that are not an object, a method that is not a string | -32600 with the id |
//! | `tools/call` without a string `name` or with `arguments` that are not an object | -32602 with the id |
//! | an id that is not a string or an integer (an object, `null`, `1.5`) | -32600, with the number if it is one |
//!
//! Notifications (a method, no id) never get an answer, as JSON-RPC says. The stdio face adds its
//! own rule (a request whose id is still in flight, see [`crate::serve`]'s stdio module); rmcp gets only
//! well-formed messages.

use std::borrow::Cow;

use rho_runtime::text_depth;
use serde_json::{Value, json};

/// How deep a message may nest for rmcp's parser.
pub const MAX_DEPTH: usize = 128;

/// How many bytes of a message's head are scanned for its id, when the whole cannot be read.
pub const ID_HEAD: usize = 64 << 10;

/// What to do with a client's message.
#[derive(Debug)]
pub enum Verdict {
    /// Hand it to rmcp: its text (repaired where a lone surrogate was), its id and its method
    /// (`None` for a response to one of the server's requests).
    Forward {
        /// The message, as rmcp should read it.
        text: String,
        /// Its id, if it has one.
        id: Option<Value>,
        /// Its method; `None` for a response.
        method: Option<String>,
    },
    /// Answer it with this error response instead.
    Answer(String),
    /// Nothing to answer (an empty line, a notification that is wrong).
    Ignore,
}

/// A JSON-RPC error response.
pub fn error(id: Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// The error for a message over `bound` bytes, with the id its `head` names.
pub fn too_large(head: &[u8], bound: usize) -> String {
    error(
        id_from_head(head).unwrap_or(Value::Null),
        -32600,
        &format!("the message is larger than {bound} bytes"),
    )
}

/// The id a message's first bytes name, read without parsing the rest: the value of the top-level
/// `"id"` key, when it comes within [`ID_HEAD`] bytes and is a string, a number or `null`.
pub fn id_from_head(bytes: &[u8]) -> Option<Value> {
    let bytes = &bytes[..bytes.len().min(ID_HEAD)];
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    // The end of the string that starts at `i` (its opening quote), past its closing quote.
    let string_end = |mut i: usize| {
        i += 1;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
        None
    };
    let (mut i, mut depth, mut expect_key) = (skip_ws(0), 0usize, false);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let end = string_end(i)?;
                if depth == 1 && expect_key && &bytes[i..end] == b"\"id\"" {
                    let at = skip_ws(end);
                    if bytes.get(at) != Some(&b':') {
                        return None;
                    }
                    let start = skip_ws(at + 1);
                    let stop = match bytes.get(start)? {
                        b'"' => string_end(start)?,
                        _ => bytes[start..]
                            .iter()
                            .position(|b| {
                                matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace()
                            })
                            .map_or(bytes.len(), |n| start + n),
                    };
                    let value: Value = serde_json::from_slice(&bytes[start..stop]).ok()?;
                    return matches!(value, Value::String(_) | Value::Number(_) | Value::Null)
                        .then_some(value);
                }
                expect_key = false;
                i = end;
                continue;
            }
            b'{' => {
                depth += 1;
                expect_key = depth == 1;
            }
            b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' => expect_key = depth == 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// `text` with every lone surrogate escape (`\ud800` without its pair, or a low one alone)
/// replaced by `\ufffd`; `None` when there is none.
pub fn repair_surrogates(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let hex = |at: usize| -> Option<u32> {
        let digits = bytes.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let mut out = String::new();
    let (mut copied, mut i, mut in_string) = (0, 0, false);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                if bytes.get(i + 1) == Some(&b'u')
                    && let Some(unit) = hex(i + 2)
                {
                    let paired = (0xD800..0xDC00).contains(&unit)
                        && bytes.get(i + 6..i + 8) == Some(b"\\u")
                        && hex(i + 8).is_some_and(|low| (0xDC00..0xE000).contains(&low));
                    if paired {
                        i += 12;
                        continue;
                    }
                    if (0xD800..0xE000).contains(&unit) {
                        out.push_str(&text[copied..i]);
                        out.push_str("\\ufffd");
                        i += 6;
                        copied = i;
                        continue;
                    }
                    i += 6;
                    continue;
                }
                // Any other escape: the escaped character is not a quote that ends the string.
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// `text` as JSON nested at most `limit` levels; `None` if it is not JSON (or deeper).
pub fn parse(text: &str, limit: usize) -> Option<Value> {
    rho_runtime::parse_within(text, limit).ok()
}

/// The checks of the module doc.
pub fn check(text: &str) -> Verdict {
    if text.trim().is_empty() {
        return Verdict::Ignore;
    }
    let head_id = || id_from_head(text.as_bytes()).unwrap_or(Value::Null);
    let too_deep = text_depth(text, MAX_DEPTH) > MAX_DEPTH;
    if too_deep {
        return Verdict::Answer(error(
            head_id(),
            -32600,
            &format!("the message nests deeper than {MAX_DEPTH} levels"),
        ));
    }
    let mut text: Cow<'_, str> = Cow::Borrowed(text);
    let message = match parse(&text, MAX_DEPTH) {
        Some(message) => message,
        None => match repair_surrogates(&text).and_then(|fixed| {
            let message = parse(&fixed, MAX_DEPTH)?;
            Some((fixed, message))
        }) {
            Some((fixed, message)) => {
                text = Cow::Owned(fixed);
                message
            }
            None => return Verdict::Answer(error(head_id(), -32700, "parse error: not JSON")),
        },
    };
    let Value::Object(fields) = &message else {
        let what = if message.is_array() {
            "batches are not supported"
        } else {
            "a message must be a JSON object"
        };
        return Verdict::Answer(error(Value::Null, -32600, what));
    };
    let id = fields.get("id").cloned();
    // A client's error response to something it could not read carries `"id": null`: nothing
    // to answer, nothing rmcp could match.
    let response = !fields.contains_key("method")
        && (fields.contains_key("result") || fields.contains_key("error"));
    if response && id == Some(Value::Null) {
        return Verdict::Ignore;
    }
    let id_ok = match &id {
        None | Some(Value::String(_)) => true,
        // rmcp keeps numeric ids as i64: another number would come back as another id.
        Some(Value::Number(n)) => n.is_i64(),
        Some(_) => false,
    };
    if !id_ok {
        let echoed = match &id {
            Some(n @ Value::Number(_)) => n.clone(),
            _ => Value::Null,
        };
        return Verdict::Answer(error(
            echoed,
            -32600,
            "an id must be a string or an integer",
        ));
    }
    let method = fields.get("method");
    // Notifications get no answer, even when they are wrong; anything that is not a
    // notification (it has no method) does.
    let invalid = |message: &str| match (&id, method) {
        (Some(id), _) => Verdict::Answer(error(id.clone(), -32600, message)),
        (None, None) => Verdict::Answer(error(Value::Null, -32600, message)),
        (None, Some(_)) => Verdict::Ignore,
    };
    if fields.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    let Some(method) = method else {
        // A response to one of the server's requests (elicitation).
        if id.is_some() && response {
            return Verdict::Forward {
                text: text.into_owned(),
                id,
                method: None,
            };
        }
        return invalid("neither a request, a notification nor a response");
    };
    let Some(method) = method.as_str() else {
        return invalid("`method` must be a string");
    };
    // `null` params are absent params.
    let params = fields.get("params").filter(|p| !p.is_null());
    if params.is_some_and(|p| !p.is_object()) {
        return invalid("`params` must be an object");
    }
    if method == "tools/call" {
        let name_ok = params
            .and_then(|p| p.get("name"))
            .is_some_and(Value::is_string);
        let args_ok = params
            .and_then(|p| p.get("arguments"))
            .is_none_or(|a| a.is_object() || a.is_null());
        if !(name_ok && args_ok) {
            return match &id {
                Some(id) => Verdict::Answer(error(
                    id.clone(),
                    -32602,
                    "invalid params: tools/call needs a string `name` and object `arguments`",
                )),
                None => Verdict::Ignore,
            };
        }
    }
    // What rmcp cannot decode it would answer without an id: answered here, with it.
    if let Err(e) = serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(message.clone()) {
        return invalid(&format!("invalid request: {e}"));
    }
    Verdict::Forward {
        text: text.into_owned(),
        id,
        method: Some(method.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Value {
        match check(text) {
            Verdict::Answer(a) => serde_json::from_str(&a).unwrap(),
            other => panic!("{other:?} for {text}"),
        }
    }

    #[test]
    fn each_malformed_message_gets_its_code_and_id() {
        let deep = |depth: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":93,"method":"x","params":{{"a":{}{}}}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            )
        };
        let cases = [
            ("not json".to_owned(), -32700, json!(null)),
            (r#"{"jsonrpc":"2.0","id":4,"method":"x","#.to_owned(), -32700, json!(4)),
            ("{}".to_owned(), -32600, json!(null)),
            ("[1,2]".to_owned(), -32600, json!(null)),
            (r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#.to_owned(), -32600, json!(7)),
            (r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":[]}"#.to_owned(), -32600, json!("a")),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":[1]}}"#.to_owned(),
                -32602,
                json!(3),
            ),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#.to_owned(), -32600, json!(1.5)),
            (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#.to_owned(), -32600, json!(null)),
            (r#"{"jsonrpc":"2.0","id":8}"#.to_owned(), -32600, json!(8)),
            (deep(200), -32600, json!(93)),
            (deep(100_000), -32600, json!(93)),
        ];
        for (text, code, id) in cases {
            let a = answer(&text);
            assert_eq!(a["error"]["code"], code, "{text:.80}: {a}");
            assert_eq!(a["id"], id, "{text:.80}: {a}");
            assert!(a.as_object().unwrap().contains_key("id"));
        }
    }

    #[test]
    fn lone_surrogates_are_read_as_replacement_characters() {
        let text = r#"{"jsonrpc":"2.0","id":88,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\ud800b \udc00 \ud83d\ude00 \\ud800"}}}"#;
        let Verdict::Forward { text, id, .. } = check(text) else {
            panic!("not forwarded");
        };
        assert_eq!(id, Some(json!(88)));
        let message: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            message["params"]["arguments"]["text"],
            "a\u{fffd}b \u{fffd} \u{1f600} \\ud800"
        );
    }

    #[test]
    fn the_id_is_read_from_the_head_only() {
        for (head, id) in [
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"#,
                Some(json!(7)),
            ),
            (r#"{ "id" : "x\"y", "params": {"#, Some(json!("x\"y"))),
            (r#"{"params":{"id":1},"id":-2,"#, Some(json!(-2))),
            (r#"{"params":{"id":1,"#, None),
            (r#"{"method":"x","params":"#, None),
            (r#"["id",1]"#, None),
        ] {
            assert_eq!(id_from_head(head.as_bytes()), id, "{head}");
        }
    }
}
