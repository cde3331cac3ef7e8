//! Details (JSON for screens) as they arrive from a plugin: parsed without surprises.
//!
//! Details may nest up to [`MAX_DETAILS_DEPTH`] levels (arrays and objects inside each other). The
//! depth of the text is measured first, without recursion; deeper details are refused with an
//! error that names the bound, before any recursive parser, serializer or destructor sees them.

use serde::Deserialize;
use serde_json::Value;

pub use rho_plugin_api::MAX_DETAILS_DEPTH;

/// How deep a JSON text nests, counted over its brackets outside strings, without recursion.
/// Stops counting past `limit`.
pub fn text_depth(json: &str, limit: usize) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in json.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > limit {
                    return deepest;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Parses details: `Err` is the rest of a sentence (`that are not JSON: ...`, `nested deeper than
/// 512 levels`).
pub fn parse(json: &str) -> Result<Value, String> {
    parse_within(json, MAX_DETAILS_DEPTH)
}

/// Parses any JSON text nested at most `limit` levels (serde_json's own bound is 128): the depth
/// is measured first, without recursion. `Err` is the rest of a sentence (`nested deeper than N levels`, or serde_json's own).
pub fn parse_within(json: &str, limit: usize) -> Result<Value, String> {
    if text_depth(json, limit) > limit {
        return Err(format!("nested deeper than {limit} levels"));
    }
    let mut de = serde_json::Deserializer::from_str(json);
    // The depth is bounded above; serde_json's own bound (128) may be lower.
    de.disable_recursion_limit();
    let value = Value::deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    value.map_err(|e| format!("that are not JSON: {e}"))
}

/// `value` as compact JSON text with every object's keys in sorted order, whatever order the
/// value holds them in: the same bytes for the same value in every build (serde_json keeps an
/// object's insertion order when any crate of the build turns on its `preserve_order`, as
/// cedar-policy does). What a frame freezes and what is hashed is written this way.
///
/// ```
/// let value = serde_json::json!({"type": "object", "properties": {"b": 1, "a": [{"d": 0, "c": 1}]}});
/// assert_eq!(
///     rho_protocol::details::sorted_json(&value),
///     r#"{"properties":{"a":[{"c":1,"d":0}],"b":1},"type":"object"}"#
/// );
/// ```
pub fn sorted_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_unstable();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&map[k])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn the_bound_is_exact_and_strings_do_not_count() {
        assert_eq!(
            text_depth(r#"{"a": "[[[[", "b": [1, {"c": "\"]"}]}"#, 10),
            3
        );
        let at_bound = nested(MAX_DETAILS_DEPTH);
        // Plugin and runtime threads have 2 MiB stacks (std's and tokio's default): parsing,
        // printing and dropping the deepest details allowed stay within three quarters of that,
        // unoptimized and with serde_json's larger values of `preserve_order` (cedar-policy turns
        // it on for a build that links rho-policy; such a build needs more than 1 MiB here).
        std::thread::Builder::new()
            .stack_size(3 << 19)
            .spawn(move || {
                let value = parse(&at_bound).unwrap();
                assert_eq!(value.to_string(), at_bound);
                drop(value);
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(
            parse(&nested(100_000)).unwrap_err(),
            format!("nested deeper than {MAX_DETAILS_DEPTH} levels")
        );
        assert!(parse("{").unwrap_err().starts_with("that are not JSON: "));
    }
}
