//! Task files: one JSON object per line (`.jsonl`) or a JSON array, with the fields of
//! `shared/design/brief.md` and docs/runtime.md ("Task fields"). Parsing is all-or-nothing: an
//! error names the line and the field, and no task of the batch is accepted.

mod call;
mod def;
mod error;
mod one_pass;
mod values;

pub use call::{Call, Isolation};
pub use def::{Cmd, Hint, MemoryLimit, TaskDef, TaskDefaults, TaskMore};
pub use error::SpecError;

fn parse_one(text: &str, line: usize) -> Result<TaskDef, SpecError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let wire: def::TaskWire = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        SpecError {
            line,
            field,
            message: e.into_inner().to_string(),
        }
    })?;
    wire.check(line)
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
            Cmd::Argv(vec!["wc".into(), "-c".into(), "{inputs[0]}".into()].into())
        );
        assert_eq!(t[0].job(), "default");
        assert_eq!(t[1].job(), "j");
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
        assert_eq!(t[0].inputs[..], ["file:///d/my%20f", "http://h/q?v=1"]);
        assert_eq!(t[0].outputs[..], ["file:///o"]);
        let e = parse_tasks(r#"{"id":"a","cmd":"true","outputs":["s3://b/k"]}"#).unwrap_err();
        assert_eq!(e.field, "outputs[0]");
    }

    #[test]
    fn optional_fields_are_checked_and_kept_apart() {
        let t = parse_tasks(
            r#"{"id":"a","cmd":"true","cores":2,"memory":"4GB","gpus":1,"disk":1000,"timeout_s":1.5,"retries":2,"env":{"X":"1"},"priority":-3,"stdout":"file:///logs/{id}.{attempt}.out","stderr":"s3://b/{id}.err"}"#,
        )
        .unwrap();
        let m = t[0].more.as_ref().expect("fields kept");
        assert_eq!(
            (m.cores, m.memory, m.gpus, m.disk, m.retries, m.priority),
            (
                Some(2),
                Some(4_000_000_000),
                Some(1),
                Some(1000),
                Some(2),
                -3
            )
        );
        assert_eq!(m.timeout_s, Some(1.5));
        assert_eq!(m.env["X"], "1");
        // A task of defaults keeps nothing extra.
        let t = parse_tasks(r#"{"id":"a","cmd":"true","job":"default","gpus":0}"#).unwrap();
        assert!(t[0].more.is_none());
        // Through the journal's form and back.
        let def = parse_tasks(r#"{"id":"a","cmd":"x","memory":"1KiB","priority":4}"#).unwrap();
        let json = serde_json::to_string(&def[0]).unwrap();
        let back: TaskDef = serde_json::from_str(&json).unwrap();
        assert_eq!(back, def[0]);
        for (task, field) in [
            (r#"{"id":"a","cmd":"x","cores":0}"#, "cores"),
            (r#"{"id":"a","cmd":"x","memory":"4XB"}"#, "memory"),
            (r#"{"id":"a","cmd":"x","memory":-1}"#, "memory"),
            (r#"{"id":"a","cmd":"x","timeout_s":0}"#, "timeout_s"),
            (r#"{"id":"a","cmd":"x","retries":-1}"#, "retries"),
            (r#"{"id":"a","cmd":"x","priority":40000}"#, "priority"),
            (
                r#"{"id":"a","cmd":"x","eviction_priority":40000}"#,
                "eviction_priority",
            ),
            (r#"{"id":"a","cmd":"x","dad_beta":1.5}"#, "dad_beta"),
            (r#"{"id":"a","cmd":"x","job_policy":"lru"}"#, "job_policy"),
            (r#"{"id":"a","cmd":"x","hint":{"slot":"a"}}"#, "hint"),
            (r#"{"id":"a","cmd":"x","env":{"A=B":"1"}}"#, "env.A=B"),
            (
                r#"{"id":"a","cmd":"x","env":{"DIFFUSE_X":"1"}}"#,
                "env.DIFFUSE_X",
            ),
            (r#"{"id":"a","cmd":"x","env":{"A":1}}"#, "env.A"),
            (r#"{"id":"a","cmd":"x","stdout":"http://h/x"}"#, "stdout"),
        ] {
            let e = parse_tasks(task).unwrap_err();
            assert_eq!(e.field, field, "{task}: {e}");
        }
    }

    #[test]
    fn memory_is_the_request_and_memory_limit_the_limit() {
        let limit = |task: &str| parse_tasks(task).unwrap()[0].more().enforced_memory();
        // The limit defaults to the request, as Slurm's --mem (and as task files written
        // before memory_limit existed).
        assert_eq!(
            limit(r#"{"id":"a","cmd":"x","memory":"4GB"}"#),
            Some(4_000_000_000)
        );
        // "none": a request only, no cgroup limit (what the Parsl executor sends).
        let t = r#"{"id":"a","cmd":"x","memory":"1MiB","memory_limit":"none"}"#;
        assert_eq!(limit(t), None);
        assert_eq!(parse_tasks(t).unwrap()[0].more().memory, Some(1 << 20));
        assert_eq!(
            limit(r#"{"id":"a","cmd":"x","memory":"1MB","memory_limit":"50MB"}"#),
            Some(50_000_000)
        );
        assert_eq!(
            limit(r#"{"id":"a","cmd":"x","memory_limit":1000000}"#),
            Some(1_000_000)
        );
        assert_eq!(limit(r#"{"id":"a","cmd":"x"}"#), None);
        // "none" without a request is the default: nothing kept.
        let t = parse_tasks(r#"{"id":"a","cmd":"x","memory_limit":"None"}"#).unwrap();
        assert!(t[0].more.is_none(), "{:?}", t[0].more);
        // Through the journal's form and back.
        for task in [
            r#"{"id":"a","cmd":"x","memory":"1MiB","memory_limit":"none"}"#,
            r#"{"id":"a","cmd":"x","memory":"1MiB","memory_limit":"2GiB"}"#,
        ] {
            let def = parse_tasks(task).unwrap();
            let json = serde_json::to_string(&def[0]).unwrap();
            let back: TaskDef = serde_json::from_str(&json).unwrap();
            assert_eq!(back, def[0], "{json}");
        }
        for (task, says) in [
            (
                r#"{"id":"a","cmd":"x","memory":"100MB","memory_limit":"50MB"}"#,
                "50MB is below its memory (100MB)",
            ),
            (
                r#"{"id":"a","cmd":"x","memory_limit":0}"#,
                "must be more than 0 bytes",
            ),
            (
                r#"{"id":"a","cmd":"x","memory_limit":"lots"}"#,
                "or \"none\"",
            ),
            (
                r#"{"id":"a","cmd":"x","memory_limit":"4XB"}"#,
                "unknown unit",
            ),
        ] {
            let e = parse_tasks(task).unwrap_err();
            assert_eq!(e.field, "memory_limit", "{task}: {e}");
            assert!(e.message.contains(says), "{task}: {e}");
        }
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
