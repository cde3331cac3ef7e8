//! Arguments checked against a tool's JSON Schema before the gate runs.

use serde_json::Value;

/// A compiled JSON Schema of one tool's arguments.
pub(crate) struct ArgsValidator {
    validator: jsonschema::Validator,
}

/// How many schema violations one error text lists at most.
const MAX_LISTED: usize = 5;

impl ArgsValidator {
    /// Compiles `schema`; a schema that does not compile is reported as one line.
    pub fn new(schema: &Value) -> Result<Self, String> {
        jsonschema::validator_for(schema)
            .map(|validator| ArgsValidator { validator })
            .map_err(|e| format!("its parameters are not a valid JSON Schema: {e}"))
    }

    /// Checks `args`; the error text names each offending field and what was expected, in words a
    /// model can act on.
    pub fn check(&self, tool: &str, args: &Value) -> Result<(), String> {
        if self.validator.is_valid(args) {
            return Ok(());
        }
        let mut problems = Vec::new();
        let mut total = 0;
        for error in self.validator.iter_errors(args) {
            total += 1;
            if problems.len() < MAX_LISTED {
                let path = error.instance_path().as_str().to_owned();
                let place = if path.is_empty() {
                    "the arguments".to_owned()
                } else {
                    format!(
                        "argument `{}`",
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
        Err(format!(
            "invalid arguments for tool `{tool}`: {}{more}",
            problems.join("; ")
        ))
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
        let v = ArgsValidator::new(&schema).unwrap();
        assert!(v.check("t", &json!({"size": 3})).is_ok());
        assert_eq!(
            v.check("t", &json!({"size": "big"})).unwrap_err(),
            "invalid arguments for tool `t`: argument `size`: \"big\" is not of type \"integer\""
        );
        assert_eq!(
            v.check("t", &json!({})).unwrap_err(),
            "invalid arguments for tool `t`: the arguments: \"size\" is a required property"
        );
    }
}
