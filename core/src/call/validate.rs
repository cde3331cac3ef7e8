//! Values checked against a tool's JSON Schemas: its arguments before the gate runs, its
//! structured answers against its output schema.

use serde_json::Value;

/// A compiled JSON Schema of one tool's arguments or answers.
pub(crate) struct SchemaValidator {
    validator: jsonschema::Validator,
}

/// The largest compiled form of one `pattern` of a tool's schema, and of its lazy DFA, bytes
/// (with [`rho_protocol::MAX_SCHEMA_PATTERNS`] of them, the cost of compiling a schema is bounded).
const MAX_PATTERN_BYTES: usize = 256 << 10;

/// How many schema violations one error text lists at most.
const MAX_LISTED: usize = 5;

/// What a schema describes, for the words of its errors.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Checked {
    /// A call's arguments.
    Arguments,
    /// A tool's structured answer.
    Answer,
}

impl SchemaValidator {
    /// Compiles `schema`; a schema that does not compile is reported as one line naming it
    /// (`subject`: "its parameters are", "its output schema is").
    pub fn new(schema: &Value, subject: &str) -> Result<Self, String> {
        // Patterns come from plugins: each compiles within a bounded size and matches within a
        // bounded number of backtracking steps, so no schema can make the host allocate or spin
        // without bound (with the host's caps on a schema's size and its number of patterns).
        let patterns = jsonschema::PatternOptions::fancy_regex()
            .size_limit(MAX_PATTERN_BYTES)
            .dfa_size_limit(MAX_PATTERN_BYTES)
            .backtrack_limit(100_000);
        jsonschema::options()
            .with_pattern_options(patterns)
            .build(schema)
            .map(|validator| SchemaValidator { validator })
            .map_err(|e| format!("{subject} not a valid JSON Schema: {e}"))
    }

    /// Whether `value` fits the schema.
    pub fn fits(&self, value: &Value) -> bool {
        self.validator.is_valid(value)
    }

    /// Checks `value`; the error text names each offending field and what was expected, in words
    /// a model can act on.
    pub fn check(&self, tool: &str, value: &Value, checked: Checked) -> Result<(), String> {
        if self.validator.is_valid(value) {
            return Ok(());
        }
        let (whole, field, head) = match checked {
            Checked::Arguments => (
                "the arguments",
                "argument",
                format!("invalid arguments for tool `{tool}`"),
            ),
            Checked::Answer => (
                "the answer",
                "field",
                format!(
                    "tool `{tool}` answered with structured content that does not match its \
                     output schema"
                ),
            ),
        };
        let mut problems = Vec::new();
        let mut total = 0;
        for error in self.validator.iter_errors(value) {
            total += 1;
            if problems.len() < MAX_LISTED {
                let path = error.instance_path().as_str().to_owned();
                let place = if path.is_empty() {
                    whole.to_owned()
                } else {
                    format!(
                        "{field} `{}`",
                        path.trim_start_matches('/').replace('/', ".")
                    )
                };
                problems.push(format!("{place}: {error}"));
            }
        }
        let more = if total > MAX_LISTED {
            format!(" (and {} more)", total - MAX_LISTED)
        } else {
            String::new()
        };
        Err(format!("{head}: {}{more}", problems.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pattern whose compiled form is too large is refused at compile time.
    #[test]
    fn a_pattern_too_large_to_compile_is_refused() {
        let bomb = json!({"properties": {"a": {"pattern": "\\p{L}{200}|z"}}});
        assert!(SchemaValidator::new(&bomb, "its schema is").is_err());
    }

    #[test]
    fn names_field_and_expectation() {
        let schema = json!({
            "type": "object",
            "properties": {"size": {"type": "integer", "minimum": 1}},
            "required": ["size"]
        });
        let v = SchemaValidator::new(&schema, "its parameters are").unwrap();
        let args = Checked::Arguments;
        assert!(v.check("t", &json!({"size": 3}), args).is_ok());
        assert_eq!(
            v.check("t", &json!({"size": "big"}), args).unwrap_err(),
            "invalid arguments for tool `t`: argument `size`: \"big\" is not of type \"integer\""
        );
        assert_eq!(
            v.check("t", &json!({}), args).unwrap_err(),
            "invalid arguments for tool `t`: the arguments: \"size\" is a required property"
        );
        assert_eq!(
            v.check("t", &json!({"size": 0}), Checked::Answer)
                .unwrap_err(),
            "tool `t` answered with structured content that does not match its output schema: \
             field `size`: 0 is less than the minimum of 1"
        );
    }
}
