//! A task's identity: what determines its result (docs/runtime.md, "Results reused by content").
//!
//! A SHA-256 over a length-prefixed encoding of, in order: a version tag, the command as written
//! (placeholders symbolic), the task's `env` (sorted), each input as written by its content
//! digest, each `file://` output's URI (a `tmp://` output by its position only), and the digests
//! of the program files its command names. Nothing
//! here reads a file or a clock: the digests come in as arguments.

use crate::spec::{Cmd, TaskDef};
use sha2::{Digest, Sha256};

/// Bumped when these rules change, so that an identity made by other rules never matches.
const TAG: &[u8] = b"diffuse-identity-1";

/// A task's identity (or an in-flight key, [`Content::Version`]): 32 bytes.
pub type Identity = [u8; 32];

/// What stands for one input's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Content<'a> {
    /// Its SHA-256 (lowercase hex), known: the identity proper.
    Digest(&'a str),
    /// Not yet known: its URI and source version. Two tasks in flight with the same key read
    /// the same bytes, so the second waits for the first; such a key is never kept as a
    /// result's identity.
    Version(&'a str, &'a str),
}

/// Whether a task's result may stand for later identical tasks: its `reuse` field, else
/// whether it declares an input or an output (a task with neither is run for what it does, or
/// is one of many replicas).
pub fn reusable(def: &TaskDef) -> bool {
    match def.more.as_ref().and_then(|m| m.reuse) {
        Some(r) => r,
        None => !def.inputs.is_empty() || !def.outputs.is_empty(),
    }
}

fn put(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// The identity of `def` with `inputs[i]` standing for `def.inputs[i]` (as written, repeats
/// included).
pub fn identity(def: &TaskDef, inputs: &[Content<'_>]) -> Identity {
    debug_assert_eq!(inputs.len(), def.inputs.len());
    let mut h = Sha256::new();
    put(&mut h, TAG);
    match &def.cmd {
        Cmd::Argv(argv) => {
            put(&mut h, b"argv");
            h.update((argv.len() as u64).to_le_bytes());
            for a in argv.iter() {
                put(&mut h, a.as_bytes());
            }
        }
        Cmd::Shell(line) => {
            put(&mut h, b"sh");
            put(&mut h, line.as_bytes());
        }
        // The function's bytes are an input (by content, below); what else makes the call:
        // its arguments, its entry, and the environment it runs in.
        Cmd::Call(call) => {
            put(&mut h, b"call");
            let json = serde_json::to_vec(&**call).expect("a call serializes");
            put(&mut h, &json);
        }
    }
    let more = def.more();
    h.update((more.env.len() as u64).to_le_bytes());
    for (k, v) in &more.env {
        put(&mut h, k.as_bytes());
        put(&mut h, v.as_bytes());
    }
    h.update((inputs.len() as u64).to_le_bytes());
    for c in inputs {
        match c {
            Content::Digest(d) => {
                put(&mut h, b"d");
                put(&mut h, d.to_ascii_lowercase().as_bytes());
            }
            Content::Version(uri, version) => {
                put(&mut h, b"v");
                put(&mut h, uri.as_bytes());
                put(&mut h, version.as_bytes());
            }
        }
    }
    h.update((def.outputs.len() as u64).to_le_bytes());
    for o in def.outputs.iter() {
        // A `tmp://` output's name is a label for its readers: the process writes
        // `outputs/<i>` and never sees it, so it is not part of what the task computes.
        match crate::uri::is_tmp(o) {
            true => put(&mut h, b"tmp"),
            false => put(&mut h, o.as_bytes()),
        }
    }
    h.update((more.programs.len() as u64).to_le_bytes());
    for (path, sha) in &more.programs {
        put(&mut h, path.as_bytes());
        put(&mut h, sha.to_ascii_lowercase().as_bytes());
    }
    // Last, and only when set, so that the identities of tasks without one are unchanged: a
    // relative path in the command means another file in another directory.
    if let Some(cwd) = &more.cwd {
        put(&mut h, b"cwd");
        put(&mut h, cwd.as_bytes());
    }
    h.finalize().into()
}

/// Lowercase hex of an identity, as shown and stored.
pub fn hex(id: &Identity) -> String {
    hex::encode(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_tasks;

    fn task(json: &str) -> TaskDef {
        parse_tasks(json).unwrap().remove(0)
    }

    const D1: &str = "aa00000000000000000000000000000000000000000000000000000000000000";
    const D2: &str = "bb00000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn a_working_directory_is_part_of_the_identity() {
        let a = task(r#"{"id":"a","cmd":["bin/tool"],"outputs":["file:///o/y"]}"#);
        let b = task(r#"{"id":"b","cmd":["bin/tool"],"outputs":["file:///o/y"],"cwd":"/w1"}"#);
        let c = task(r#"{"id":"c","cmd":["bin/tool"],"outputs":["file:///o/y"],"cwd":"/w2"}"#);
        let (a, b, c) = (identity(&a, &[]), identity(&b, &[]), identity(&c, &[]));
        assert!(a != b && b != c && a != c);
    }

    #[test]
    fn the_same_command_env_inputs_and_outputs_make_the_same_identity_whatever_the_id() {
        let a = task(
            r#"{"id":"a","cmd":["wc","{inputs[0]}"],"inputs":["file:///d/x"],"outputs":["file:///o/y"],"env":{"K":"1"},"priority":3}"#,
        );
        let b = task(
            r#"{"id":"b","cmd":["wc","{inputs[0]}"],"inputs":["file:///d/other"],"outputs":["file:///o/y"],"env":{"K":"1"},"cores":2}"#,
        );
        assert_eq!(
            identity(&a, &[Content::Digest(D1)]),
            identity(&b, &[Content::Digest(D1)]),
            "content, not names, of inputs; resources and priority are not part of it"
        );
    }

    #[test]
    fn each_part_changes_the_identity() {
        let base = r#"{"id":"a","cmd":["wc","{inputs[0]}"],"inputs":["file:///d/x"],"outputs":["file:///o/y"]}"#;
        let id = |json: &str, d: &str| identity(&task(json), &[Content::Digest(d)]);
        // The base task with `extra` fields added.
        let with = |extra: &str| format!("{},{extra}}}", &base[..base.len() - 1]);
        let first = id(base, D1);
        assert_ne!(first, id(base, D2), "input content");
        assert_ne!(first, id(&base.replace("\"wc\"", "\"cat\""), D1), "command");
        assert_ne!(first, id(&base.replace("/o/y", "/o/z"), D1), "output name");
        let tmp = base.replace("file:///o/y", "tmp://y");
        assert_ne!(first, id(&tmp, D1), "a file:// output is not a tmp:// one");
        assert_eq!(
            id(&tmp, D1),
            id(&tmp.replace("tmp://y", "tmp://run2-y"), D1),
            "a tmp:// output's name is a label, not part of the result"
        );
        assert_ne!(first, id(&with(r#""env":{"A":"b"}"#), D1), "environment");
        let with_program = with(&format!(r#""programs":{{"/s/run.py":"{D1}"}}"#));
        let edited = with(&format!(r#""programs":{{"/s/run.py":"{D2}"}}"#));
        assert_ne!(first, id(&with_program, D1), "program");
        assert_ne!(id(&with_program, D1), id(&edited, D1), "edited program");
        let shell = r#"{"id":"a","cmd":"wc {inputs[0]}","inputs":["file:///d/x"],"outputs":["file:///o/y"]}"#;
        assert_ne!(
            first,
            id(shell, D1),
            "a shell line is not the argv of its words"
        );
    }

    #[test]
    fn a_version_key_never_equals_a_content_identity() {
        let t = task(r#"{"id":"a","cmd":["wc","{inputs[0]}"],"inputs":["file:///d/x"]}"#);
        assert_ne!(
            identity(&t, &[Content::Digest(D1)]),
            identity(&t, &[Content::Version("file:///d/x", D1)])
        );
    }

    #[test]
    fn tasks_without_inputs_or_outputs_are_reused_only_when_they_say() {
        assert!(!reusable(&task(r#"{"id":"a","cmd":"date"}"#)));
        assert!(reusable(&task(
            r#"{"id":"a","cmd":"echo hi","reuse":true}"#
        )));
        assert!(reusable(&task(
            r#"{"id":"a","cmd":"wc","outputs":["tmp://x"]}"#
        )));
        assert!(!reusable(&task(
            r#"{"id":"a","cmd":"wc","outputs":["tmp://x"],"reuse":false}"#
        )));
    }
}
