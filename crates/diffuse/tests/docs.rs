//! The docs name what the code has: every subcommand of `diffuse --help` is in the README's
//! command table, in docs/architecture.md's crate table and in main.rs's doc comment, every
//! public module of a library crate is in its `lib.rs` module map, every module a file with a
//! `//! | module |` table declares is in that table, every `handle_*`/`poll_*` call of the core
//! and every `Action` variant is in docs/architecture.md's API block, the dispatcher's route
//! table is the routes it serves, and the "Add a task field" recipe names every file a task
//! field is read in. A command, module, handler, action, route or field's place added without
//! its doc line fails here.
//!
//! `DIFFUSE_DOCS_ROOT=<dir>` checks the files of another tree (an older commit's `git archive`)
//! instead of this checkout's, against this build's `diffuse --help`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    match std::env::var_os("DIFFUSE_DOCS_ROOT") {
        Some(root) => PathBuf::from(root),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    }
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The subcommands `diffuse --help` lists (clap's "Commands:" section), `help` aside.
fn subcommands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_diffuse"))
        .arg("--help")
        .output()
        .expect("run diffuse --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let section = help
        .split("Commands:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Commands: in\n{help}"));
    let names: Vec<String> = section
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|n| n != "help")
        .collect();
    assert!(names.len() >= 17, "{names:?} from\n{help}");
    names
}

#[test]
fn every_subcommand_is_in_the_readme_and_the_architecture() {
    let readme = read("README.md");
    let table = readme
        .split("## Commands")
        .nth(1)
        .expect("README.md has a ## Commands section");
    let table = table.split("\n## ").next().unwrap();
    let arch = read("docs/architecture.md");
    let row = arch
        .lines()
        .find(|l| l.starts_with("| `crates/diffuse` |"))
        .expect("docs/architecture.md's crate table has crates/diffuse");
    let mut missing = Vec::new();
    for cmd in subcommands() {
        if !table.contains(&format!("| `diffuse {cmd}` |")) {
            missing.push(format!("README.md ## Commands: `diffuse {cmd}`"));
        }
        if !row.contains(&format!("`{cmd}`")) {
            missing.push(format!("docs/architecture.md, crates/diffuse: `{cmd}`"));
        }
    }
    assert!(missing.is_empty(), "missing from the docs: {missing:#?}");
}

#[test]
fn every_subcommand_is_in_main_rs_doc_comment() {
    let main = read("crates/diffuse/src/main.rs");
    let doc: String = main
        .lines()
        .filter(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let missing: Vec<String> = subcommands()
        .into_iter()
        .filter(|cmd| !doc.contains(&format!("`{cmd}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "subcommands missing from crates/diffuse/src/main.rs's doc comment: {missing:?}"
    );
}

#[test]
fn every_public_module_is_in_its_crates_module_map() {
    let mut missing = Vec::new();
    for krate in ["diffuse-core", "diffuse-sim", "diffuse-runtime"] {
        let lib = read(&format!("crates/{krate}/src/lib.rs"));
        let map: String = lib
            .lines()
            .filter(|l| l.starts_with("//! |"))
            .collect::<Vec<_>>()
            .join("\n");
        for module in lib
            .lines()
            .filter_map(|l| l.strip_prefix("pub mod "))
            .map(|m| m.trim_end_matches(';'))
        {
            if !map.contains(&format!("[`{module}`]")) {
                missing.push(format!("{krate}: {module}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "modules missing from a lib.rs map: {missing:?}"
    );
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_declared_module_is_in_its_files_module_table() {
    let mut files = Vec::new();
    for krate in ["diffuse-core", "diffuse-sim", "diffuse-runtime", "diffuse"] {
        rust_files(&repo().join("crates").join(krate).join("src"), &mut files);
    }
    let mut missing = Vec::new();
    let mut tables = 0;
    for file in files {
        let src = std::fs::read_to_string(&file).expect("read a source file");
        if !src.lines().any(|l| l.starts_with("//! | module |")) {
            continue;
        }
        tables += 1;
        let table: String = src
            .lines()
            .filter(|l| l.starts_with("//! |"))
            .collect::<Vec<_>>()
            .join("\n");
        // Top-level `mod x;` declarations; test modules (`#[cfg(test)]` on the line before, or
        // inline `mod x {`) are not counted.
        let lines: Vec<&str> = src.lines().collect();
        for module in lines.iter().enumerate().filter_map(|(i, l)| {
            if i > 0 && lines[i - 1].trim() == "#[cfg(test)]" {
                return None;
            }
            let decl = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
                .or_else(|| l.strip_prefix("mod "))?;
            decl.strip_suffix(';')
        }) {
            if !table.contains(&format!("`{module}`")) {
                missing.push(format!("{}: {module}", file.display()));
            }
        }
    }
    assert!(tables >= 5, "found only {tables} files with a module table");
    assert!(
        missing.is_empty(),
        "modules missing from their file's module table: {missing:#?}"
    );
}

#[test]
fn every_core_call_and_action_is_in_the_architecture_api_block() {
    let arch = read("docs/architecture.md");
    let block = arch
        .split("## The core's API")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("docs/architecture.md has an API block under ## The core's API");
    let mut files = vec![repo().join("crates/diffuse-core/src/core.rs")];
    rust_files(&repo().join("crates/diffuse-core/src/core"), &mut files);
    let mut missing = Vec::new();
    let mut calls = 0;
    for file in files {
        let src = std::fs::read_to_string(&file).expect("read a core source file");
        for name in src.lines().filter_map(|l| {
            let f = l.trim_start().strip_prefix("pub fn ")?;
            let name = f.split(['(', '<']).next()?;
            (name.starts_with("handle_") || name.starts_with("poll_")).then_some(name)
        }) {
            calls += 1;
            if !block.contains(&format!("{name}(")) {
                missing.push(format!("Core::{name}"));
            }
        }
    }
    assert!(
        calls >= 30,
        "found only {calls} handle_/poll_ calls in the core"
    );
    let action = read("crates/diffuse-core/src/action.rs");
    let body = action
        .split("pub enum Action {")
        .nth(1)
        .and_then(|s| s.split("\n}").next())
        .expect("action.rs has enum Action");
    let variants: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .filter_map(|l| l.trim().split(['(', ' ', ',', '{']).next())
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        .collect();
    assert!(variants.len() >= 9, "{variants:?}");
    for v in variants {
        if !block.contains(&format!("{v}{{")) && !block.contains(&format!("{v}(")) {
            missing.push(format!("Action::{v}"));
        }
    }
    assert!(
        missing.is_empty(),
        "missing from docs/architecture.md's API block: {missing:#?}"
    );
}

/// `scripts/structure.py`: no source or test file over 1,000 lines, no function over 150, no
/// import circle between files.
#[test]
fn no_long_file_no_long_function_no_import_circle() {
    let out = std::process::Command::new("python3")
        .arg(repo().join("scripts/structure.py"))
        .current_dir(repo())
        .output()
        .expect("python3 runs scripts/structure.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("files over 1000 lines: 0 "), "{text}");
    assert!(text.contains("functions over 150 lines: 0 "), "{text}");
    assert!(
        text.contains("import circles between files: 0\n"),
        "import circles:\n{text}"
    );
}

/// A source file without its test module: the text before a `#[cfg(test)]` line followed by an
/// inline `mod NAME {` (rustfmt puts it last).
fn without_tests(src: &str) -> String {
    let lines: Vec<&str> = src.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|n| n.starts_with("mod ") && n.ends_with('{'))
        })
        .unwrap_or(lines.len());
    lines[..end].join("\n")
}

/// The `(method, path)` of every `.route("PATH", get(h).post(h2)...)` call in `src`.
fn routes_in(src: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (at, _) in src.match_indices(".route(") {
        let rest = &src[at + ".route(".len()..];
        // The call's arguments: up to the parenthesis that closes `.route(`.
        let mut depth = 1;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map(|(i, _)| i)
            .expect("a .route( call closes");
        let args = &rest[..end];
        let path = args.split('"').nth(1).expect("a route's path is a literal");
        let handlers = &args[args.find(',').expect("a route has handlers")..];
        for method in ["get", "post", "put", "delete", "patch"] {
            for (i, _) in handlers.match_indices(&format!("{method}(")) {
                let before = handlers[..i].chars().next_back();
                if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    out.push((method.to_uppercase(), path.to_string()));
                }
            }
        }
    }
    out
}

/// The `(method, path)` of each row of the `//! | route | ... |` table whose header starts
/// with `header` in `src`; a row names its route as `` `GET /path?query` `` or
/// `` `GET`/`DELETE /path` ``. Rows that name no path (`any error`) are left out.
fn route_table(src: &str, header: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let rows = src
        .lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with("//! |"));
    for row in rows {
        let cell = row.split('|').nth(1).unwrap_or("").trim().replace('`', "");
        let Some((methods, path)) = cell.split_once(' ') else {
            continue;
        };
        let path = path.split('?').next().unwrap_or(path);
        if !path.starts_with('/') {
            continue;
        }
        for method in methods.split('/') {
            out.push((method.to_string(), path.to_string()));
        }
    }
    out
}

#[test]
fn the_dispatchers_route_table_is_the_routes_it_serves() {
    // Every router of the dispatcher is in a file of dispatcher/ (mod.rs's `router()`, and the
    // `routes()` of the files it merges).
    let dir = repo().join("crates/diffuse-runtime/src/dispatcher");
    let mut served = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read dispatcher/") {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let src = std::fs::read_to_string(&path).expect("read a dispatcher file");
            let code: Vec<&str> = src
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            served.extend(routes_in(&without_tests(&code.join("\n"))));
        }
    }
    served.sort();
    assert!(served.len() >= 20, "found only {served:?}");
    let module = read("crates/diffuse-runtime/src/dispatcher/mod.rs");
    let mut table = route_table(&module, "//! | route | token |");
    table.sort();
    let show = |r: &(String, String)| format!("{} {}", r.0, r.1);
    let unlisted: Vec<String> = served
        .iter()
        .filter(|r| !table.contains(r))
        .map(show)
        .collect();
    let not_served: Vec<String> = table
        .iter()
        .filter(|r| !served.contains(r))
        .map(show)
        .collect();
    assert!(
        unlisted.is_empty() && not_served.is_empty(),
        "dispatcher/mod.rs's route table: routes served but not in it: {unlisted:#?}; rows \
         no router serves: {not_served:#?}"
    );
    // dispatcher/answers.rs maps routes to their answer types: each is a route served.
    let answers = read("crates/diffuse-runtime/src/dispatcher/answers.rs");
    let answered = route_table(&answers, "//! | route | answer |");
    assert!(answered.len() >= 15, "{answered:?}");
    let unknown: Vec<String> = answered
        .iter()
        .filter(|r| !served.contains(r))
        .map(show)
        .collect();
    assert!(
        unknown.is_empty(),
        "dispatcher/answers.rs names routes no router serves: {unknown:#?}"
    );
}

/// Whether `text` has `word` as a whole word (letters, digits and `_` make a word).
fn has_word(text: &str, word: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(word).any(|(i, _)| {
        !part(text[..i].chars().next_back()) && !part(text[i + word.len()..].chars().next())
    })
}

/// Whether a line of code reads field `name`: `x.name`, `name:` (a declaration, a dataclass
/// field) or `"name"` (a serialized key), not a word of prose.
fn reads_field(line: &str, name: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    line.match_indices(name).any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + name.len()..].chars().next();
        !part(before)
            && !part(after)
            && (matches!(before, Some('.' | '"' | '\'')) || matches!(after, Some(':' | '"' | '\'')))
    })
}

#[test]
fn the_task_field_recipe_names_every_file_a_field_is_read_in() {
    let arch = read("docs/architecture.md");
    let recipe = arch
        .split("**Add a task field.**")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/architecture.md has the recipe **Add a task field.**");
    let named: Vec<&str> = recipe
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| [".rs", ".py", ".md"].iter().any(|e| t.ends_with(e)))
        .collect();
    assert!(named.len() >= 4, "the recipe names only {named:?}");
    // The fields the recipe's files are checked for are task fields still.
    let def = read("crates/diffuse-runtime/src/spec/def.rs");
    let task_more = def
        .split("pub struct TaskMore {")
        .nth(1)
        .and_then(|s| s.split("\n}").next())
        .expect("spec/def.rs has struct TaskMore");
    let fields: Vec<&str> = task_more
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub ")?.split(':').next())
        .collect();
    let tracked = ["walltime_s", "memory_limit", "eviction_priority"];
    let examples = ["cwd", "dad_beta", "walltime"];
    let mut wrong: Vec<String> = tracked
        .iter()
        .chain(&examples[..2])
        .filter(|f| !fields.contains(f))
        .map(|f| format!("{f}: no field of TaskMore"))
        .collect();
    // Each file named exists and reads a task field (the recipe's examples: a name that
    // stopped being true shows).
    for path in &named {
        match std::fs::read_to_string(repo().join(path)) {
            Err(e) => wrong.push(format!("{path}: named in the recipe: {e}")),
            Ok(text) => {
                if !tracked.iter().chain(&examples).any(|f| has_word(&text, f)) {
                    wrong.push(format!(
                        "{path}: named in the recipe, mentions none of {tracked:?} {examples:?}"
                    ));
                }
            }
        }
    }
    // Each source file whose code reads a tracked field is named.
    let mut sources = Vec::new();
    for krate in ["diffuse-core", "diffuse-sim", "diffuse-runtime", "diffuse"] {
        rust_files(&repo().join("crates").join(krate).join("src"), &mut sources);
    }
    for dir in [
        "python/src/diffuse_client",
        "python/snakemake-executor-plugin-diffuse/src",
    ] {
        python_files(&repo().join(dir), &mut sources);
    }
    let root = repo();
    for file in sources {
        let rel = file.strip_prefix(&root).expect("under the repository");
        let rel = rel.to_string_lossy();
        if rel.contains("/tests/") || rel.ends_with("/tests.rs") {
            continue;
        }
        let src = std::fs::read_to_string(&file).expect("read a source file");
        let code = without_tests(&src);
        let comment = if rel.ends_with(".py") { "#" } else { "//" };
        let reads = code
            .lines()
            .filter(|l| !l.trim_start().starts_with(comment))
            .find_map(|l| tracked.into_iter().find(|f| reads_field(l, f)));
        if let Some(field) = reads {
            if !named.contains(&rel.as_ref()) {
                wrong.push(format!("{rel}: reads {field}, not named in the recipe"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's \"Add a task field\": {wrong:#?}"
    );
}

/// The `.py` files under `dir`, recursively.
fn python_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            python_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "py") {
            out.push(path);
        }
    }
}

/// Every file the docs name by its path from the repository's root exists: a file moved or
/// renamed is renamed in the docs too. The recipes' new files (`NAME.rs`, the PBS example's
/// `pbs.rs`) are the exceptions.
#[test]
fn every_file_the_docs_name_by_its_path_exists() {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("read docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.push(repo().join("README.md"));
    let roots = [
        "crates/",
        "scripts/",
        "bench/",
        "python/",
        "docs/",
        "testbeds/",
        ".ci/",
    ];
    let mut missing = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).expect("read a doc");
        for quoted in text.split('`').skip(1).step_by(2) {
            let path = quoted.trim_end_matches('.');
            let is_path = roots.iter().any(|r| path.starts_with(r))
                && path
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
            let example = path.ends_with("/NAME.rs") || path.ends_with("provisioner/pbs.rs");
            if is_path && !example && !repo().join(path).exists() {
                missing.push(format!("{}: {path}", doc.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named in the docs but not there:\n{}",
        missing.join("\n")
    );
}

/// The Python client's `Task` has exactly the task fields the dispatcher takes: the fields
/// `diffuse` names when a task file has an unknown one, against the dataclass's fields in
/// `python/src/diffuse_client/client.py`. A field added on one side only fails here.
#[test]
fn the_python_task_has_the_task_fields_the_dispatcher_takes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.jsonl");
    std::fs::write(
        &file,
        "{\"id\": \"x\", \"cmd\": \"true\", \"no_such_field\": 1}\n",
    )
    .expect("write a task file");
    let out = Command::new(env!("CARGO_BIN_EXE_diffuse"))
        .arg("run")
        .arg(&file)
        .current_dir(dir.path())
        .output()
        .expect("run diffuse");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    let listed = err
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("no field list in: {err}"));
    let rust: Vec<&str> = listed
        .split(" at line")
        .next()
        .expect("the list")
        .split(", ")
        .map(|f| f.trim_matches('`'))
        .collect();
    assert!(rust.len() > 20 && rust.contains(&"walltime_s"), "{rust:?}");

    let py = read("python/src/diffuse_client/client.py");
    let body = py
        .split("\nclass Task:\n")
        .nth(1)
        .expect("class Task in client.py");
    let body = body.split("    def ").next().expect("the class's fields");
    let mut python: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_once(": ").map(|(name, _)| name))
        .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    let mut rust_sorted = rust.clone();
    python.sort_unstable();
    rust_sorted.sort_unstable();
    assert_eq!(
        python, rust_sorted,
        "the Python Task's fields (left) against the dispatcher's (right)"
    );
}
