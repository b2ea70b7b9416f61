//! The names a task sees for its inputs: each is staged as `inputs/<i>/<its base name>`, so a
//! program that derives an output's name from its input's (`gzip`), knows a format by its
//! extension, or prints what it read sees the name the user gave. Real processes and files.

mod common;

use common::cluster::*;
use common::host::{is_root, skip, HttpServer};
use serde_json::{json, Value};
use std::path::Path;

/// The file name stored in a gzip member's header (FNAME), which gzip takes from the file it
/// compressed.
fn gzip_name(gz: &[u8]) -> String {
    assert!(gz.len() > 10 && gz[..2] == [0x1f, 0x8b], "not gzip: {gz:?}");
    assert_ne!(gz[3] & 0x08, 0, "no file name in the gzip header");
    assert_eq!(gz[3] & 0x04, 0, "no extra field expected");
    let name = &gz[10..];
    let end = name
        .iter()
        .position(|&b| b == 0)
        .expect("NUL-terminated name");
    String::from_utf8_lossy(&name[..end]).into_owned()
}

/// `diffuse run` of `tasks` in `dir` (a local dispatcher and worker): its results.
fn run(dir: &Path, tasks: &[Value], flags: &[&str]) -> Vec<Value> {
    let (out, results) = run_in(dir, tasks, flags);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    results
}

#[track_caller]
fn stdout_of_result(results: &[Value], id: &str) -> String {
    let r = result_of(results, id);
    let path = r["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("{id}: no stdout: {r}"));
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn a_task_sees_each_input_under_its_own_base_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["x", "y", "out"] {
        std::fs::create_dir(d.join(sub)).unwrap();
    }
    std::fs::write(d.join("x/a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(d.join("y/a.txt"), "three\n").unwrap();
    std::fs::write(d.join("x/my data.csv"), "k,v\n").unwrap();
    let server = HttpServer::start(|_| (200, b"ACGT\n".to_vec()));
    let a = file_uri(&d.join("x/a.txt"));
    let gz = d.join("out/a.txt.gz");
    let tasks = [
        // Derives its output's name from its input's: gzip writes `<input>.gz` next to it and
        // keeps the input's name in the header (-f: an input is a hard link of the cached copy,
        // and gzip leaves a file with other links alone without it).
        json!({"id": "gzip", "cmd": "gzip -kf {inputs[0]} && mv {inputs[0]}.gz {outputs[0]}",
               "inputs": [a], "outputs": [file_uri(&gz)]}),
        // Prints the names it was given; two inputs called a.txt stay two files.
        json!({"id": "names", "cmd": "basename {inputs[0]}; basename {inputs[1]}; basename {inputs[2]}; basename {inputs[3]}; test {inputs[0]} != {inputs[1]} && cat {inputs[0]} {inputs[1]}",
               "inputs": [a, file_uri(&d.join("y/a.txt")), file_uri(&d.join("x/my data.csv")),
                          server.url("/get/reads.fq?sig=abc/def")]}),
        // An argv command: `wc -l` prints the path it was given.
        json!({"id": "wc", "cmd": ["wc", "-l", "{inputs[0]}"], "inputs": [a]}),
        // An intermediate object keeps its name too.
        json!({"id": "make", "cmd": "echo mid > {outputs[0]}", "outputs": ["tmp://stage-1.out"]}),
        json!({"id": "take", "cmd": "basename {inputs[0]}", "inputs": ["tmp://stage-1.out"]}),
    ];
    let results = run(d, &tasks, &[]);
    for r in &results {
        assert_eq!(r["exit_code"], 0, "{r}");
    }
    let bytes = std::fs::read(&gz).unwrap();
    assert_eq!(gzip_name(&bytes), "a.txt");
    let unzipped = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(&gz)
        .output()
        .unwrap();
    assert_eq!(unzipped.stdout, b"one\ntwo\n");
    assert_eq!(
        stdout_of_result(&results, "names"),
        "a.txt\na.txt\nmy data.csv\nreads.fq\none\ntwo\nthree\n"
    );
    let wc = stdout_of_result(&results, "wc");
    assert!(wc.starts_with("2 /"), "{wc}");
    assert!(wc.trim_end().ends_with("/inputs/0/a.txt"), "{wc}");
    assert_eq!(stdout_of_result(&results, "take"), "stage-1.out\n");
    // The inputs were staged from the cache: the worker's cached object is intact after gzip.
    assert_eq!(
        std::fs::read_to_string(d.join("x/a.txt")).unwrap(),
        "one\ntwo\n"
    );
}

/// `diffuse run --each`: `{}` is the staged input, whose base name is now `{/}`.
#[test]
fn each_argument_keeps_its_base_name_in_the_staged_path() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("sample 1.fastq");
    std::fs::write(&f, "@r\n").unwrap();
    let out = diffuse_with(
        &[
            "run",
            "--each",
            r#"b=$(basename {}); test "$b" = {/} && echo "$b" {/.}"#,
            "--print",
            f.to_str().unwrap(),
        ],
        Some(dir.path()),
        &[("XDG_CACHE_HOME", dir.path().join("xdg").to_str().unwrap())],
        DEADLINE,
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "sample 1.fastq sample 1\n");
}

/// With `--task-user`, the task may write next to its input (its directory is the user's).
#[test]
fn a_task_user_can_write_next_to_its_input() {
    if !is_root() {
        return skip("--task-user needs root");
    }
    let mut c = Cluster::start(&[]);
    std::fs::set_permissions(
        c.path(""),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let data = c.data("reads.txt", b"hello\n");
    std::fs::set_permissions(
        c.path("data"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let (mut cmd, _) = c.worker_cmd("A", 1, "10MB");
    cmd.args(["--task-user", "nobody"]);
    let log = c.path("worker-A.log");
    c.workers.push(Proc::spawn("worker A", &mut cmd, log));
    c.wait_workers(1);
    c.submit(&[json!({"id": "gz",
        "cmd": "gzip -kf {inputs[0]} && ls $(dirname {inputs[0]})",
        "inputs": [file_uri(&data)]})]);
    let (_, r) = c.wait_succeeded("gz");
    assert_eq!(stdout_of(&r), "reads.txt\nreads.txt.gz\n");
}
