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
    /// 1-based line (JSON Lines) or element (array) number; 0 when the error is about the whole
    /// text (an empty file).
    pub line: usize,
    /// The field, as a path (`inputs[0]`), or `.` for the whole object.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "{}", self.message);
        }
        write!(
            f,
            "line {}: field '{}': {}",
            self.line, self.field, self.message
        )
    }
}

impl std::error::Error for SpecError {}

impl TaskDef {
    /// Check the task and put its URIs in canonical form ([`crate::uri`]).
    fn check(&mut self, line: usize) -> Result<(), SpecError> {
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
        for (i, uri) in self.inputs.iter_mut().enumerate() {
            match crate::uri::canonical(uri) {
                Ok(c) => *uri = c,
                Err(e) => return err(format!("inputs[{i}]"), e),
            }
        }
        for (i, uri) in self.outputs.iter_mut().enumerate() {
            match crate::uri::canonical(uri) {
                Ok(c) if crate::uri::scheme(&c) == Some(crate::uri::Scheme::File) => *uri = c,
                Ok(_) => {
                    return err(
                        format!("outputs[{i}]"),
                        format!("'{uri}': outputs must be file:// URIs with an absolute path"),
                    )
                }
                Err(e) => return err(format!("outputs[{i}]"), e),
            }
        }
        let texts: Vec<&str> = match &self.cmd {
            Cmd::Argv(v) => v.iter().map(String::as_str).collect(),
            Cmd::Shell(s) => vec![s.as_str()],
        };
        for text in texts {
            for (kind, index, _) in crate::placeholder::find(text) {
                let (name, len) = match kind {
                    crate::placeholder::Kind::Input => ("inputs", self.inputs.len()),
                    crate::placeholder::Kind::Output => ("outputs", self.outputs.len()),
                };
                if index >= len {
                    return err(
                        "cmd".into(),
                        format!("{{{name}[{index}]}} is out of range: the task has {len} {name}"),
                    );
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
    let mut def: TaskDef = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        SpecError {
            line,
            field,
            message: e.into_inner().to_string(),
        }
    })?;
    def.check(line)?;
    Ok(def)
}

/// Parse a whole batch: JSON Lines, or a JSON array when the text starts with `[`. Blank lines
/// are skipped; a leading UTF-8 byte order mark is ignored. An empty batch and duplicate ids
/// are refused.
pub fn parse_tasks(text: &str) -> Result<Vec<TaskDef>, SpecError> {
    Ok(parse_numbered(text)?.into_iter().map(|(_, t)| t).collect())
}

/// [`parse_tasks`], each task with its line (JSON Lines) or element (array) number.
pub fn parse_numbered(text: &str) -> Result<Vec<(usize, TaskDef)>, SpecError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut tasks: Vec<(usize, TaskDef)> = Vec::new();
    if text.trim_start().starts_with('[') {
        let values: Vec<serde_json::Value> = serde_json::from_str(text).map_err(|e| SpecError {
            line: e.line(),
            field: ".".into(),
            message: e.to_string(),
        })?;
        for (i, v) in values.iter().enumerate() {
            tasks.push((i + 1, parse_one(&v.to_string(), i + 1)?));
        }
    } else {
        for (i, l) in text.lines().enumerate() {
            if !l.trim().is_empty() {
                tasks.push((i + 1, parse_one(l, i + 1)?));
            }
        }
    }
    if tasks.is_empty() {
        return Err(SpecError {
            line: 0,
            field: ".".into(),
            message: "no tasks: the text holds no task (one JSON object per line, or a JSON array)"
                .into(),
        });
    }
    let mut seen = rustc_hash::FxHashMap::default();
    for (line, t) in &tasks {
        if let Some(first) = seen.insert(t.id.as_str(), *line) {
            return Err(SpecError {
                line: *line,
                field: "id".into(),
                message: format!("duplicate id '{}' (first on line {first})", t.id),
            });
        }
    }
    Ok(tasks)
}

/// [`parse_tasks`] over the bytes of a task file: text that is not UTF-8 is refused with the
/// number of the first line that is not.
pub fn parse_task_bytes(bytes: &[u8]) -> Result<Vec<TaskDef>, SpecError> {
    Ok(parse_numbered_bytes(bytes)?
        .into_iter()
        .map(|(_, t)| t)
        .collect())
}

/// [`parse_task_bytes`], each task with its line or element number.
pub fn parse_numbered_bytes(bytes: &[u8]) -> Result<Vec<(usize, TaskDef)>, SpecError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse_numbered(text),
        Err(e) => {
            let line = 1 + bytes[..e.valid_up_to()]
                .iter()
                .filter(|b| **b == b'\n')
                .count();
            Err(SpecError {
                line,
                field: ".".into(),
                message: format!(
                    "not valid UTF-8 (byte {} of the line)",
                    e.valid_up_to()
                        - bytes[..e.valid_up_to()]
                            .iter()
                            .rposition(|b| *b == b'\n')
                            .map_or(0, |p| p + 1)
                        + 1
                ),
            })
        }
    }
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
    fn line_numbers_count_blank_lines_bom_and_bad_bytes() {
        let e =
            parse_tasks("\u{feff}{\"id\":\"a\",\"cmd\":\"x\"}\n\n\n{\"id\":\"a\",\"cmd\":\"y\"}")
                .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "id"), "{e}");
        assert!(e.message.contains("first on line 1"), "{e}");
        assert_eq!(
            parse_tasks("\u{feff}{\"id\":\"a\",\"cmd\":\"x\"}")
                .unwrap()
                .len(),
            1
        );
        let e = parse_task_bytes(b"{\"id\":\"a\",\"cmd\":\"x\"}\n{\"id\":\"b\",\"cmd\":\"\xff\"}")
            .unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("UTF-8"), "{e}");
        for empty in ["", "\n\n  \n", "\u{feff}", "[]"] {
            let e = parse_tasks(empty).unwrap_err();
            assert!(e.to_string().starts_with("no tasks"), "{empty:?}: {e}");
        }
    }

    #[test]
    fn placeholders_out_of_range_are_refused() {
        let e = parse_tasks(r#"{"id":"a","cmd":"cat {inputs[1]}","inputs":["file:///x"]}"#)
            .unwrap_err();
        assert_eq!(e.field, "cmd");
        assert!(e.message.contains("{inputs[1]} is out of range"), "{e}");
        let e = parse_tasks(r#"{"id":"a","cmd":["cp","{outputs[0]}"]}"#).unwrap_err();
        assert!(e.message.contains("{outputs[0]}"), "{e}");
        assert!(
            parse_tasks(r#"{"id":"a","cmd":"cat {inputs[0]}","inputs":["file:///x"]}"#).is_ok()
        );
    }

    #[test]
    fn uris_are_put_in_canonical_form() {
        let t = parse_tasks(
            r#"{"id":"a","cmd":"true","inputs":["FILE:///d/my%20f","HTTP://H/q?v=1"],"outputs":["file://localhost/o"]}"#,
        )
        .unwrap();
        assert_eq!(t[0].inputs, ["file:///d/my%20f", "http://h/q?v=1"]);
        assert_eq!(t[0].outputs, ["file:///o"]);
        let e = parse_tasks(r#"{"id":"a","cmd":"true","outputs":["s3://b/k"]}"#).unwrap_err();
        assert_eq!(e.field, "outputs[0]");
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
