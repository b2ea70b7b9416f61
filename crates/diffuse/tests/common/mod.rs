//! What the `diffuse` binary's integration tests share: running the binary to completion.

pub mod cluster;
pub mod host;
pub mod hosts;
pub mod netfault;
pub mod pki;
pub mod slurm;
pub mod slurm_hosts;
pub mod task_runs;
pub mod testbed;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Send `signal` to process `pid`, or, if `group`, to every process of process group `pid`.
///
/// Never through the `kill` program: procps-ng 4.0.2's (Debian 12) reads `kill -KILL -1234` as
/// `kill(-1, SIGKILL)`, which, as root, kills every process on the machine.
#[allow(dead_code)] // not every test crate signals
pub fn send_signal(pid: u32, group: bool, signal: rustix::process::Signal) {
    let p = rustix::process::Pid::from_raw(pid as i32)
        .filter(|p| p.as_raw_nonzero().get() > 1)
        .unwrap_or_else(|| panic!("refusing to signal pid {pid}"));
    let _ = if group {
        rustix::process::kill_process_group(p, signal)
    } else {
        rustix::process::kill_process(p, signal)
    };
}

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_diffuse");

/// What a finished `diffuse …` command printed.
#[allow(dead_code)] // not every test crate reads every field
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// This test process's `$XDG_CACHE_HOME` for `diffuse run` (kept across its runs, as a user's
/// is). It cannot be removed when the process exits (no destructor runs then), so the first
/// call removes those of test processes that are gone.
fn test_caches() -> std::path::PathBuf {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    let tmp = std::env::temp_dir();
    SWEEP.call_once(|| {
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("diffuse-test-caches-"))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    tmp.join(format!("diffuse-test-caches-{}", std::process::id()))
}

/// Run `diffuse args…` in `cwd` (default: the test's) with extra environment `env`, to
/// completion; kill it and fail the test if it outlives `deadline`.
pub fn run_diffuse(
    args: &[&str],
    cwd: Option<&Path>,
    env: &[(&str, &str)],
    deadline: Duration,
) -> Output {
    let mut cmd = Command::new(BIN);
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    // `diffuse run`'s workers keep their caches between runs under $XDG_CACHE_HOME: one place
    // per test process, not the user's own.
    let caches = test_caches();
    // Results are not reused unless a test turns reuse on (`DIFFUSE_REUSE=on`, or `--reuse
    // on`): the other tests run identical tasks on purpose (to watch staging, locality,
    // retries), and tests/reuse.rs checks reuse itself.
    let mut child = cmd
        .args(args)
        .env("DIFFUSE_LOG", "info")
        .env("DIFFUSE_REUSE", "off")
        .env("XDG_CACHE_HOME", &caches)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start diffuse");
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).ok();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).ok();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for diffuse") {
            break status;
        }
        if start.elapsed() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!(
                "`diffuse {}` still running after {deadline:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        code: status.code(),
        stdout: out_reader.join().expect("stdout reader"),
        stderr: err_reader.join().expect("stderr reader"),
    }
}
