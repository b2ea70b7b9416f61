//! Function tasks in warm Python processes (docs/warm.md), on a real dispatcher and worker with
//! the real `python3 -m diffuse_client.warm`: results, isolation, and what must hold when things
//! go wrong (issue 39): a warm process killed mid-call, a call over its memory limit, a call that
//! never returns, a cancel, a function that ends its process or leaves children behind, no token
//! in a call's environment, and with `--task-user` no call in another user's process.

mod common;

use common::cluster::*;
use common::host::{is_root, skip};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The entries the calls run: a module in a directory of its own (readable by every user).
const ENTRIES: &str = r#"
import json, os, subprocess, sys, time

COUNT = 0

def echo(fn_path, args, inputs):
    print("to stdout", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    return open(fn_path, "rb").read() + b"|" + args + b"|" + ",".join(os.path.basename(i) for i in inputs).encode()

def who(fn_path, args, inputs):
    global COUNT
    COUNT += 1
    return json.dumps({
        "pid": os.getpid(), "ppid": os.getppid(), "uid": os.getuid(), "parent_uid": os.stat(f"/proc/{os.getppid()}").st_uid,
        "cwd": os.getcwd(), "count": COUNT, "env": sorted(os.environ),
        "task": os.environ.get("DIFFUSE_TASK_ID"), "x": os.environ.get("X"),
    }).encode()

def pid_then_sleep(fn_path, args, inputs):
    # Tells where it runs (pid and parent), then never returns.
    with open(args.decode(), "w") as f:
        f.write(f"{os.getpid()} {os.getppid()}")
    time.sleep(600)
    return b"never"

def sleep(fn_path, args, inputs):
    time.sleep(float(args.decode() or "600"))
    return b"slept"

def hog(fn_path, args, inputs):
    x = bytearray(int(args.decode()) * 2**20)
    return str(len(x)).encode()

def exits(fn_path, args, inputs):
    os._exit(0)

def leaves_a_child(fn_path, args, inputs):
    p = subprocess.Popen(["sleep", "600"])
    with open(args.decode(), "w") as f:
        f.write(str(p.pid))
    return b"left"

def not_bytes(fn_path, args, inputs):
    return 42
"#;

/// A cluster whose workers find `diffuse_client` (from this repository) and the test's entries.
struct Warm {
    c: Cluster,
    entries: PathBuf,
    /// The function input every call names (its bytes are what `echo` shows).
    function: String,
}

fn python_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/src")
}

impl Warm {
    fn start(worker_args: &[&str]) -> Warm {
        let entries = tempfile::tempdir().unwrap().keep();
        std::fs::write(entries.join("warmtest.py"), ENTRIES).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for p in [entries.as_path(), &entries.join("warmtest.py")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let pythonpath = format!("{}:{}", python_src().display(), entries.display());
        let mut c = Cluster::start(&[("PYTHONPATH", &pythonpath)]);
        let (mut cmd, _) = c.worker_cmd("w", 2, "50MB");
        cmd.args(worker_args);
        let log = c.path("worker-w.log");
        c.workers.push(Proc::spawn("worker w", &mut cmd, log));
        c.wait_workers(1);
        let f = entries.join("function.bin");
        std::fs::write(&f, "FUNCTION").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let function = file_uri(&f);
        Warm {
            c,
            entries,
            function,
        }
    }

    /// A call task of `entry` with `args`, its function the first input.
    fn call(&self, id: &str, entry: &str, args: &str, isolation: &str) -> Value {
        use base64::Engine;
        json!({"id": id, "inputs": [self.function],
               "call": {"fn": 0, "entry": format!("warmtest:{entry}"),
                        "args": base64::engine::general_purpose::STANDARD.encode(args),
                        "isolation": isolation}})
    }

    /// A file under the entries' directory, which every user may write (`chmod 1777`).
    fn scratch(&self, name: &str) -> PathBuf {
        let d = self.entries.join("scratch");
        std::fs::create_dir_all(&d).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        d.join(name)
    }
}

/// A task's report's value, decoded.
fn value(t: &Value) -> Vec<u8> {
    use base64::Engine;
    let r = report(t);
    let v = r["value"]
        .as_str()
        .unwrap_or_else(|| panic!("no value: {t}"));
    base64::engine::general_purpose::STANDARD.decode(v).unwrap()
}

fn json_value(t: &Value) -> Value {
    serde_json::from_slice(&value(t)).unwrap()
}

#[test]
fn calls_return_their_values_with_their_own_environment_in_fork_and_reuse() {
    let w = Warm::start(&[]);
    let data = w.c.data("data.txt", b"data");
    let mut echo = w.call("echo", "echo", "arg", "fork");
    echo["inputs"] = json!([file_uri(&data), w.function]);
    echo["call"]["fn"] = json!(1);
    let mut tasks = vec![echo];
    for i in 0..3 {
        let mut f = w.call(&format!("fork{i}"), "who", "", "fork");
        f["env"] = json!({"X": format!("x{i}")});
        tasks.push(f);
        tasks.push(w.call(&format!("reuse{i}"), "who", "", "reuse"));
    }
    w.c.submit(&tasks);
    let t = w.c.wait_done("echo");
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(value(&t), b"FUNCTION|arg|data.txt,function.bin");
    assert_eq!(stdout_of(&report(&t)), "to stdout\n");
    let mut fork_pids = Vec::new();
    let mut reuse = Vec::new();
    for i in 0..3 {
        let f = json_value(&w.c.wait_done(&format!("fork{i}")));
        assert_eq!(f["task"], format!("fork{i}"));
        assert_eq!(f["x"], format!("x{i}"), "the task's own env: {f}");
        assert_eq!(f["count"], 1, "a fork never sees another call's state: {f}");
        // Its only input is its function, kept for later calls: it needs no directory of its
        // own, and runs in the work directory, as a process task without inputs does.
        assert!(f["cwd"].as_str().unwrap().ends_with("/work"), "{f}");
        for var in f["env"].as_array().unwrap() {
            let var = var.as_str().unwrap();
            assert!(
                !var.contains("TOKEN") && var != "DIFFUSE_WARM_FD",
                "no token or control fd in a call's environment: {var}"
            );
        }
        fork_pids.push(f["pid"].as_u64().unwrap());
        reuse.push(json_value(&w.c.wait_done(&format!("reuse{i}"))));
    }
    fork_pids.sort();
    fork_pids.dedup();
    assert_eq!(fork_pids.len(), 3, "a child per call");
    // Reuse: calls of one function share processes (two cores: at most two), and their state.
    let pids: std::collections::BTreeSet<u64> =
        reuse.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    assert!(pids.len() <= 2, "{reuse:?}");
    let counts: u64 = reuse
        .iter()
        .map(|r| r["count"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        counts >= 2,
        "a reused process keeps its module state: {reuse:?}"
    );
    // The worker tells its warm processes' figures with its load, every few seconds.
    let s = poll("the warm figures in the status", || {
        let s = w.c.status();
        (s["warm"]["calls"].as_u64() >= Some(7)).then_some(s)
    });
    assert!(s["warm"]["processes"].as_u64().unwrap() >= 1, "{s}");
    assert!(
        s["worker_list"][0]["warm"]["calls"].as_u64() >= Some(7),
        "{s}"
    );
    assert!(w.c.metrics().contains("diffuse_warm_processes "));
}

#[test]
fn a_warm_process_killed_mid_call_fails_the_call_and_the_next_call_gets_a_new_one() {
    let w = Warm::start(&[]);
    for mode in ["fork", "reuse"] {
        let marker = w.scratch(&format!("where-{mode}"));
        let mut t = w.call(
            &format!("killed-{mode}"),
            "pid_then_sleep",
            marker.to_str().unwrap(),
            mode,
        );
        t["retries"] = json!(0);
        w.c.submit(&[t]);
        let text = poll("the call to start", || {
            std::fs::read_to_string(&marker)
                .ok()
                .filter(|t| t.contains(' '))
        });
        let (pid, ppid): (u32, u32) = {
            let mut it = text.split(' ').map(|n| n.parse().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        };
        // Fork: the zygote (the call's parent) dies, and its child with it. Reuse: the warm
        // process is the call's.
        let victim = if mode == "fork" { ppid } else { pid };
        common::send_signal(victim, false, rustix::process::Signal::KILL);
        let t = w.c.wait_done(&format!("killed-{mode}"));
        assert_eq!(t["state"], "failed", "{t}");
        poll("the call's process to be gone", || {
            (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
        });
        w.c.submit(&[w.call(&format!("after-{mode}"), "who", "", mode)]);
        let after = json_value(&w.c.wait_done(&format!("after-{mode}")));
        let new = if mode == "fork" {
            &after["ppid"]
        } else {
            &after["pid"]
        };
        assert_ne!(
            new.as_u64(),
            Some(victim as u64),
            "a new warm process: {after}"
        );
    }
}

#[test]
fn a_call_that_never_returns_times_out_and_a_running_call_is_cancelled() {
    let w = Warm::start(&[]);
    for mode in ["fork", "reuse"] {
        let mut t = w.call(&format!("slow-{mode}"), "sleep", "600", mode);
        t["timeout_s"] = json!(1);
        let marker = w.scratch(&format!("cancel-{mode}"));
        let c = w.call(
            &format!("cancel-{mode}"),
            "pid_then_sleep",
            marker.to_str().unwrap(),
            mode,
        );
        w.c.submit(&[t, c]);
        let t = w.c.wait_done(&format!("slow-{mode}"));
        assert_eq!(t["state"], "failed");
        assert_eq!(t["outcome"]["error"], "timed out after 1 s", "{t}");
        let text = poll("the call to start", || {
            std::fs::read_to_string(&marker)
                .ok()
                .filter(|t| t.contains(' '))
        });
        let pid: u32 = text.split(' ').next().unwrap().parse().unwrap();
        let r =
            w.c.http
                .post(format!("{}/v1/tasks/cancel-{mode}/cancel", w.c.url))
                .bearer_auth(&w.c.client_token)
                .send()
                .unwrap();
        assert!(r.status().is_success());
        let t = w.c.wait_done(&format!("cancel-{mode}"));
        assert_eq!(t["state"], "cancelled", "{t}");
        poll("the cancelled call's process to be gone", || {
            (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
        });
    }
}

#[test]
fn a_function_that_ends_its_process_or_leaves_children_leaves_no_orphan() {
    let w = Warm::start(&[]);
    let child_file = w.scratch("child");
    let bad = w.call("not-bytes", "not_bytes", "", "fork");
    w.c.submit(&[
        w.call("exits", "exits", "", "fork"),
        w.call("exits-reuse", "exits", "", "reuse"),
        w.call(
            "leaves",
            "leaves_a_child",
            child_file.to_str().unwrap(),
            "fork",
        ),
        bad,
    ]);
    let t = w.c.wait_done("exits");
    assert_eq!(t["state"], "failed");
    assert!(
        t["outcome"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("without a result"),
        "{t}"
    );
    let t = w.c.wait_done("exits-reuse");
    assert_eq!(t["state"], "failed", "{t}");
    let t = w.c.wait_done("leaves");
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(value(&t), b"left");
    let child: u32 = std::fs::read_to_string(&child_file)
        .unwrap()
        .parse()
        .unwrap();
    poll("the call's leftover child to be killed", || {
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting for its reaper.
        (stat.is_empty() || stat.contains(") Z ")).then_some(())
    });
    let t = w.c.wait_done("not-bytes");
    assert_eq!(t["state"], "failed");
    let tail = report(&t)["stderr_tail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(tail.contains("TypeError") && tail.contains("bytes"), "{t}");
}

#[test]
fn a_call_over_its_memory_limit_is_killed_where_cgroups_allow() {
    if !is_root() {
        return skip("memory cgroups need root here");
    }
    let w = Warm::start(&[]);
    if !w.c.workers[0]
        .log_text()
        .contains("memory requests are enforced")
    {
        return skip("this worker cannot make memory cgroups");
    }
    for mode in ["fork", "reuse"] {
        let mut hog = w.call(&format!("hog-{mode}"), "hog", "400", mode);
        hog["memory"] = json!("150MB");
        let mut fits = w.call(&format!("fits-{mode}"), "hog", "20", mode);
        fits["memory"] = json!("150MB");
        w.c.submit(&[hog, fits]);
        let t = w.c.wait_done(&format!("hog-{mode}"));
        assert_eq!(t["state"], "failed", "{t}");
        assert!(
            t["outcome"]["error"]
                .as_str()
                .unwrap_or_default()
                .contains("used more than its memory limit of 150MB"),
            "{t}"
        );
        let t = w.c.wait_done(&format!("fits-{mode}"));
        assert_eq!(t["state"], "succeeded", "{t}");
    }
}

#[test]
fn with_a_task_user_every_call_runs_in_a_process_of_that_user() {
    if !is_root() {
        return skip("--task-user needs root");
    }
    let w = Warm::start(&["--task-user", "nobody"]);
    w.c.submit(&[
        w.call("fork-user", "who", "", "fork"),
        w.call("reuse-user", "who", "", "reuse"),
    ]);
    for id in ["fork-user", "reuse-user"] {
        let t = w.c.wait_done(id);
        assert_eq!(t["state"], "succeeded", "{t}");
        let who = json_value(&t);
        assert_eq!(who["uid"], 65534, "{who}");
        if id == "fork-user" {
            assert_eq!(who["parent_uid"], 65534, "its warm process too: {who}");
        }
    }
}

#[test]
fn a_setup_that_fails_or_a_missing_interpreter_fails_the_call_with_the_reason() {
    let w = Warm::start(&[]);
    let mut bad = w.call("bad-preload", "who", "", "fork");
    bad["call"]["preload"] = json!(["no_such_module_here"]);
    let mut nopy = w.call("no-python", "who", "", "fork");
    nopy["call"]["python"] = json!("/no/such/python3");
    w.c.submit(&[bad, nopy]);
    let t = w.c.wait_done("bad-preload");
    assert_eq!(t["state"], "failed");
    let e = t["outcome"]["error"].as_str().unwrap_or_default();
    assert!(
        e.contains("setup failed") && e.contains("no_such_module_here"),
        "{t}"
    );
    let t = w.c.wait_done("no-python");
    let e = t["outcome"]["error"].as_str().unwrap_or_default();
    assert!(e.contains("/no/such/python3"), "{t}");
}
