//! Values checked against a tool's JSON Schemas: its arguments before the gate runs, its
//! structured answers against its output schema.

use serde_json::Value;

/// A compiled JSON Schema of one tool's arguments or answers.
pub(crate) struct SchemaValidator {
    validator: jsonschema::Validator,
}

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
        jsonschema::validator_for(schema)
            .map(|validator| SchemaValidator { validator })
            .map_err(|e| format!("{subject} not a valid JSON Schema: {e}"))
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
