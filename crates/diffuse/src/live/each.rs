//! One-line bags of tasks: `diffuse run --each 'md5sum {}' data/*.bin` makes one task per
//! argument, as GNU parallel's `parallel md5sum ::: data/*.bin` runs one command per argument.
//!
//! The template is a `sh -c` string with GNU parallel's replacement strings:
//!
//! | string | becomes |
//! |---|---|
//! | `{}` | the argument; if it names a file, the task reads it as a `file://` input and `{}` is the staged local path (`…/inputs/0/<its base name>`: `basename {}` is `{/}`) |
//! | `{.}` | the argument without its extension |
//! | `{/}` | its base name |
//! | `{//}` | its directory |
//! | `{/.}` | its base name without extension |
//! | `{#}` | its number, from 1 |
//!
//! A template with none of them gets ` {}` appended. Each value is quoted for the place it stands
//! in the shell string. The argument `-` reads the arguments from standard input, one per line.

use anyhow::{bail, Context, Result};
use diffuse_runtime::placeholder::{substitute_shell, Value};
use diffuse_runtime::spec::{parse_tasks, TaskDef};
use std::io::BufRead;
use std::path::Path;

/// The arguments: `args`, with `-` replaced by the lines of standard input.
pub fn arguments(args: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for a in args {
        if a == "-" {
            for line in std::io::stdin().lock().lines() {
                let line = line.context("reading arguments from standard input")?;
                if !line.is_empty() {
                    out.push(line);
                }
            }
        } else {
            out.push(a.clone());
        }
    }
    if out.is_empty() {
        bail!("--each: no arguments (give them after the template, or - to read standard input)");
    }
    Ok(out)
}

const STRINGS: [&str; 6] = ["{}", "{.}", "{/}", "{//}", "{/.}", "{#}"];

/// One task per argument, ids `<prefix><n>`.
pub fn tasks(template: &str, args: &[String], prefix: &str) -> Result<Vec<TaskDef>> {
    let template = if STRINGS.iter().any(|s| template.contains(s)) {
        template.to_string()
    } else {
        format!("{template} {{}}")
    };
    let mut lines = String::new();
    for (i, arg) in args.iter().enumerate() {
        let n = i + 1;
        let path = Path::new(arg);
        let is_file = path.is_file();
        let without_ext = |p: &str| -> String {
            let path = Path::new(p);
            match (path.extension(), path.file_name()) {
                (Some(ext), Some(_)) => p[..p.len() - ext.len() - 1].to_string(),
                _ => p.to_string(),
            }
        };
        let base = path
            .file_name()
            .map_or_else(|| arg.clone(), |b| b.to_string_lossy().into_owned());
        let dir = path
            .parent()
            .map(|d| d.display().to_string())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| ".".into());
        let first = if is_file {
            Value::Raw("{inputs[0]}".into())
        } else {
            Value::Quoted(arg.clone())
        };
        let subs = [
            ("{}", first),
            ("{.}", Value::Quoted(without_ext(arg))),
            ("{/}", Value::Quoted(base.clone())),
            ("{//}", Value::Quoted(dir)),
            ("{/.}", Value::Quoted(without_ext(&base))),
            ("{#}", Value::Quoted(n.to_string())),
        ];
        let cmd = substitute_shell(&template, &subs);
        let mut task = serde_json::json!({"id": format!("{prefix}{n}"), "cmd": cmd});
        if is_file {
            let abs = std::path::absolute(path)?;
            let uri = diffuse_runtime::uri::from_path(&abs)
                .ok_or_else(|| anyhow::anyhow!("{arg}: not an absolute path"))?;
            task["inputs"] = serde_json::json!([uri]);
        }
        lines.push_str(&task.to_string());
        lines.push('\n');
    }
    parse_tasks(&lines).map_err(|e| anyhow::anyhow!("--each: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use diffuse_runtime::spec::Cmd;

    #[test]
    fn files_become_inputs_and_other_arguments_literals() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("my data.bin");
        std::fs::write(&f, b"x").unwrap();
        let args = vec![f.display().to_string(), "plain word".to_string()];
        let t = tasks("md5sum {} > {/.}.md5", &args, "p").unwrap();
        assert_eq!((t[0].id.as_str(), t[1].id.as_str()), ("p1", "p2"));
        assert_eq!(t[0].inputs.len(), 1);
        assert!(
            t[0].inputs[0].ends_with("my%20data.bin"),
            "{:?}",
            t[0].inputs
        );
        assert_eq!(
            t[0].cmd,
            Cmd::Shell("md5sum {inputs[0]} > 'my data'.md5".into())
        );
        assert!(t[1].inputs.is_empty());
        assert_eq!(
            t[1].cmd,
            Cmd::Shell("md5sum 'plain word' > 'plain word'.md5".into())
        );
        // No replacement string: the argument is appended.
        let t = tasks("echo", &["a".to_string()], "").unwrap();
        assert_eq!(t[0].cmd, Cmd::Shell("echo 'a'".into()));
        assert_eq!(t[0].id, "1");
    }
}
