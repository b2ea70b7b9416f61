//! The docs name what the code has: every subcommand of `diffuse --help` is in the README's
//! command table and in docs/architecture.md's crate table, every public module of a library
//! crate is in its `lib.rs` module map, every module a file with a `//! | module |` table
//! declares is in that table, and every `handle_*`/`poll_*` call of the core and every `Action`
//! variant is in docs/architecture.md's API block. A command, module, handler or action added
//! without its doc line fails here.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
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
