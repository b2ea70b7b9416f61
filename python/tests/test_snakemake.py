"""Snakemake on diffuse: the executor and storage plugins of python/snakemake-executor-plugin-diffuse
against the session's real dispatcher and workers (conftest.py), with a real Snakemake (9.27).

- Snakemake's own tests for executor plugins (``snakemake.common.tests``), as the official
  plugins run them;
- job inputs read from the workers' caches (traffic counters, hard-linked local copies);
- Snakemake's semantics: temp(), protected(), shadow rules, logs, resources;
- reruns: one input changed reruns exactly what Snakemake's dry run names, with the new bytes,
  and a job Snakemake reruns is run by diffuse even where diffuse keeps results for reuse;
- failures reported with diffuse's reason, Ctrl-C cancelling the run's tasks, status read in
  one request per poll.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Counter, List

import pytest

pytest.importorskip("snakemake", reason="Snakemake 9 needs Python 3.11+ (scripts/test-python.sh installs it)")

from snakemake.common.tests import TestWorkflowsLocalStorageBase  # noqa: E402
from snakemake_executor_plugin_diffuse import ExecutorSettings, task_resources  # noqa: E402

from diffuse_client import Client, Task  # noqa: E402
from helpers import Cluster, unique, wait_until  # noqa: E402

#: The storage settings of the quick start: inputs through the diffuse storage plugin, local
#: copies made by each job (not on the shared file system).
CACHED = [
    "--default-storage-provider", "diffuse",
    "--shared-fs-usage", "persistence", "software-deployment", "sources", "source-cache",
]


# ---------------------------------------------------------------- Snakemake's own tests


class TestWorkflows(TestWorkflowsLocalStorageBase):
    """``test_simple_workflow`` and ``test_group_workflow`` of Snakemake's executor-plugin test
    base, as snakemake-executor-plugin-slurm and -cluster-generic run them (no default storage
    provider, a shared file system)."""

    __test__ = True

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cluster = cluster
        monkeypatch.setenv("DIFFUSE_CLIENT_TOKEN", cluster.client_token)

    def get_executor(self) -> str:
        return "diffuse"

    def get_executor_settings(self) -> ExecutorSettings:
        return ExecutorSettings(url=self.cluster.url, job=unique("smk-base"))


@pytest.mark.parametrize("case", ["simple", "groups"])
def test_snakemakes_testcases_with_the_diffuse_storage(cluster: Cluster, tmp_path: Path, case: str) -> None:
    """The same two workflows of Snakemake's test base, run with the quick start's storage
    settings (inputs through the ``diffuse`` provider, local copies made in the tasks), which the
    base class cannot set (its ``shared-fs-usage`` is all or nothing)."""
    import snakemake.common.tests as base

    work = tmp_path / case
    shutil.copytree(Path(base.__file__).parent / "testcases" / case, work)
    run_snakemake(cluster, work, *CACHED)
    expected = ["test3.out"] + (
        ["test1.out", "test2.out", "a.log", "b.log", "c.log", "res/somedir1.out", "res/somedir2/subdir.out"]
        if case == "simple"
        else [f"test{k}.{s}.out" for k in (1, 2) for s in (1, 2, 3)]
    )
    missing = [f for f in expected if not (work / f).exists()]
    assert not missing, missing
    p = run_snakemake(cluster, work, *CACHED, "-n")
    assert "Nothing to be done" in p.stdout + p.stderr


# ---------------------------------------------------------------- helpers

#: The quick start's profile (python/snakemake-executor-plugin-diffuse/README.md, README.md).
QUICK_START = """executor: diffuse
jobs: 500
default-storage-provider: diffuse
shared-fs-usage: [persistence, software-deployment, sources, source-cache]
diffuse-job: {job}
"""


def run_snakemake(
    cluster: Cluster,
    workdir: Path,
    *args: str,
    check: bool = True,
    timeout: float = 300,
    defaults: bool = True,
) -> "subprocess.CompletedProcess[str]":
    """``python -m snakemake --executor diffuse --jobs 8 ARGS`` in ``workdir`` against
    ``cluster`` (without ``defaults``, ``python -m snakemake ARGS``)."""
    env = dict(os.environ)
    env["DIFFUSE_DISPATCHER"] = cluster.url
    env["DIFFUSE_CLIENT_TOKEN"] = cluster.client_token
    base = ["--executor", "diffuse", "--jobs", "8"] if defaults else []
    cmd = [sys.executable, "-m", "snakemake", *base, "--nocolor", *args]
    p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        pytest.fail(f"snakemake failed ({p.returncode}):\n{p.stderr[-6000:]}\n" + cluster.dump_logs())
    return p


def rules_run(client: Client, since: int) -> List[str]:
    """The rule of each Snakemake job's task submitted after the listing cursor ``since``
    (task ids are ``smk-<run>-<jobid>-<rule>-a<attempt>``)."""
    out = []
    for t in client.iter_tasks(after=since):
        m = re.match(r"smk-[0-9a-f]+-\d+-(.+)-a\d+$", t.id)
        if m:
            out.append(m.group(1))
    return out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_inputs(d: Path, n: int, size: int) -> List[Path]:
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = d / f"in{i}.bin"
        p.write_bytes(os.urandom(size))
        out.append(p)
    return out


# ---------------------------------------------------------------- inputs from the caches


LOCALITY = """
N = {n}
READERS = {readers}
rule all:
    input: expand("out/{{i}}_{{r}}.txt", i=range(N), r=range(READERS))
rule first:
    input: "data/in{{i}}.bin"
    output: "out/{{i,[0-9]+}}_0.txt"
    shell: "(sha256sum < {{input}} | cut -c1-64; echo {{input}}; stat -c %h {{input}}) > {{output}}"
rule more:
    input: "data/in{{i}}.bin", "out/{{i}}_0.txt"
    output: "out/{{i,[0-9]+}}_{{r,[1-9][0-9]*}}.txt"
    shell: "(sha256sum < {{input[0]}} | cut -c1-64; echo {{input[0]}}; stat -c %h {{input[0]}}) > {{output}}"
"""


def test_inputs_are_read_from_the_workers_caches(cluster: Cluster, tmp_path: Path) -> None:
    """4 files of 1 MB, each read by 4 jobs (one first, then three more): shared storage serves
    each file about once, the other reads are the workers' caches, and each job reads a hard
    link of the staged copy in its task directory (not the shared path)."""
    client = cluster.client()
    n, readers, size = 4, 4, 1_000_000
    inputs = write_inputs(tmp_path / "data", n, size)
    (tmp_path / "Snakefile").write_text(LOCALITY.format(n=n, readers=readers))
    profile = tmp_path / "profile"
    profile.mkdir()
    job = unique("smk-quick-start")
    (profile / "config.yaml").write_text(QUICK_START.format(job=job))
    before = client.status().traffic
    run_snakemake(cluster, tmp_path, "--profile", str(profile), defaults=False)
    after = client.status().traffic
    assert client.job(job).succeeded == n * readers
    storage = after.bytes_storage - before.bytes_storage
    cached = (after.bytes_local - before.bytes_local) + (after.bytes_peer - before.bytes_peer)
    print(f"shared storage served {storage} B, the workers' caches {cached} B")
    # 16 job reads of 1 MB and 12 of the small out/*_0.txt files
    assert n * size <= storage < 2 * n * size, (storage, cached)
    assert cached >= (n * readers - 2 * n) * size, (storage, cached)
    for i, src in enumerate(inputs):
        for r in range(readers):
            digest, path, links = (tmp_path / "out" / f"{i}_{r}.txt").read_text().split("\n")[:3]
            assert digest == sha(src)
            # the local copy is in the task's scratch directory, under the worker's cache...
            assert "/work/" in path and "snakemake-storage" in path and path.endswith(f"data/in{i}.bin")
            assert str(tmp_path) not in path
            # ...and a hard link of the cached copy (cache, staged input, local copy)
            assert int(links) >= 3


# ---------------------------------------------------------------- Snakemake semantics


SEMANTICS = """
rule all:
    input: "final.txt", "prot.txt", "shadowed.txt", "cores.txt"
rule make_temp:
    input: "data/in0.bin"
    output: temp("tmp.txt")
    log: "logs/make_temp.log"
    shell: "sha256sum < {input} | cut -c1-64 > {output}; echo made temp >&2 2> {log}; echo wrote {output} > {log}"
rule final:
    input: "tmp.txt"
    output: "final.txt"
    shell: "cp {input} {output}"
rule prot:
    input: "data/in1.bin"
    output: protected("prot.txt")
    shell: "wc -c < {input} > {output}"
rule shadowed:
    input: "data/in0.bin"
    output: "shadowed.txt"
    shadow: "minimal"
    shell: "wc -c < {input} > junk.txt; cp junk.txt {output}"
rule cores:
    output: "cores.txt"
    threads: 2
    resources: mem_mb=100
    shell: "echo $DIFFUSE_CORES {threads} > {output}"
"""


def test_temp_protected_shadow_log_and_threads(cluster: Cluster, tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "data", 2, 10_000)
    (tmp_path / "Snakefile").write_text(SEMANTICS)
    run_snakemake(cluster, tmp_path, *CACHED, "--cores", "4")
    assert (tmp_path / "final.txt").read_text().strip() == sha(inputs[0])
    assert not (tmp_path / "tmp.txt").exists(), "temp() output not removed after its consumer"
    prot = tmp_path / "prot.txt"
    assert prot.read_text().strip() == "10000"
    assert not os.stat(prot).st_mode & 0o222, "protected() output is writable"
    assert (tmp_path / "shadowed.txt").read_text().strip() == "10000"
    assert not (tmp_path / "junk.txt").exists(), "a shadow rule's scratch file leaked"
    # the job sees its local copies (the storage plugin's paths: the task's scratch directory,
    # then the path as written), as with any Snakemake storage plugin
    logged = (tmp_path / "logs" / "make_temp.log").read_text().strip()
    assert logged.startswith("wrote /") and logged.endswith("/snakemake-storage/tmp.txt"), logged
    assert (tmp_path / "cores.txt").read_text().split() == ["2", "2"]
    # nothing left to do: Snakemake's own bookkeeping (metadata, mtimes) holds
    p = run_snakemake(cluster, tmp_path, *CACHED, "-n")
    assert "Nothing to be done" in p.stdout + p.stderr


# ---------------------------------------------------------------- reruns and reuse


RERUN = """
rule all:
    input: "summary.txt"
rule digest:
    input: "data/in{i}.bin"
    output: "digest/{i}.txt"
    shell: "sha256sum < {input} | cut -c1-64 > {output}"
rule summary:
    input: expand("digest/{i}.txt", i=range(3))
    output: "summary.txt"
    shell: "cat {input} > {output}"
"""


def test_rerun_after_one_input_changes_and_reuse_does_not_contradict(
    reuse_cluster: Cluster, tmp_path: Path
) -> None:
    """On a dispatcher that keeps results for reuse (``--reuse on``): changing one input reruns
    exactly the jobs Snakemake's dry run names (its digest and the summary), with the new bytes;
    a forced rerun (``-R digest``) of jobs whose inputs did not change runs them (diffuse does
    not stand a kept result in, which would write no output: the tasks carry ``reuse: false``)."""
    cluster = reuse_cluster
    client = cluster.client()
    inputs = write_inputs(tmp_path / "data", 3, 50_000)
    (tmp_path / "Snakefile").write_text(RERUN)
    run_snakemake(cluster, tmp_path, *CACHED)
    first = (tmp_path / "summary.txt").read_text().split()
    assert first == [sha(p) for p in inputs]

    time.sleep(1.1)  # a new modification time, whatever the file system's resolution
    inputs[1].write_bytes(os.urandom(50_000))
    dry = run_snakemake(cluster, tmp_path, *CACHED, "-n", "--quiet", "rules")
    planned = sorted(set(re.findall(r"^(digest|summary)\s+(\d+)$", dry.stdout, re.M)))
    assert planned == [("digest", "1"), ("summary", "1")], dry.stdout
    mtimes = [(tmp_path / "digest" / f"{i}.txt").stat().st_mtime for i in range(3)]
    since = client.status().submitted - 1
    run_snakemake(cluster, tmp_path, *CACHED)
    ran = sorted(rules_run(client, since))
    assert ran == ["digest", "summary"], ran
    after = [(tmp_path / "digest" / f"{i}.txt").stat().st_mtime for i in range(3)]
    assert after[0] == mtimes[0] and after[2] == mtimes[2] and after[1] > mtimes[1]
    assert (tmp_path / "summary.txt").read_text().split() == [sha(p) for p in inputs]

    # Snakemake forces the three digests again: diffuse runs all three (none reused)
    reused_before = client.status().reused
    digests = tmp_path / "digest" / "0.txt"
    mtime = digests.stat().st_mtime
    since = client.status().submitted - 1
    run_snakemake(cluster, tmp_path, *CACHED, "-R", "digest")
    ran = sorted(rules_run(client, since))
    assert ran == ["digest"] * 3 + ["summary"], ran
    assert client.status().reused == reused_before
    assert digests.stat().st_mtime > mtime
    for t in client.iter_tasks(after=since):
        assert t.outcome is not None and t.outcome.reused_from is None
    assert (tmp_path / "summary.txt").read_text().split() == [sha(p) for p in inputs]


# ---------------------------------------------------------------- failures, cancel, status


def test_failure_reports_diffuse_reason_and_log(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(
        'rule bad:\n    output: "x.txt"\n    shell: "echo going wrong >&2; exit 3"\n'
    )
    p = run_snakemake(cluster, tmp_path, check=False)
    assert p.returncode != 0
    err = p.stdout + p.stderr
    assert "exit code 3" in err or "exit status 3" in err, err[-3000:]
    assert re.search(r"diffuse task smk-\S+ failed", err), err[-3000:]
    logs = list((tmp_path / ".snakemake" / "diffuse_logs" / "bad").glob("*.log"))
    assert logs and "going wrong" in logs[0].read_text()


def test_ctrl_c_cancels_the_running_tasks(cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client()
    job = unique("smk-cancel")
    (tmp_path / "Snakefile").write_text(
        'rule all:\n    input: expand("s{i}.txt", i=range(3))\n'
        'rule s:\n    output: "s{i}.txt"\n    shell: "sleep 120; touch {output}"\n'
    )
    env = dict(os.environ, DIFFUSE_DISPATCHER=cluster.url, DIFFUSE_CLIENT_TOKEN=cluster.client_token)
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--executor", "diffuse", "--jobs", "3", "--diffuse-job", job],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        # SIGINT's default action whatever the test run inherited. A run started with `&` from a
        # non-interactive shell inherits SIGINT ignored, and Python then installs no
        # KeyboardInterrupt handler: Snakemake would never see the Ctrl-C (measured: without
        # this line the test fails when started that way, with Snakemake's log ending at
        # "Execute 3 jobs...").
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        def running() -> bool:
            try:
                return client.job(job).running == 3
            except Exception:
                return False

        try:
            wait_until(running, 60, "three running jobs")
        except BaseException:
            proc.kill()
            raise AssertionError(f"three tasks never ran; Snakemake said:\n{proc.communicate()[1][-6000:]}")
        time.sleep(2)  # the three Snakemake jobs have started in their tasks
        proc.send_signal(signal.SIGINT)
        try:
            # Reading its stderr as it goes: a full pipe would block it.
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"Snakemake did not stop within 60 s of SIGINT:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_until(lambda: client.job(job).cancelled == 3, 30, "the three tasks cancelled")
    assert not any((tmp_path / f"s{i}.txt").exists() for i in range(3))


def test_status_of_many_tasks_in_one_request(cluster: Cluster, requests_seen: Counter[str]) -> None:
    """The poll behind ``check_active_jobs`` (``Client.states``): 300 tasks' states in one
    request; ids the dispatcher does not know told apart; over 10,000 ids, a second request."""
    client = cluster.client()
    prefix = unique("poll")
    ids = [f"{prefix}-{i}" for i in range(300)]
    client.submit_many([Task(id=t, cmd="true", reuse=False) for t in ids])
    client.wait(ids, timeout=120, poll=0.2)
    before = requests_seen["POST /v1/states"]
    states, unknown = client.states(ids + ["nope"])
    assert requests_seen["POST /v1/states"] - before == 1
    assert unknown == ["nope"]
    assert len(states) == 300 and all(t.state == "succeeded" for t in states.values())
    before = requests_seen["POST /v1/states"]
    strangers = [f"{prefix}-none-{i}" for i in range(9_800)]
    states, unknown = client.states(ids + strangers)
    assert requests_seen["POST /v1/states"] - before == 2
    assert len(states) == 300 and unknown == strangers


def test_resources_map_to_task_fields() -> None:
    f = task_resources(4, {"mem_mb": 2000, "runtime": 30, "gpu": 1, "disk_mb": 5})
    assert f == {
        "cores": 4, "memory": "2000MB", "memory_limit": "none",
        "timeout_s": 1800.0, "walltime_s": 1800.0, "gpus": 1,
    }
    assert task_resources(1, {"mem_mib": 512}, enforce_memory=True) == {"cores": 1, "memory": "512MiB"}
    assert task_resources(0, {}) == {"cores": 1}
