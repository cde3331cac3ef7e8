//! `files`: reads passages of text files. Its tool `read_passage` answers with numbered lines for
//! the model, and details (path, lines, total) for screens.

use rho_plugin_api::{Answer, Ctx, JsonSchema, Tool, ToolError, export_plugin, json};
use serde::Deserialize;

/// Arguments of `read_passage`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PassageArgs {
    /// Path of a UTF-8 text file.
    pub path: String,
    /// First line to read, counting from 1.
    #[schemars(range(min = 1))]
    pub start_line: usize,
    /// Last line to read, inclusive; past the end of the file reads to the end.
    #[schemars(range(min = 1))]
    pub end_line: usize,
}

/// Reads lines `start_line..=end_line` of `path`, each prefixed with its number.
pub fn read_passage(args: PassageArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let PassageArgs {
        path,
        start_line,
        end_line,
    } = args;
    if start_line == 0 || end_line < start_line {
        return Err(ToolError::new(format!(
            "lines must satisfy 1 <= start_line <= end_line, got {start_line}..{end_line}"
        )));
    }
    let content = std::fs::read_to_string(&path)
        .map_err(|e| ToolError::new(format!("cannot read `{path}`: {e}")))?;
    let lines: Vec<&str> = content.lines().collect();
    let total = lines.len();
    if start_line > total {
        return Err(ToolError::new(format!(
            "`{path}` has {total} lines; start_line {start_line} is past its end"
        ))
        .with_details(json!({ "path": path, "total_lines": total })));
    }
    let end = end_line.min(total);
    let width = end.to_string().len();
    let mut text = String::new();
    for (n, line) in lines[start_line - 1..end].iter().enumerate() {
        text.push_str(&format!("{:>width$} | {line}\n", start_line + n));
    }
    Ok(Answer::text(text).with_details(json!({
        "path": path,
        "start_line": start_line,
        "end_line": end,
        "total_lines": total,
    })))
}

export_plugin! {
    Tool::new(
        "read_passage",
        "Reads lines start_line..=end_line of a text file, numbered, for quoting or editing.",
        read_passage,
    ),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_numbers() {
        // Removed when the test ends, whatever its outcome.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap();
        let args = PassageArgs {
            path: path.display().to_string(),
            start_line: 2,
            end_line: 9,
        };
        let answer = read_passage(args, &Ctx::detached("t")).unwrap();
        assert_eq!(answer.output.text(), "2 | two\n3 | three\n");
        assert_eq!(answer.details.unwrap()["total_lines"], 3);
        let missing = PassageArgs {
            path: "/nonexistent/x".into(),
            start_line: 1,
            end_line: 1,
        };
        assert!(
            read_passage(missing, &Ctx::detached("t"))
                .unwrap_err()
                .message
                .contains("cannot read")
        );
    }
}
