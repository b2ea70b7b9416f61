//! A real one-node Slurm cluster (`scripts/slurm.sh`): munged, slurmctld and slurmd running as
//! root, everything (config, munge key, state, spool, logs) under one directory, on ports of its
//! own, declaring `cpus` CPUs however many the machine has (that many one-CPU jobs run at once).
//! [`Slurm::start`] returns once a job has run on it (~4 s; the first start on a machine may also
//! install the Debian packages with apt); dropping the [`Slurm`] stops its daemons and any job
//! still running, and keeps the logs under `dir/log`. Not root: no cluster, the test skips.
//!
//! Every client command needs `SLURM_CONF` ([`Slurm::conf`]); [`Slurm::cmd`] sets it. There is no
//! accounting (`sacct` fails): final job states are in `squeue -t all` for 5 minutes after a job
//! ends, and in `scontrol show job`. Job ids start from 1 again at every start.

#![allow(dead_code)] // each test crate uses a different part

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running one-node Slurm cluster.
pub struct Slurm {
    /// Where everything lives (absolute).
    pub dir: PathBuf,
    /// `dir/slurm.conf`: what `SLURM_CONF` must be for every client command.
    pub conf: PathBuf,
}

/// `scripts/slurm.sh`, from the repository root.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm.sh")
}

impl Slurm {
    /// Starts one (via `scripts/slurm.sh up`) or returns None when not root (tests then print
    /// SKIPPED). Anything left running in `dir` by an earlier start is stopped first.
    pub fn start(dir: &Path, cpus: u32) -> Option<Slurm> {
        let stdout = script_up(&script(), dir, &[cpus.to_string()])?;
        let conf = PathBuf::from(
            stdout
                .trim()
                .strip_prefix("export SLURM_CONF=")
                .unwrap_or_else(|| panic!("scripts/slurm.sh up printed {stdout:?}")),
        );
        let dir = conf.parent().expect("conf in dir").to_path_buf();
        Some(Slurm { dir, conf })
    }

    /// Runs a client command (`squeue`, `scancel`, ...) with `SLURM_CONF` set; returns stdout.
    /// Panics, with its stderr, if it fails.
    pub fn cmd(&self, prog: &str, args: &[&str]) -> String {
        slurm_cmd(&self.conf, prog, args)
    }

    /// The pid of one of its daemons (`munged`, `slurmctld`, `slurmd`), as `up` recorded it.
    pub fn daemon_pid(&self, daemon: &str) -> u32 {
        let pids = std::fs::read_to_string(self.dir.join("pids")).expect("DIR/pids");
        pids.lines()
            .find_map(|l| {
                let (name, pid) = l.split_once(' ')?;
                (name == daemon).then(|| pid.trim().parse().ok())?
            })
            .unwrap_or_else(|| panic!("no {daemon} in {pids:?}"))
    }

    /// (job id, state) of each job in `squeue -t all` (pending, running, and ended in the last
    /// 5 minutes: COMPLETED, CANCELLED, FAILED, TIMEOUT, ...) whose name starts with `name_prefix`.
    pub fn jobs(&self, name_prefix: &str) -> Vec<(String, String)> {
        self.jobs_named(name_prefix)
            .into_iter()
            .map(|(id, state, _)| (id, state))
            .collect()
    }

    /// (job id, state, name) of each job in `squeue -t all` whose name starts with
    /// `name_prefix`.
    pub fn jobs_named(&self, name_prefix: &str) -> Vec<(String, String, String)> {
        self.cmd("squeue", &["-h", "-t", "all", "-o", "%i %T %j"])
            .lines()
            .filter_map(|line| {
                let mut fields = line.splitn(3, ' ');
                let (id, state, name) = (fields.next()?, fields.next()?, fields.next()?);
                name.starts_with(name_prefix)
                    .then(|| (id.to_string(), state.to_string(), name.to_string()))
            })
            .collect()
    }
}

impl Drop for Slurm {
    /// `scripts/slurm.sh down`: the daemons and any job still running are gone when this returns.
    fn drop(&mut self) {
        script_down(&script(), &self.dir);
    }
}

/// `SCRIPT up DIR ARGS...` (`scripts/slurm.sh`, `scripts/slurm-hosts.sh`): its stdout, or None
/// when it says it cannot run here (exit 3: not root; its reason printed, the test skips).
/// Panics with its stderr on any other failure.
pub fn script_up(script: &Path, dir: &Path, args: &[String]) -> Option<String> {
    let out = Command::new(script)
        .arg("up")
        .arg(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Some(String::from_utf8_lossy(&out.stdout).into_owned()),
        Some(3) => {
            eprintln!("{}", stderr.trim_end());
            None
        }
        _ => panic!(
            "{} up {} failed ({}):\n{stderr}",
            script.display(),
            dir.display(),
            out.status
        ),
    }
}

/// `SCRIPT down DIR`; a failure is printed (it runs from `Drop`).
pub fn script_down(script: &Path, dir: &Path) {
    match Command::new(script).arg("down").arg(dir).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => eprintln!(
            "{} down {} failed ({}):\n{}",
            script.display(),
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("run {} down: {e}", script.display()),
    }
}

/// Run a client command (`squeue`, `scancel`, ...) with `SLURM_CONF=conf`; its stdout. Panics,
/// with its stderr, if it fails.
pub fn slurm_cmd(conf: &Path, prog: &str, args: &[&str]) -> String {
    let out = Command::new(prog)
        .args(args)
        .env("SLURM_CONF", conf)
        .output()
        .unwrap_or_else(|e| panic!("run {prog}: {e}"));
    assert!(
        out.status.success(),
        "{prog} {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Wrappers of sbatch, squeue and scancel, first on the returned PATH, that log each call to
/// `dir/rm-calls` (`<program> start|end <unix time> <arguments>`) and run Slurm's own; `sbatch`
/// first sleeps `sbatch_delay` seconds (a slow controller: a window to kill the dispatcher in).
pub fn logged_slurm_commands(dir: &Path, sbatch_delay: f64) -> (String, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("logged-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("rm-calls");
    let path = std::env::var("PATH").unwrap();
    for prog in ["sbatch", "squeue", "scancel"] {
        let real = std::env::split_paths(&path)
            .map(|d| d.join(prog))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{prog} on PATH"));
        let delay = if prog == "sbatch" { sbatch_delay } else { 0.0 };
        let wrapper = bin.join(prog);
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\necho \"{prog} start $(date +%s.%N) $*\" >> {log}\nsleep {delay}\n\
                 {real} \"$@\"\nrc=$?\necho \"{prog} end $(date +%s.%N) $*\" >> {log}\nexit $rc\n",
                log = log.display(),
                real = real.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (format!("{}:{path}", bin.display()), log)
}
