//! A call's arguments as the JSON text a plugin parses: the bytes `serde_json` writes for the
//! same value, made in one allocation, with strings scanned for what needs escaping 32 bytes at
//! a time.
//!
//! serde_json looks up every byte of a string in a table (perf of a 64 KiB `echo` through a
//! worker: a fifth of the host's time); the text of a model's arguments (code, documents) rarely
//! needs escaping, so whole words are copied at once here. Both write the same text (tested).

use serde_json::Value;

/// `value` as compact JSON text, byte for byte what `serde_json::to_string` writes.
pub(crate) fn to_json(value: &Value) -> String {
    let mut out = String::with_capacity(estimated_len(value));
    write_value(&mut out, value);
    out
}

/// About the length of `value`'s text (exact unless strings need escaping or numbers are long):
/// the output's one allocation.
fn estimated_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|v| estimated_len(v) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + estimated_len(v))
                .sum::<usize>()
        }
    }
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        // A `Number` displays as serde_json writes it (itoa, and the same float formatting);
        // writing to a `String` cannot fail.
        Value::Number(n) => {
            use std::fmt::Write;
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// The high bit of each byte of `word` that is a control character, `"` or `\` (the bytes JSON
/// escapes), and maybe of bytes after such a one: zero exactly when there is none (bytes of 0x80
/// and above are never flagged). A byte under 0x20 borrows its high bit in `word - 0x20..`,
/// which `!word` keeps only for bytes under 0x80; `"` and `\` become zero bytes under their XOR,
/// found the same way.
fn escapes(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    control
        | zero_byte(word ^ (ONES * u64::from(b'"')))
        | zero_byte(word ^ (ONES * u64::from(b'\\')))
}

/// How many bytes at the start of `bytes` need no escaping: 32 at a time (four words tested
/// together, one branch), then 8, then one by one.
fn clean_prefix(bytes: &[u8]) -> usize {
    let word = |chunk: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        escapes(u64::from_le_bytes(w))
    };
    let mut i = 0;
    while let Some(block) = bytes.get(i..i + 32) {
        if block
            .chunks_exact(8)
            .fold(0, |any, chunk| any | word(chunk))
            != 0
        {
            break;
        }
        i += 32;
    }
    while let Some(chunk) = bytes.get(i..i + 8) {
        if word(chunk) != 0 {
            break;
        }
        i += 8;
    }
    while i < bytes.len() && !matches!(bytes[i], 0..0x20 | b'"' | b'\\') {
        i += 1;
    }
    i
}

fn write_str(out: &mut String, s: &str) {
    out.push('"');
    let mut rest = s;
    loop {
        let clean = clean_prefix(rest.as_bytes());
        // The byte at `clean` (if any) is ASCII: a character boundary.
        out.push_str(&rest[..clean]);
        let Some(&byte) = rest.as_bytes().get(clean) else {
            break;
        };
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
        }
        rest = &rest[clean + 1..];
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn same_as_serde(value: &Value) {
        assert_eq!(to_json(value), serde_json::to_string(value).unwrap());
    }

    /// Every byte JSON escapes, at every offset within a word, amid ASCII and multi-byte text;
    /// numbers, nesting and empty containers.
    #[test]
    fn writes_what_serde_json_writes() {
        let specials: Vec<char> = (0u8..0x20)
            .map(char::from)
            .chain(['"', '\\', '/', '\u{7f}', 'é', '€', '😀', '\u{2028}'])
            .collect();
        for special in &specials {
            for offset in 0..17 {
                let text: String = "a".repeat(offset) + &special.to_string() + "bcdefghijklmnop";
                same_as_serde(&json!({ "text": text, "key\u{1}": [text] }));
            }
        }
        let mixed: String = (0..3000u32)
            .filter_map(|i| char::from_u32(i * 37 % 0x11000))
            .collect();
        same_as_serde(&json!(mixed));
        same_as_serde(&json!({
            "n": [0, -1, u64::MAX, i64::MIN, 1.5, -0.0, 1e300, 2.2250738585072014e-308, 0.1],
            "b": [true, false, null],
            "empty": [{}, [], ""],
            "deep": [[[{"a": {"b": [1, {"c": "d"}]}}]]],
        }));
    }

    #[test]
    fn the_word_test_is_exact() {
        for byte in 0..=255u8 {
            let word = u64::from_le_bytes([b'a', b'a', b'a', byte, b'a', 0xff, 0x80, b'a']);
            let expected = byte < 0x20 || byte == b'"' || byte == b'\\';
            assert_eq!(escapes(word) != 0, expected, "byte {byte:#x}");
        }
    }
}
