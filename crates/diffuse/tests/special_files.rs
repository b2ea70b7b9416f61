//! A task cannot make its worker read or write special files (docs/security.md, "Which files a
//! task may name"): inputs on /proc, /sys and /dev are refused however the path is spelled
//! (symbolic links, `..`, `/proc` magic links), with and without `--task-user`, and with the
//! worker running as another user; outputs (`file://` and `s3://`) are never copied from or to
//! them, nor through a link a task planted at the worker's temporary name, nor made setuid; no
//! directory is made on them before the refusal; and no worker started by diffuse holds the
//! client or metrics token. Real workers, real /proc. The cases that need root (another user,
//! files in /dev, reading a non-dumpable worker's environment) say SKIPPED when not root.

mod common;

use common::cluster::*;
use common::host::{is_root, skip};
use serde_json::{json, Value};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Command;

/// How the worker of a case runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum As {
    /// As this test's user, tasks too (the default, and what `diffuse run` does).
    Itself,
    /// As root with `--task-user nobody`.
    TaskUser,
    /// As nobody, tasks too.
    Nobody,
}

/// A path in /dev (devtmpfs), removed when dropped.
struct DevFile(PathBuf);

impl DevFile {
    /// A name no file has yet.
    fn name() -> DevFile {
        DevFile(PathBuf::from(format!(
            "/dev/diffuse-test-{:x}",
            random_u64()
        )))
    }

    /// A regular file holding `content`, readable by all. Root only.
    fn new(content: &[u8]) -> DevFile {
        let f = DevFile::name();
        std::fs::write(&f.0, content).expect("write a file in /dev");
        std::fs::set_permissions(&f.0, std::fs::Permissions::from_mode(0o644)).unwrap();
        f
    }
}

impl Drop for DevFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A cluster with one worker run `how`, with the client token in its environment (as the
/// README's cluster example had it). Returns the cluster and the worker's (guard, proper) pids.
fn cluster(how: As) -> (Cluster, u32, u32) {
    let mut c = Cluster::start(&[("DIFFUSE_METRICS_TOKEN", "metrics-secret-456")]);
    // nobody must reach the binary's directory, the data and its cache directory.
    std::fs::set_permissions(c.path(""), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(c.path("data"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (mut cmd, _) = c.worker_cmd("A", 4, "10MB");
    let mut cmd = match how {
        As::Itself => cmd,
        As::TaskUser => {
            cmd.args(["--task-user", "nobody"]);
            cmd
        }
        As::Nobody => {
            let mut as_nobody = Command::new("setpriv");
            as_nobody
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(cmd.get_program())
                .args(cmd.get_args());
            c.envs(&mut as_nobody);
            as_nobody
        }
    };
    let log = c.path("worker-A.log");
    c.workers.push(Proc::spawn("worker A", &mut cmd, log));
    c.wait_workers(1);
    let guard = c.workers[0].child.id();
    let proper = c.workers[0].worker_pid();
    (c, guard, proper)
}

/// The task failed, its error says `why`, and nothing of the worker's environment reached it.
#[track_caller]
fn refused(c: &Cluster, id: &str, why: &str) {
    let t = c.wait_done(id);
    assert_eq!(t["state"], "failed", "{id} was not refused: {t}");
    let err = t["outcome"]["error"].as_str().unwrap_or_default();
    assert!(err.contains(why), "{id}: {err}");
    let r = report(&t);
    let stdout = r["stdout"]
        .as_str()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let seen = format!("{t}{stdout}");
    for secret in [
        c.client_token.as_str(),
        c.worker_token.as_str(),
        "metrics-secret-456",
        "dev-secret",
    ] {
        assert!(!seen.contains(secret), "{id} leaked a secret: {seen}");
    }
}

const SPECIAL: &str = "a special file system";

fn inputs_are_refused(how: As) {
    let (c, guard, proper) = cluster(how);
    let data = c.path("data");
    let link = |name: &str, to: &str| {
        let p = data.join(name);
        std::os::unix::fs::symlink(to, &p).unwrap();
        file_uri(&p)
    };
    let dev = is_root().then(|| DevFile::new(b"dev-secret\n"));
    let dev_uri = dev
        .as_ref()
        .map_or("file:///dev/null".into(), |d| file_uri(&d.0));
    let cases: Vec<(&str, String, &str)> = vec![
        ("self", "file:///proc/self/environ".into(), SPECIAL),
        ("guard", format!("file:///proc/{guard}/environ"), SPECIAL),
        ("proper", format!("file:///proc/{proper}/environ"), SPECIAL),
        ("link-self", link("l-self", "/proc/self/environ"), SPECIAL),
        (
            "link-proper",
            link("l-proper", &format!("/proc/{proper}/environ")),
            SPECIAL,
        ),
        (
            "dir-link",
            format!("{}/self/environ", link("l-proc", "/proc")),
            SPECIAL,
        ),
        (
            "dotdot",
            format!(
                "file://{}/../../../../../../../proc/self/environ",
                data.display()
            ),
            SPECIAL,
        ),
        (
            "magic",
            "file:///proc/self/root/etc/hostname".into(),
            "/proc magic link",
        ),
        (
            "sys",
            "file:///sys/devices/system/cpu/possible".into(),
            SPECIAL,
        ),
        (
            "link-sys",
            link("l-sys", "/sys/devices/system/cpu/possible"),
            SPECIAL,
        ),
        ("dev", dev_uri.clone(), SPECIAL),
        (
            "link-dev",
            link("l-dev", dev_uri.trim_start_matches("file://")),
            SPECIAL,
        ),
    ];
    let ok = c.data("ok.txt", b"ordinary data\n");
    std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut tasks: Vec<Value> = cases.iter().map(|(id, uri, _)| cat_task(id, uri)).collect();
    tasks.push(cat_task("ok", &file_uri(&ok)));
    // /dev/shm is a tmpfs of its own under /dev: ordinary data, read as any file.
    let shm = tempfile::NamedTempFile::new_in("/dev/shm").ok();
    if let Some(f) = &shm {
        std::fs::write(f.path(), b"shared memory data\n").unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        tasks.push(cat_task("shm", &file_uri(f.path())));
    }
    c.submit(&tasks);
    for (id, _, why) in &cases {
        refused(&c, id, why);
    }
    let (_, r) = c.wait_succeeded("ok");
    assert_eq!(stdout_of(&r), "ordinary data\n");
    if shm.is_some() {
        let (_, r) = c.wait_succeeded("shm");
        assert_eq!(stdout_of(&r), "shared memory data\n", "{how:?}");
    }
    if how == As::Itself {
        // The worker was started with the client and metrics tokens: it says to remove them.
        let log = c.workers[0].log_text();
        for var in ["DIFFUSE_CLIENT_TOKEN", "DIFFUSE_METRICS_TOKEN"] {
            assert!(
                log.contains(&format!("{var} is set in this worker's environment")),
                "no warning about {var}:\n{log}"
            );
        }
    }
}

#[test]
fn special_file_inputs_are_refused_however_the_path_is_spelled() {
    inputs_are_refused(As::Itself);
}

#[test]
fn special_file_inputs_are_refused_with_a_task_user_and_for_a_worker_of_another_user() {
    if !is_root() {
        return skip("--task-user and a worker as nobody need root");
    }
    inputs_are_refused(As::TaskUser);
    inputs_are_refused(As::Nobody);
}

fn outputs_are_refused(how: As) {
    let (c, _, proper) = cluster(how);
    let open = c.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let comm = || std::fs::read_to_string(format!("/proc/{proper}/comm")).unwrap();
    let name = comm();
    let planted = open.join("planted.txt");
    let victim = c.path("victim");
    std::fs::write(&victim, b"untouched\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let leak = open.join("leak.txt");
    let dev_dest = DevFile::name();
    let mut tasks = vec![
        // The task's output is a link to the worker's own environment.
        json!({"id": "src-environ", "cmd": "ln -s /proc/self/environ {outputs[0]}",
               "outputs": [file_uri(&leak)]}),
        // Links planted at the names the worker writes through before renaming
        // (`.<name>.diffuse-tmp-<pid>-<n>`, n counting the worker's outputs from 0).
        json!({"id": "planted",
               "cmd": plant("/proc/self/comm", &open, "planted.txt"),
               "outputs": [file_uri(&planted)]}),
        // The same at a file only the worker's user may write (with a task user: root's).
        json!({"id": "planted-victim",
               "cmd": plant(victim.to_str().unwrap(), &open, "victim-out.txt"),
               "outputs": [file_uri(&open.join("victim-out.txt"))]}),
        // A setuid copy of what the task left: the output lands without setuid and setgid.
        json!({"id": "setuid", "cmd": "printf '#!/bin/sh\n' > {outputs[0]} && chmod 6755 {outputs[0]}",
               "outputs": [file_uri(&open.join("setuid"))]}),
        json!({"id": "to-proc", "cmd": "echo x > {outputs[0]}",
               "outputs": ["file:///proc/self/comm"]}),
        json!({"id": "to-sys", "cmd": "echo x > {outputs[0]}",
               "outputs": ["file:///sys/kernel/diffuse-out"]}),
    ];
    if is_root() && how != As::Nobody {
        tasks.push(json!({"id": "to-dev", "cmd": "echo x > {outputs[0]}",
                          "outputs": [file_uri(&dev_dest.0)]}));
    }
    // A directory made in a cgroup file system is a cgroup: refused before anything is made.
    let cgroup = cgroup_mount()
        .filter(|_| is_root() && how != As::Nobody)
        .map(|m| CgroupDir(m.join(format!("diffuse-test-{:x}", random_u64()))));
    if let Some(dir) = &cgroup {
        tasks.push(json!({"id": "to-cgroup", "cmd": "echo x > {outputs[0]}",
                          "outputs": [file_uri(&dir.0.join("o"))]}));
    }
    c.submit(&tasks);
    // Without a task user the output's source is refused for its file system; with one, as a
    // link (it must be a regular file).
    let why = if how == As::TaskUser {
        "not a regular file"
    } else {
        SPECIAL
    };
    refused(&c, "src-environ", why);
    assert!(!leak.exists(), "the worker's environment was copied out");
    refused(&c, "to-proc", SPECIAL);
    refused(&c, "to-sys", SPECIAL);
    if is_root() && how != As::Nobody {
        refused(&c, "to-dev", SPECIAL);
        assert!(!dev_dest.0.exists(), "an output was written to /dev");
    }
    if let Some(dir) = &cgroup {
        refused(&c, "to-cgroup", SPECIAL);
        assert!(!dir.0.exists(), "{} was made", dir.0.display());
    }
    // The planted links are passed over, not written through: the output arrives as a regular
    // file and the worker's name is its own.
    c.wait_succeeded("planted");
    assert_eq!(comm(), name, "the worker wrote its own /proc/self/comm");
    let meta = std::fs::symlink_metadata(&planted).unwrap();
    assert!(meta.file_type().is_file(), "{meta:?}");
    assert_eq!(std::fs::read_to_string(&planted).unwrap(), "pwned\n");
    c.wait_succeeded("planted-victim");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    let mode = std::fs::metadata(&victim).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the victim's mode changed");
    c.wait_succeeded("setuid");
    let meta = std::fs::metadata(open.join("setuid")).unwrap();
    assert_eq!(
        meta.mode() & 0o7777,
        0o755,
        "{how:?}: mode {:o}",
        meta.mode()
    );
    if how == As::TaskUser {
        assert_eq!(
            (meta.uid(), meta.gid()),
            (65534, 65534),
            "not the task user's"
        );
    }
}

/// A shell command that plants a link to `to` at the first 20 temporary names of the output
/// `name` in `dir`, then writes that output.
fn plant(to: &str, dir: &std::path::Path, name: &str) -> String {
    format!(
        "for n in $(seq 0 19); do ln -s {to} {}/.{name}.diffuse-tmp-$PPID-$n; done && \
         echo pwned > {{outputs[0]}}",
        dir.display()
    )
}

/// The mount point of a cgroup or cgroup2 file system, if one is mounted.
fn cgroup_mount() -> Option<PathBuf> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fs = right.split(' ').next()?;
        let at = left.split(' ').nth(4)?;
        (fs == "cgroup" || fs == "cgroup2").then(|| PathBuf::from(at))
    })
}

/// A cgroup directory no test should make, removed when dropped if it was made after all.
struct CgroupDir(PathBuf);

impl Drop for CgroupDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn special_file_outputs_are_refused_and_a_planted_link_is_not_followed() {
    outputs_are_refused(As::Itself);
}

#[test]
fn special_file_outputs_are_refused_with_a_task_user_and_for_a_worker_of_another_user() {
    if !is_root() {
        return skip("--task-user and a worker as nobody need root");
    }
    outputs_are_refused(As::TaskUser);
    outputs_are_refused(As::Nobody);
}

// ----- s3:// outputs -----

/// An S3 output is a task's captured stdout, uploaded by the worker from its log file. A task
/// of the worker's user can replace that file (found through the log directory) once it exists:
/// with a link to the worker's environment, to /dev/null, or with a FIFO. Each is refused and
/// nothing is uploaded; ordinary output, small or in parts, arrives whole.
#[test]
fn s3_outputs_are_refused_from_special_files_and_streamed_from_ordinary_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (moto, port) = moto_server(dir.path());
    let endpoint = format!("http://127.0.0.1:{port}");
    let client = http();
    let r = client.put(format!("{endpoint}/out")).send().unwrap();
    assert!(r.status().is_success(), "create bucket: {}", r.status());
    let mut c = Cluster::start(&[
        ("DIFFUSE_METRICS_TOKEN", "metrics-secret-456"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", &endpoint),
        ("AWS_ALLOW_HTTP", "true"),
    ]);
    c.extra.push(moto);
    c.worker("A", 4, "10MB");
    c.wait_workers(1);
    let logs = c.path("wA/logs");
    let task =
        |id: &str, cmd: String| json!({"id": id, "cmd": cmd, "stdout": format!("s3://out/{id}")});
    // Once the worker has made the log file of this task's stdout, `then` replaces it ($f).
    let replace = |id: &str, then: &str| {
        let glob = format!("{}/{id}.*.stdout", logs.display());
        task(
            id,
            format!(
                "echo x; until ls {glob} >/dev/null 2>&1; do sleep 0.05; done; \
                 for f in {glob}; do {then}; done"
            ),
        )
    };
    // Larger than one request's worth (8 MiB): uploaded in parts, streamed from the file.
    let n = 12_000_000;
    let large: Vec<u8> = b"0123456789abcdef\n"
        .iter()
        .copied()
        .cycle()
        .take(n)
        .collect();
    c.submit(&[
        replace("environ", "ln -sf /proc/self/environ $f"),
        replace("null", "ln -sf /dev/null $f"),
        // Reading a FIFO would wait for a writer for ever.
        replace("fifo", "rm -f $f && mkfifo $f"),
        task("small", "printf 'small output'".into()),
        task("large", format!("yes 0123456789abcdef | head -c {n}")),
    ]);
    refused(&c, "environ", SPECIAL);
    refused(&c, "null", SPECIAL);
    let t = c.wait_done("fifo");
    assert_eq!(t["state"], "failed", "{t}");
    assert!(t.to_string().contains("not a regular file"), "{t}");
    // Anonymous reads: 404 for a missing object, 403 for one that exists (private).
    for id in ["environ", "null", "fifo"] {
        let r = client.get(format!("{endpoint}/out/{id}")).send().unwrap();
        assert_eq!(r.status(), 404, "{id} was uploaded");
    }
    // Read back by the worker, with its credentials; the large one is larger than the worker's
    // cache, so it is read uncached into the task's directory.
    for (id, want) in [("small", &b"small output"[..]), ("large", &large)] {
        c.wait_succeeded(id);
        let back = format!("{id}-back");
        c.submit(&[cat_task(&back, &format!("s3://out/{id}"))]);
        let (_, r) = c.wait_succeeded(&back);
        let got = std::fs::read(r["stdout"].as_str().unwrap()).unwrap();
        assert!(
            got == want,
            "{id}: {} bytes, wanted {}",
            got.len(),
            want.len()
        );
    }
}

// ----- no worker started by diffuse holds the client or metrics token -----

/// A task that prints its worker's environment, one variable a line (root can read it: the
/// worker is non-dumpable, which stops only its own user).
fn environ_task(id: &str) -> Value {
    json!({"id": id, "cmd": "tr '\\0' '\\n' < /proc/$PPID/environ"})
}

/// The names of the variables in `environ` (one a line) that hold a diffuse token.
#[track_caller]
fn assert_only_the_worker_token(environ: &str, what: &str) {
    assert!(
        environ.contains("DIFFUSE_WORKER_TOKEN="),
        "{what}: not the worker's environment:\n{environ}"
    );
    for var in ["DIFFUSE_CLIENT_TOKEN=", "DIFFUSE_METRICS_TOKEN="] {
        assert!(
            !environ.lines().any(|l| l.starts_with(var)),
            "{what}: the worker holds {var}"
        );
    }
}

/// The tokens a worker must not hold, in the environment of what starts workers (a cluster's
/// dispatcher has its own client token in its environment already).
const SECRETS: [(&str, &str); 2] = [
    ("DIFFUSE_CLIENT_TOKEN", "client-secret-123"),
    ("DIFFUSE_METRICS_TOKEN", "metrics-secret-456"),
];
const METRICS: [(&str, &str); 1] = [("DIFFUSE_METRICS_TOKEN", "metrics-secret-456")];

#[test]
fn workers_of_diffuse_run_hold_neither_the_client_nor_the_metrics_token() {
    if !is_root() {
        return skip("reading a non-dumpable worker's environment needs root");
    }
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, format!("{}\n", environ_task("env"))).unwrap();
    for (n, flags) in [
        ("fixed", &["--workers", "1"][..]),
        ("elastic", &["--max-workers", "1"]),
    ] {
        let run_dir = dir.path().join(n);
        let mut args = vec![
            "run",
            tasks.to_str().unwrap(),
            "--run-dir",
            run_dir.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        let out = diffuse_with(&args, Some(dir.path()), &SECRETS, DEADLINE);
        assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
        let res = results(&run_dir);
        let r = result_of(&res, "env");
        let environ = std::fs::read_to_string(r["stdout"].as_str().unwrap()).unwrap();
        assert_only_the_worker_token(&environ, &format!("diffuse run ({n})"));
    }
}

#[test]
fn workers_of_a_local_pool_hold_neither_the_client_nor_the_metrics_token() {
    if !is_root() {
        return skip("reading a non-dumpable worker's environment needs root");
    }
    let c = Cluster::start_with(
        &METRICS,
        &[
            "--provisioner",
            "local",
            "--max-workers",
            "1",
            "--worker-cores",
            "1",
            "--worker-cache-size",
            "10MB",
        ],
        &[],
    );
    c.submit(&[environ_task("env")]);
    let (_, r) = c.wait_succeeded("env");
    assert_only_the_worker_token(&stdout_of(&r), "local pool");
}

#[test]
fn workers_of_a_slurm_pool_hold_neither_the_client_nor_the_metrics_token() {
    if !is_root() {
        return skip("needs root to run Slurm's daemons");
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(slurm) = common::slurm::Slurm::start(&dir.path().join("slurm"), 2) else {
        return;
    };
    let conf = slurm.conf.to_str().unwrap().to_string();
    let cache = format!("{}/cache-{{request}}", dir.path().display());
    let mut env = vec![("SLURM_CONF", conf.as_str())];
    env.extend_from_slice(&METRICS);
    let c = Cluster::start_with(
        &env,
        &[
            "--provisioner",
            "slurm",
            "--max-workers",
            "1",
            "--worker-cores",
            "1",
            "--worker-cache-size",
            "10MB",
            "--worker-cache-dir",
            &cache,
            "--rm-poll",
            "1s",
        ],
        &[],
    );
    c.submit(&[environ_task("env")]);
    let (_, r) = c.wait_succeeded("env");
    assert_only_the_worker_token(&stdout_of(&r), "Slurm pool");
    drop(c);
    drop(slurm);
}
