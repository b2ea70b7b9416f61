//! Task files: one JSON object per line (`.jsonl`) or a JSON array, with the fields of
//! `shared/design/brief.md`. Parsing is all-or-nothing: an error names the line and the field, and
//! no task of the batch is accepted.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a task's program is given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Cmd {
    /// An argv list, run directly.
    Argv(Vec<String>),
    /// A string, run by `sh -c`.
    Shell(String),
}

/// A placement hint (accepted and recorded; placement by hint is not implemented yet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hint {
    /// Node name.
    pub node: String,
    /// Hard (true) or soft (false).
    #[serde(default)]
    pub strict: bool,
}

/// One task as a user writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskDef {
    /// Unique id.
    pub id: String,
    /// Program: argv list or shell string. `{inputs[i]}` and `{outputs[i]}` expand to local paths.
    pub cmd: Cmd,
    /// Input URIs: `file://`, `s3://`, `http(s)://`.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Output URIs: `file://` (copied there after success).
    #[serde(default)]
    pub outputs: Vec<String>,
    /// Job name.
    #[serde(default = "default_job")]
    pub job: String,
    /// Expected compute time, seconds (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_s: Option<f64>,
    /// Placement hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<Hint>,
}

fn default_job() -> String {
    "default".into()
}

/// A malformed task: where, which field, what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// 1-based line (JSON Lines) or element (array) number.
    pub line: usize,
    /// The field, as a path (`inputs[0]`), or `.` for the whole object.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: field '{}': {}",
            self.line, self.field, self.message
        )
    }
}

impl std::error::Error for SpecError {}

const SCHEMES: [&str; 4] = ["file://", "s3://", "http://", "https://"];

impl TaskDef {
    fn validate(&self, line: usize) -> Result<(), SpecError> {
        let err = |field: String, message: String| {
            Err(SpecError {
                line,
                field,
                message,
            })
        };
        if self.id.is_empty() || self.id.len() > 256 || self.id.chars().any(char::is_control) {
            return err(
                "id".into(),
                "must be 1-256 characters without control characters".into(),
            );
        }
        match &self.cmd {
            Cmd::Argv(v) if v.is_empty() || v[0].is_empty() => {
                return err("cmd".into(), "argv list must name a program".into())
            }
            Cmd::Shell(s) if s.trim().is_empty() => {
                return err("cmd".into(), "command string is empty".into())
            }
            _ => {}
        }
        for (i, uri) in self.inputs.iter().enumerate() {
            if !SCHEMES.iter().any(|s| uri.starts_with(s)) || uri.contains('\0') {
                return err(
                    format!("inputs[{i}]"),
                    format!("'{uri}' is not a file://, s3://, http:// or https:// URI"),
                );
            }
            if let Some(path) = uri.strip_prefix("file://") {
                if !path.starts_with('/') {
                    return err(
                        format!("inputs[{i}]"),
                        format!("'{uri}': file:// URIs need an absolute path"),
                    );
                }
            }
        }
        for (i, uri) in self.outputs.iter().enumerate() {
            match uri.strip_prefix("file://") {
                Some(p) if p.starts_with('/') && !p.contains('\0') => {}
                _ => {
                    return err(
                        format!("outputs[{i}]"),
                        format!("'{uri}': outputs must be file:// URIs with an absolute path"),
                    )
                }
            }
        }
        if let Some(c) = self.compute_s {
            if !c.is_finite() || c < 0.0 {
                return err("compute_s".into(), "must be a non-negative number".into());
            }
        }
        Ok(())
    }
}

fn parse_one(text: &str, line: usize) -> Result<TaskDef, SpecError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let def: TaskDef = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        SpecError {
            line,
            field,
            message: e.into_inner().to_string(),
        }
    })?;
    def.validate(line)?;
    Ok(def)
}

/// Parse a whole batch: JSON Lines, or a JSON array when the text starts with `[`. Blank lines
/// are skipped. Duplicate ids within the batch are refused.
pub fn parse_tasks(text: &str) -> Result<Vec<TaskDef>, SpecError> {
    let mut tasks = Vec::new();
    if text.trim_start().starts_with('[') {
        let values: Vec<serde_json::Value> = serde_json::from_str(text).map_err(|e| SpecError {
            line: e.line(),
            field: ".".into(),
            message: e.to_string(),
        })?;
        for (i, v) in values.iter().enumerate() {
            tasks.push(parse_one(&v.to_string(), i + 1)?);
        }
    } else {
        for (i, l) in text.lines().enumerate() {
            if !l.trim().is_empty() {
                tasks.push(parse_one(l, i + 1)?);
            }
        }
    }
    let mut seen = rustc_hash::FxHashSet::default();
    for (i, t) in tasks.iter().enumerate() {
        if !seen.insert(t.id.as_str()) {
            return Err(SpecError {
                line: i + 1,
                field: "id".into(),
                message: format!("duplicate id '{}'", t.id),
            });
        }
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_argv_and_shell_forms() {
        let t = parse_tasks(
            r#"{"id":"a","cmd":["wc","-c","{inputs[0]}"],"inputs":["file:///d/f1"]}

{"id":"b","cmd":"echo hi > {outputs[0]}","outputs":["file:///tmp/o"],"job":"j","compute_s":0.5}"#,
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0].cmd,
            Cmd::Argv(vec!["wc".into(), "-c".into(), "{inputs[0]}".into()])
        );
        assert_eq!(t[0].job, "default");
        assert_eq!(t[1].cmd, Cmd::Shell("echo hi > {outputs[0]}".into()));
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = parse_tasks(
            "{\"id\":\"a\",\"cmd\":\"true\"}\n{\"id\":\"b\",\"cmd\":\"true\",\"inputs\":[5]}",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "inputs[0]"), "{e}");
        let e = parse_tasks("{\"id\":\"a\",\"cmd\":\"true\",\"colour\":1}").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("colour"), "{e}");
        let e =
            parse_tasks("{\"id\":\"a\",\"cmd\":\"true\",\"inputs\":[\"ftp://x\"]}").unwrap_err();
        assert_eq!(e.field, "inputs[0]");
        let e = parse_tasks("{\"id\":\"a\",\"cmd\":[]}").unwrap_err();
        assert_eq!(e.field, "cmd");
        let e =
            parse_tasks("{\"id\":\"a\",\"cmd\":\"x\"}\n{\"id\":\"a\",\"cmd\":\"y\"}").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "id"));
        let e = parse_tasks("{\"id\":\"a\",\"cmd\":\"x\"").unwrap_err();
        assert_eq!(e.line, 1);
    }

    #[test]
    fn json_array_form() {
        let t = parse_tasks(r#"[{"id":"a","cmd":"true"},{"id":"b","cmd":["true"]}]"#).unwrap();
        assert_eq!(t.len(), 2);
        let e = parse_tasks(r#"[{"id":"a","cmd":"true"},{"id":"b"}]"#).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("cmd"), "{e}");
    }
}
