//! A function task's program: a call run in a warm Python process on the worker
//! ([`crate::worker`]'s warm pools), instead of a command (docs/warm.md). Written as the task's
//! `call` object; carried as [`super::Cmd::Call`], so a call is one more way to give a task's
//! program and everything else about the task (inputs, placement, retries, journal, identity)
//! is unchanged.

use serde::{Deserialize, Serialize};

/// Most bytes of inline arguments (`args`, before base64); larger ones go as an input.
pub const MAX_INLINE_ARGS: usize = 256 << 10;

/// How calls are kept apart in a warm process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Each call in a child forked from the warm process: nothing a call does reaches another.
    #[default]
    Fork,
    /// Calls of one function one after another in a process kept for it: state left by a call
    /// is seen by the next (as in HTEX, Dask, Ray), no fork per call.
    Reuse,
}

impl Isolation {
    /// The name, as in the task file and `python -m diffuse_client.warm --mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Fork => "fork",
            Isolation::Reuse => "reuse",
        }
    }
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

fn python3() -> String {
    "python3".into()
}

fn is_python3(s: &str) -> bool {
    s == "python3"
}

/// A call: which entry runs which function on which arguments, in which warm environment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// Index in the task's inputs of the serialized function (cached like any input).
    #[serde(rename = "fn")]
    pub fn_input: u32,
    /// The argument bytes, base64 (standard alphabet, padded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// Index in the task's inputs of the argument bytes, instead of `args`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_input: Option<u32>,
    /// `module:function`, called as `function(fn_path, args, inputs)` in the warm process.
    pub entry: String,
    /// The interpreter: a path, or a name looked up in the worker's `PATH`.
    #[serde(default = "python3", skip_serializing_if = "is_python3")]
    pub python: String,
    /// Modules imported before the first call (and before forking).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preload: Vec<String>,
    /// Code run once in the warm process after the preloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// Fork per call (default) or reuse a process per function.
    #[serde(default, skip_serializing_if = "is_default")]
    pub isolation: Isolation,
}

/// A dotted Python module path: `a.b_c`.
fn module_path(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            let mut c = part.chars();
            c.next()
                .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
                && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        })
}

impl Call {
    /// What its fields must be, given the task's number of inputs: the field and the problem.
    pub fn check(&self, inputs: usize) -> Result<(), (String, String)> {
        let bad = |field: &str, msg: String| Err((format!("call.{field}"), msg));
        if self.fn_input as usize >= inputs {
            return bad(
                "fn",
                format!(
                    "input {} is out of range: the task has {inputs} inputs",
                    self.fn_input
                ),
            );
        }
        match (&self.args, self.args_input) {
            (Some(_), Some(_)) => return bad("args", "give args or args_input, not both".into()),
            (None, Some(i)) if i as usize >= inputs => {
                return bad(
                    "args_input",
                    format!("input {i} is out of range: the task has {inputs} inputs"),
                )
            }
            (Some(a), None) => {
                use base64::Engine;
                match base64::engine::general_purpose::STANDARD.decode(a) {
                    Err(e) => return bad("args", format!("not base64: {e}")),
                    Ok(b) if b.len() > MAX_INLINE_ARGS => {
                        return bad(
                            "args",
                            format!(
                                "{} bytes: at most {MAX_INLINE_ARGS} inline; give larger arguments as an input (args_input)",
                                b.len()
                            ),
                        )
                    }
                    Ok(_) => {}
                }
            }
            _ => {}
        }
        match self.entry.split_once(':') {
            Some((module, function))
                if module_path(module) && module_path(function) && !function.contains('.') => {}
            _ => {
                return bad(
                    "entry",
                    format!(
                        "'{}' must be module:function (a dotted module path, a name)",
                        self.entry
                    ),
                )
            }
        }
        if self.python.is_empty() || self.python.contains('\0') || self.python.len() > 4096 {
            return bad("python", "must be an interpreter's path or name".into());
        }
        if let Some(m) = self.preload.iter().find(|m| !module_path(m)) {
            return bad("preload", format!("'{m}' is not a module path"));
        }
        if self.setup.as_ref().is_some_and(|s| s.len() > 64 << 10) {
            return bad("setup", "at most 64 KiB of code".into());
        }
        Ok(())
    }

    /// The argument bytes given inline (empty when none or given as an input).
    pub fn inline_args(&self) -> Vec<u8> {
        use base64::Engine;
        self.args
            .as_ref()
            .and_then(|a| base64::engine::general_purpose::STANDARD.decode(a).ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(json: serde_json::Value) -> Result<Call, String> {
        serde_json::from_value::<Call>(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_call_is_checked_against_the_tasks_inputs() {
        let c = call(serde_json::json!({"fn": 0, "entry": "m:f", "args": "aGk="})).unwrap();
        assert_eq!(c.check(1), Ok(()));
        assert_eq!(c.inline_args(), b"hi");
        assert_eq!(c.python, "python3");
        assert_eq!(c.isolation, Isolation::Fork);
        assert!(c.check(0).unwrap_err().1.contains("out of range"));
        for (json, field) in [
            (
                serde_json::json!({"fn": 0, "entry": "nocolon"}),
                "call.entry",
            ),
            (serde_json::json!({"fn": 0, "entry": "m:f.g"}), "call.entry"),
            (serde_json::json!({"fn": 0, "entry": "1m:f"}), "call.entry"),
            (
                serde_json::json!({"fn": 0, "entry": "m:f", "args": "!!"}),
                "call.args",
            ),
            (
                serde_json::json!({"fn": 0, "entry": "m:f", "args": "", "args_input": 0}),
                "call.args",
            ),
            (
                serde_json::json!({"fn": 0, "entry": "m:f", "args_input": 3}),
                "call.args_input",
            ),
            (
                serde_json::json!({"fn": 0, "entry": "m:f", "preload": ["os", "a b"]}),
                "call.preload",
            ),
            (
                serde_json::json!({"fn": 0, "entry": "m:f", "python": ""}),
                "call.python",
            ),
        ] {
            let e = call(json.clone()).unwrap().check(1).unwrap_err();
            assert_eq!(e.0, field, "{json}: {e:?}");
        }
        assert!(call(serde_json::json!({"fn": 0, "entry": "m:f", "colour": 1})).is_err());
        assert!(call(serde_json::json!({"fn": 0, "entry": "m:f", "isolation": "thread"})).is_err());
    }

    #[test]
    fn defaults_are_not_written() {
        let c = call(serde_json::json!({"fn": 1, "entry": "a.b:c"})).unwrap();
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            serde_json::json!({"fn": 1, "entry": "a.b:c"})
        );
    }
}
