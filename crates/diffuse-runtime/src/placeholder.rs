//! `{inputs[i]}` and `{outputs[i]}` in a task's command: finding them (to refuse an index out of
//! range at submission) and replacing them with local paths (on the worker).
//!
//! In an argv command each placeholder becomes the path as is: no shell reads it. In a `sh -c`
//! string each path is quoted for the place it stands, so a path with a space, a quote or a `$`
//! stays one word with its exact bytes:
//!
//! | where | written as |
//! |---|---|
//! | outside quotes: `cat {inputs[0]}` | `'…'`, a `'` inside as `'\''` |
//! | inside single quotes: `cat '{inputs[0]}'` | the path, a `'` inside as `'\''` |
//! | inside double quotes: `cat "{inputs[0]}"` | the path, with `\` before `$`, `` ` ``, `"` and `\` |
//!
//! The quoting context is followed through `'…'`, `"…"` and backslash escapes; here-documents,
//! comments and `$'…'` are not parsed (a placeholder inside them is treated as if outside quotes).

use std::ops::Range;
use std::path::PathBuf;

/// Which list a placeholder indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `{inputs[i]}`
    Input,
    /// `{outputs[i]}`
    Output,
}

/// Every placeholder in `text`: its kind, index, and byte range.
pub fn find(text: &str) -> Vec<(Kind, usize, Range<usize>)> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(off) = text[at..].find('{') {
        let start = at + off;
        at = start + 1;
        let rest = &text[start..];
        let (kind, after) = if let Some(r) = rest.strip_prefix("{inputs[") {
            (Kind::Input, r)
        } else if let Some(r) = rest.strip_prefix("{outputs[") {
            (Kind::Output, r)
        } else {
            continue;
        };
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || !after[digits..].starts_with("]}") {
            continue;
        }
        let Ok(index) = after[..digits].parse::<usize>() else {
            continue;
        };
        let end = start + (rest.len() - after.len()) + digits + 2;
        found.push((kind, index, start..end));
        at = end;
    }
    found
}

/// `text` with every placeholder replaced by its path, unquoted (an argv element).
pub fn expand_plain(text: &str, inputs: &[PathBuf], outputs: &[PathBuf]) -> String {
    expand(text, inputs, outputs, |path, _| path.to_string())
}

/// `text` with every placeholder replaced by its path, quoted for the shell context it stands in
/// (a `sh -c` string).
pub fn expand_shell(text: &str, inputs: &[PathBuf], outputs: &[PathBuf]) -> String {
    expand(text, inputs, outputs, quote)
}

fn expand(
    text: &str,
    inputs: &[PathBuf],
    outputs: &[PathBuf],
    render: impl Fn(&str, Quoting) -> String,
) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut quoting = Quoting::None;
    let mut last = 0;
    for (kind, index, range) in find(text) {
        let path = match kind {
            Kind::Input => inputs.get(index),
            Kind::Output => outputs.get(index),
        };
        let Some(path) = path else { continue };
        quoting = follow(quoting, &text[last..range.start]);
        out.push_str(&text[last..range.start]);
        out.push_str(&render(&path.display().to_string(), quoting));
        last = range.end;
    }
    out.push_str(&text[last..]);
    out
}

/// What a pattern of [`substitute_shell`] becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// This text, quoted for its context.
    Quoted(String),
    /// This text as it is (e.g. a placeholder for the worker to expand).
    Raw(String),
}

/// `text` with every occurrence of a pattern of `subs` replaced by its value, quoted for the
/// shell context it stands in (as [`expand_shell`] does for paths). Where patterns overlap, the
/// longest wins.
pub fn substitute_shell(text: &str, subs: &[(&str, Value)]) -> String {
    let mut sorted: Vec<&(&str, Value)> = subs.iter().filter(|(p, _)| !p.is_empty()).collect();
    sorted.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    let mut out = String::with_capacity(text.len() + 32);
    let mut quoting = Quoting::None;
    let (mut last, mut i) = (0, 0);
    while i < text.len() {
        let hit = sorted.iter().find(|(p, _)| text[i..].starts_with(*p));
        match hit {
            Some((pattern, value)) => {
                quoting = follow(quoting, &text[last..i]);
                out.push_str(&text[last..i]);
                match value {
                    Value::Quoted(v) => out.push_str(&quote(v, quoting)),
                    Value::Raw(v) => out.push_str(v),
                }
                i += pattern.len();
                last = i;
            }
            None => i += text[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out.push_str(&text[last..]);
    out
}

/// The shell's quoting state at a point of a command string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quoting {
    None,
    Single,
    Double,
}

/// The quoting state after reading `text` in state `q`.
fn follow(mut q: Quoting, text: &str) -> Quoting {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        q = match (q, c) {
            (Quoting::None, '\\') | (Quoting::Double, '\\') => {
                chars.next();
                q
            }
            (Quoting::None, '\'') => Quoting::Single,
            (Quoting::None, '"') => Quoting::Double,
            (Quoting::Single, '\'') | (Quoting::Double, '"') => Quoting::None,
            _ => q,
        };
    }
    q
}

fn quote(path: &str, q: Quoting) -> String {
    match q {
        Quoting::None => format!("'{}'", path.replace('\'', r"'\''")),
        Quoting::Single => path.replace('\'', r"'\''"),
        Quoting::Double => {
            let mut s = String::with_capacity(path.len());
            for c in path.chars() {
                if matches!(c, '$' | '`' | '"' | '\\') {
                    s.push('\\');
                }
                s.push(c);
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> String {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .output()
            .expect("run sh");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn finds_placeholders_and_skips_lookalikes() {
        let f = find("cat {inputs[0]} {inputs[12]}>{outputs[1]} {inputs[x]} {inputs[3] {input[1]}");
        let got: Vec<(Kind, usize)> = f.iter().map(|(k, i, _)| (*k, *i)).collect();
        assert_eq!(
            got,
            vec![(Kind::Input, 0), (Kind::Input, 12), (Kind::Output, 1)]
        );
        assert_eq!(&"cat {inputs[0]}"[f[0].2.clone()], "{inputs[0]}");
    }

    #[test]
    fn shell_expansion_keeps_every_path_one_word_in_every_context() {
        let hostile = PathBuf::from("/tmp/a b/it's \"$HOME\" `x` \\ end");
        let inputs = [hostile.clone()];
        for template in [
            "printf '%s|' {inputs[0]}",
            "printf '%s|' '{inputs[0]}'",
            "printf '%s|' \"{inputs[0]}\"",
            "printf '%s|' pre{inputs[0]}post",
            "printf '%s|' \"x\\\"\" {inputs[0]}",
        ] {
            let script = expand_shell(template, &inputs, &[]);
            let printed = sh(&script);
            let want = hostile.display().to_string();
            assert!(
                printed
                    .split('|')
                    .any(|w| w == want || w == format!("pre{want}post")),
                "{template} -> {script} printed {printed:?}"
            );
        }
    }

    #[test]
    fn substitutions_are_quoted_for_their_context() {
        let subs = [
            ("{}", Value::Raw("{inputs[0]}".into())),
            ("{/}", Value::Quoted("it's a file.txt".into())),
            ("{#}", Value::Quoted("7".into())),
        ];
        let script = substitute_shell("printf '%s|' {/} \"{/}\" '{/}' {#} {}", &subs);
        assert!(script.ends_with(" '7' {inputs[0]}"), "{script}");
        let printed = sh(&script.replace("{inputs[0]}", "x"));
        assert_eq!(
            printed,
            "it's a file.txt|it's a file.txt|it's a file.txt|7|x|"
        );
    }

    #[test]
    fn plain_expansion_substitutes_verbatim() {
        let p = [PathBuf::from("/a b")];
        assert_eq!(expand_plain("x{inputs[0]}y", &p, &[]), "x/a by");
        assert_eq!(expand_plain("{inputs[1]}", &p, &[]), "{inputs[1]}");
    }
}
