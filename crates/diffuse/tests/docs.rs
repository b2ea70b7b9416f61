//! The docs name what the code has: every subcommand of `diffuse --help` is in the README's
//! command table and in docs/architecture.md's crate table, and every public module of a
//! library crate is in its `lib.rs` module map. A command or module added without its doc line
//! fails here.

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
