//! The program files a task's command names, hashed by the client that submits it (the
//! dispatcher does not see the submitter's files): each word of the command that names a
//! program file, absolute or relative to the task's `cwd` (else the task file's directory), gets its SHA-256 in the
//! task's `programs`. A program file is a regular file that is executable or whose name ends
//! as a script's does ([`SCRIPT_ENDINGS`]): a data file the command names (a log it appends
//! to, a file it writes) is not one, or its every change would make the task new. Programs
//! found on `PATH` (`python3`, `bwa`) are not hashed; see docs/runtime.md, "Results reused by
//! content", for why.

use crate::spec::{Cmd, TaskDef};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Fills in `programs` for tasks that may be reused, memoizing each file's digest: a million
/// tasks that run one script hash it once.
#[derive(Default)]
pub struct ProgramHasher {
    base: PathBuf,
    seen: HashMap<String, Option<String>>,
}

impl ProgramHasher {
    /// Relative words are looked up under `base` (the task file's directory).
    pub fn new(base: &Path) -> ProgramHasher {
        ProgramHasher {
            base: base.to_path_buf(),
            seen: HashMap::new(),
        }
    }

    /// Add the digest of every program file `def`'s command names to its `programs` (a task
    /// marked `reuse: false` is left alone).
    pub fn fill(&mut self, def: &mut TaskDef) {
        if def.more.as_ref().and_then(|m| m.reuse) == Some(false) {
            return;
        }
        let words: Vec<String> = match &def.cmd {
            Cmd::Argv(argv) => argv.iter().cloned().collect(),
            Cmd::Shell(line) => shell_words(line),
            // A call's code is its function input, hashed by content already.
            Cmd::Call(_) => Vec::new(),
        };
        let cwd = def
            .more
            .as_ref()
            .and_then(|m| m.cwd.clone())
            .map(PathBuf::from);
        for w in words {
            if let Some(sha) = self.digest(cwd.as_deref(), &w) {
                def.more
                    .get_or_insert_with(Default::default)
                    .programs
                    .insert(w, sha);
            }
        }
    }

    /// The digest of the program file `word` names, relative to `cwd` or else the base.
    fn digest(&mut self, cwd: Option<&Path>, word: &str) -> Option<String> {
        if word.is_empty() || word.contains('{') || word.contains('\0') || word.len() > 4096 {
            return None;
        }
        let path = cwd.unwrap_or(&self.base).join(word);
        let key = path.to_string_lossy().into_owned();
        if let Some(d) = self.seen.get(&key) {
            return d.clone();
        }
        let d = std::fs::metadata(&path)
            .ok()
            .filter(|m| m.is_file() && (executable(m) || is_script(word)))
            .and_then(|_| crate::cache_dir::sha256_file(&path).ok())
            .map(|(_, sha)| sha);
        self.seen.insert(key, d.clone());
        d
    }
}

/// Name endings of scripts run by an interpreter named before them (`python3 run.py`).
pub const SCRIPT_ENDINGS: &[&str] = &[
    ".py", ".sh", ".bash", ".R", ".r", ".pl", ".rb", ".js", ".jl", ".awk", ".sed", ".lua", ".tcl",
    ".m", ".smk", ".nf", ".wdl", ".cwl", ".jar",
];

fn is_script(word: &str) -> bool {
    SCRIPT_ENDINGS.iter().any(|e| word.ends_with(e))
}

fn executable(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o111 != 0
}

/// The words of a shell line, roughly: split at blanks and shell punctuation, quotes removed.
/// Over-inclusion is harmless (a word that is no file is skipped).
fn shell_words(line: &str) -> Vec<String> {
    line.split(|c: char| c.is_whitespace() || ";|&()<>`".contains(c))
        .map(|w| w.trim_matches(|c| c == '\'' || c == '"'))
        .map(|w| w.split_once('=').map_or(w, |(_, v)| v))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_tasks;

    #[test]
    fn a_script_named_in_the_command_is_hashed_and_an_edit_changes_its_digest() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("run.py"), "print(1)\n").unwrap();
        std::fs::write(d.path().join("x"), "data").unwrap();
        let abs = d.path().join("run.py").display().to_string();
        let text = format!(
            "{{\"id\":\"a\",\"cmd\":\"python3 run.py {{inputs[0]}} >> x\",\"inputs\":[\"file:///x\"]}}\n\
             {{\"id\":\"b\",\"cmd\":[\"python3\",\"{abs}\"],\"inputs\":[\"file:///x\"]}}\n\
             {{\"id\":\"c\",\"cmd\":[\"python3\",\"{abs}\"],\"reuse\":false}}"
        );
        let mut defs = parse_tasks(&text).unwrap();
        let mut h = ProgramHasher::new(d.path());
        for t in &mut defs {
            h.fill(t);
        }
        let a = &defs[0].more().programs;
        assert_eq!(a.len(), 1, "only run.py names a program (x is data): {a:?}");
        assert_eq!(a["run.py"].len(), 64);
        assert_eq!(defs[1].more().programs[&abs], a["run.py"]);
        assert!(
            defs[2].more().programs.is_empty(),
            "not reusable: not hashed"
        );
        std::fs::write(d.path().join("run.py"), "print(2)\n").unwrap();
        let mut again = parse_tasks(&text).unwrap();
        ProgramHasher::new(d.path()).fill(&mut again[0]);
        assert_ne!(again[0].more().programs["run.py"], a["run.py"]);
    }
}
