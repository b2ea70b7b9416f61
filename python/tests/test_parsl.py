"""DiffuseParslExecutor: Parsl apps on a real dispatcher and workers, with cached File inputs."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

parsl = pytest.importorskip("parsl")

from parsl import File, bash_app, python_app  # noqa: E402
from parsl.app.errors import BashExitFailure, MissingOutputs, RemoteExceptionWrapper  # noqa: E402
from parsl.config import Config  # noqa: E402

from diffuse_client import Client, Traffic  # noqa: E402
from diffuse_client.parsl import (  # noqa: E402
    DiffuseParslExecutor,
    DiffuseTaskFailure,
    bash_app_function,
    code_digest,
    resources_to_fields,
)
from helpers import Cluster  # noqa: E402

SIZE = 1_000_000  # bytes per data file
FILES = 4  # data files
READS = 4  # apps reading each file after its first read


@contextlib.contextmanager
def loaded(cluster: Cluster, tmp_path: Path, config: Optional[Dict[str, Any]] = None,
           **kw: Any) -> Iterator[DiffuseParslExecutor]:
    """A DataFlowKernel with one DiffuseParslExecutor (``kw`` its options, ``config`` more
    ``Config`` options)."""
    ex = DiffuseParslExecutor(
        label="diffuse",
        url=cluster.url,
        token_file=str(cluster.token_file),
        staging_dir=str(tmp_path / "staging"),
        # the apps below are module-level functions, serialized by reference to this module
        task_defaults={"env": {"PYTHONPATH": str(Path(__file__).parent)}},
        **kw,
    )
    dfk = parsl.load(Config(executors=[ex], run_dir=str(tmp_path / "runinfo"), strategy="none",
                            **(config or {})))
    try:
        yield ex
    finally:
        dfk.cleanup()
        parsl.clear()


@pytest.fixture()
def executor(cluster: Cluster, tmp_path: Path) -> Iterator[DiffuseParslExecutor]:
    """A DataFlowKernel with one DiffuseParslExecutor; tmp_path stands for shared storage."""
    with loaded(cluster, tmp_path) as ex:
        yield ex


@bash_app
def count_bytes(inputs: List[File] = [], outputs: List[File] = [], stdout: Optional[str] = None) -> str:
    # prints the path it reads (the worker's staged copy), writes the byte count to its output
    return f"echo {inputs[0]}; wc -c < {inputs[0]} > {outputs[0]}"


@bash_app
def writes_its_name(outputs: List[File] = [], stdout: Any = None) -> str:
    # the first app of Parsl's test_output_chain_filenames, printing the path it writes to
    return f"echo {outputs[0]}; echo test > {outputs[0]}"


@bash_app
def echoes_input_name(inputs: List[File] = [], outputs: List[File] = []) -> str:
    # the second app of Parsl's test_output_chain_filenames
    return f"echo '{inputs[0]}' > {outputs[0]}"


@bash_app
def exits(code: int) -> str:
    return f"exit {code}"


@bash_app
def forgets_output(outputs: List[File] = []) -> str:
    return "true"


@bash_app
def say(word: str, stdout: Any = None) -> str:
    return f"echo {word}"


@python_app
def add(a: int, b: int) -> int:
    return a + b


@python_app
def concatenate(inputs: List[File] = [], outputs: List[File] = []) -> str:
    text = "".join(open(f.filepath).read() for f in inputs)
    with open(outputs[0].filepath, "w") as out:
        out.write(text)
    return inputs[0].filepath


@python_app
def listing(inputs: List[File] = []) -> List[str]:
    import os

    return sorted(os.listdir(inputs[0].filepath))


@python_app
def raises(message: str) -> None:
    raise ValueError(message)


@python_app
def cores_seen(parsl_resource_specification: Dict[str, Any] = {}) -> str:
    import os

    return os.environ["DIFFUSE_CORES"]


@python_app
def allocates(mib: int, parsl_resource_specification: Dict[str, Any] = {}) -> int:
    return len(bytearray(mib * 2**20))


def traffic(client: Client) -> Traffic:
    return client.status().traffic


def exec_task_id(app_future: Any) -> str:
    """The diffuse task id behind a Parsl AppFuture."""
    return str(app_future.task_record["exec_fu"].parsl_executor_task_id)


def test_bash_apps_read_file_inputs_from_worker_caches(
    executor: DiffuseParslExecutor, cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = cluster.client()
    data = tmp_path / "data"
    data.mkdir()
    files = []
    for i in range(FILES):
        p = data / f"part-{i}.bin"
        p.write_bytes(os.urandom(SIZE))
        files.append(p)
    out = tmp_path / "out"

    # first read of each file: one app per file
    t0 = traffic(client)
    staged0 = executor.staged_bytes
    first = [
        count_bytes(inputs=[File(str(p))], outputs=[File(str(out / f"first-{i}.txt"))],
                    stdout=str(out / f"first-{i}.log"))
        for i, p in enumerate(files)
    ]
    assert [f.result(timeout=120) for f in first] == [0] * FILES
    t1 = traffic(client)
    staged1 = executor.staged_bytes

    # READS more apps per file, all submitted at once
    later = [
        count_bytes(inputs=[File(str(p))], outputs=[File(str(out / f"later-{i}-{k}.txt"))],
                    stdout=str(out / f"later-{i}-{k}.log"))
        for k in range(READS)
        for i, p in enumerate(files)
    ]
    assert [f.result(timeout=300) for f in later] == [0] * (FILES * READS)
    t2 = traffic(client)
    staged2 = executor.staged_bytes

    # every output came back to its path, with the right count
    counts = sorted(out.glob("*.txt"))
    assert len(counts) == FILES * (READS + 1)
    assert {c.read_text().strip() for c in counts} == {str(SIZE)}
    # the apps read the worker's staged copy, not the file on shared storage
    for log in out.glob("*.log"):
        read = log.read_text().strip()
        assert read != str(data) and "/inputs/" in read
        assert any(read.startswith(str(c)) for c in cluster.cache_dirs), read

    # Storage: each data file read once, in the first round; the rest of the storage bytes are
    # the executor's own staged function and argument files (each read at most once per task).
    data_total = FILES * SIZE
    first_storage = t1.bytes_storage - t0.bytes_storage
    later_storage = t2.bytes_storage - t1.bytes_storage
    assert staged2 - staged0 < SIZE  # so one more read of any data file would show
    assert data_total <= first_storage <= data_total + (staged1 - staged0)
    assert later_storage <= staged2 - staged1  # no data file read from storage again
    later_cached = (t2.bytes_local - t1.bytes_local) + (t2.bytes_peer - t1.bytes_peer)
    assert later_cached >= FILES * READS * SIZE
    assert (t2.bytes_storage - t0.bytes_storage) - data_total <= staged2 - staged0

    # per app: each later app read its data file from a cache (its own worker's or a peer's)
    local_reads = peer_reads = 0
    for f in later:
        report = client.get(exec_task_id(f)).outcome.report  # type: ignore[union-attr]
        tr = report["traffic"]
        assert tr["bytes_storage"] < SIZE, report
        assert tr["bytes_local"] + tr["bytes_peer"] >= SIZE, report
        local_reads += tr["bytes_local"] >= SIZE
        peer_reads += tr["bytes_peer"] >= SIZE
    holders = {p.name: client.locate(p).nodes for p in files}
    assert all(holders.values())

    with capsys.disabled():
        print(
            f"\nlocality: {FILES} files x {SIZE:,} B, read by {FILES * (READS + 1)} bash apps"
            f"\n  first round : storage {first_storage:,} B (data {data_total:,} + staging "
            f"{first_storage - data_total:,}), local {t1.bytes_local - t0.bytes_local:,} B, "
            f"peer {t1.bytes_peer - t0.bytes_peer:,} B"
            f"\n  later rounds: storage {later_storage:,} B (staging only), local "
            f"{t2.bytes_local - t1.bytes_local:,} B, peer {t2.bytes_peer - t1.bytes_peer:,} B; "
            f"{local_reads} apps read their file locally, {peer_reads} from a peer"
            f"\n  in all      : storage {t2.bytes_storage - t0.bytes_storage:,} B for "
            f"{FILES * (READS + 1) * SIZE:,} B of data read; staged by the executor "
            f"{staged2 - staged0:,} B; holders {holders}"
        )


def test_python_apps_results_and_exceptions(executor: DiffuseParslExecutor, tmp_path: Path) -> None:
    assert add(1, 2).result(timeout=60) == 3
    assert [f.result(timeout=60) for f in [add(i, i) for i in range(5)]] == [0, 2, 4, 6, 8]
    with pytest.raises(ValueError, match="boom: 42"):
        raises("boom: 42").result(timeout=60)

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("alpha\n")
    b.write_text("beta\n")
    joined = tmp_path / "joined" / "ab.txt"
    read = concatenate(inputs=[File(str(a)), File(str(b))], outputs=[File(str(joined))]).result(timeout=60)
    assert joined.read_text() == "alpha\nbeta\n"
    assert read != str(a) and "/inputs/" in read  # the python app saw the staged copy too
    # a directory is no diffuse input: the app gets it in place
    d = tmp_path / "dir"
    d.mkdir()
    (d / "x").write_text("")
    (d / "y").write_text("")
    assert listing(inputs=[File(str(d))]).result(timeout=60) == ["x", "y"]


def test_relative_paths_and_stdout_appends(
    executor: DiffuseParslExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # relative File paths and stdout are the client's cwd's
    Path("in.txt").write_text("relative\n")
    concatenate(inputs=[File("in.txt")], outputs=[File("rel/out.txt")]).result(timeout=60)
    assert (tmp_path / "rel" / "out.txt").read_text() == "relative\n"
    say("one", stdout="logs/say.out").result(timeout=60)
    say("two", stdout="logs/say.out").result(timeout=60)  # Parsl's default mode: append
    assert (tmp_path / "logs" / "say.out").read_text() == "one\ntwo\n"
    say("three", stdout=("logs/say.out", "w")).result(timeout=60)
    assert (tmp_path / "logs" / "say.out").read_text() == "three\n"


@bash_app
def tool(arg: str, stdout: Any = None) -> str:
    # a program shipped beside the workflow, named by a relative path (as generated benchmarks do)
    return f"bin/tool --arg {arg}"


def test_a_bash_app_runs_a_program_by_a_relative_path(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Apps run in the client's working directory (``app_cwd="client"``), as under HTEX's
    local workers: ``bin/tool`` and a relative ``stdout`` are the workflow directory's."""
    workflow = tmp_path / "workflow"
    (workflow / "bin").mkdir(parents=True)
    script = workflow / "bin" / "tool"
    script.write_text("#!/bin/sh\necho \"tool $1 $2 in $(pwd)\"\n")
    script.chmod(0o755)
    monkeypatch.chdir(workflow)
    with loaded(cluster, tmp_path):
        assert tool("x", stdout="out/tool.out").result(timeout=60) == 0
    assert (workflow / "out" / "tool.out").read_text() == f"tool --arg x in {workflow}\n"
    # the task's scratch directory instead: bin/tool is not there
    with loaded(cluster, tmp_path, app_cwd="scratch"):
        with pytest.raises(BashExitFailure) as e:
            tool("y", stdout=str(workflow / "out" / "scratch.out")).result(timeout=60)
        assert e.value.exitcode == 127


def test_bash_app_failures_are_the_apps_own(executor: DiffuseParslExecutor, tmp_path: Path) -> None:
    with pytest.raises(BashExitFailure) as e:
        exits(7).result(timeout=60)
    assert e.value.exitcode == 7
    with pytest.raises(MissingOutputs):
        forgets_output(outputs=[File(str(tmp_path / "never.txt"))]).result(timeout=60)
    assert not (tmp_path / "never.txt").exists()


def test_an_unreadable_input_fails_the_task_with_diffuses_reason(
    executor: DiffuseParslExecutor, tmp_path: Path
) -> None:
    fut = count_bytes(inputs=[File(str(tmp_path / "absent.bin"))], outputs=[File(str(tmp_path / "n.txt"))])
    with pytest.raises(DiffuseTaskFailure) as e:
        fut.result(timeout=60)
    assert "absent.bin" in str(e.value) and "not found" in str(e.value)


def test_exceptions_come_back_as_remote_exception_wrapper(executor: DiffuseParslExecutor) -> None:
    def fails() -> None:
        raise KeyError("missing key")

    value = executor.submit(fails, {}).result(timeout=60)
    assert isinstance(value, RemoteExceptionWrapper)
    with pytest.raises(KeyError, match="missing key"):
        value.reraise()


def test_resource_specification(executor: DiffuseParslExecutor, caplog: pytest.LogCaptureFixture) -> None:
    fields, ignored = resources_to_fields(
        {"cores": 2, "memory": 100, "disk": 5, "gpus": 0, "running_time_min": 90, "priority": 3.4,
         "exec_mode": "regular"}
    )
    assert fields == {"cores": 2, "memory": "100MiB", "disk": "5MiB", "walltime_s": 90.0, "priority": 3}
    assert ignored == ["exec_mode"]
    assert resources_to_fields({"cpus": 1.5, "memory": 1, "disk": 1})[0] == {
        "cores": 2, "memory": "1MiB", "disk": "1MiB"}

    with caplog.at_level(logging.DEBUG, logger="diffuse_client.parsl"):
        seen = cores_seen(parsl_resource_specification={"cores": 2, "memory": 64, "colour": "blue"})
        assert seen.result(timeout=60) == "2"
    notes = [r for r in caplog.records if "colour" in r.getMessage()]
    assert notes and all(r.levelno < logging.ERROR for r in notes)


def test_parsl_memory_is_a_request_not_a_limit(executor: DiffuseParslExecutor) -> None:
    # Parsl's memory is megabytes and a request: {'memory': 1} is what Parsl's own test_resource
    # asks for. The Python process running the app uses far more than 1 MB; where workers make
    # memory cgroups (root here), a limit of 1 MiB would have the kernel kill it.
    app = allocates(30, parsl_resource_specification={"cores": 1, "memory": 1})
    assert app.result(timeout=120) == 30 * 2**20


def chain(tmp_path: Path) -> Tuple[str, str]:
    """Parsl's test_output_chain_filenames: one app's output File is the next one's input.
    Returns the path the first app wrote to and the name the second app saw for it."""
    first = tmp_path / "out" / "simple-out.txt"
    first.parent.mkdir()
    a = writes_its_name(outputs=[File(str(first))], stdout=str(tmp_path / "first.log"))
    b = echoes_input_name(inputs=[a.outputs[0]], outputs=[File(str(tmp_path / "out" / "seen.txt"))])
    assert b.result(timeout=120) == 0
    assert first.read_text() == "test\n"
    written = (tmp_path / "first.log").read_text().strip()
    return written, (tmp_path / "out" / "seen.txt").read_text().strip()


def test_apps_see_their_files_under_their_own_base_names(
    cluster: Cluster, tmp_path: Path
) -> None:
    # input_paths="cached": the app reads the worker's cached copy, which keeps the file's base
    # name, and writes its output under the output's base name before it is copied.
    with loaded(cluster, tmp_path, input_paths="cached"):
        written, seen = chain(tmp_path)
    assert os.path.basename(written) == "simple-out.txt", written
    assert os.path.basename(seen) == "simple-out.txt", seen
    assert seen != str(tmp_path / "out" / "simple-out.txt")
    assert "/inputs/" in seen and any(seen.startswith(str(c)) for c in cluster.cache_dirs), seen


def test_by_default_a_file_an_earlier_app_wrote_keeps_its_path_and_a_dataset_is_cached(
    executor: DiffuseParslExecutor, cluster: Cluster, tmp_path: Path
) -> None:
    # input_paths="auto": one app's output passed to the next is seen at the path it was written
    # to (Parsl's test_output_chain_filenames), ...
    written, seen = chain(tmp_path)
    assert seen == str(tmp_path / "out" / "simple-out.txt"), seen
    assert os.path.basename(written) == "simple-out.txt", written
    # ... while a file that existed before the workflow is read from the workers' caches.
    data = tmp_path / "dataset.txt"
    data.write_text("abc\n")
    fut = count_bytes(inputs=[File(str(data))], outputs=[File(str(tmp_path / "n.txt"))],
                      stdout=str(tmp_path / "count.log"))
    assert fut.result(timeout=120) == 0
    staged = (tmp_path / "count.log").read_text().strip()
    assert staged.endswith("/inputs/2/dataset.txt"), staged
    assert any(staged.startswith(str(c)) for c in cluster.cache_dirs), staged
    assert (tmp_path / "n.txt").read_text().strip() == "4"


def test_input_paths_original_shows_apps_the_users_paths(cluster: Cluster, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="input_paths='shared'.*'auto', 'cached', 'original'"):
        DiffuseParslExecutor(input_paths="shared")
    with loaded(cluster, tmp_path, input_paths="original"):
        written, seen = chain(tmp_path)
    # as Parsl's test_output_chain_filenames expects: the exact path the user gave, both ways
    assert written == str(tmp_path / "out" / "simple-out.txt")
    assert seen == written


# ---------------------------------------------------------------- warm processes

COUNT = 0


@python_app
def counts(parsl_resource_specification: Dict[str, Any] = {}) -> Tuple[int, int]:
    # state kept in this module's globals, in the process the app runs in
    global COUNT
    COUNT += 1
    return os.getpid(), COUNT


@python_app
def sized(text: str, n: int) -> str:
    return text[:10] + "y" * n


def test_reuse_runs_apps_in_the_same_processes_and_fork_does_not(
    cluster: Cluster, tmp_path: Path
) -> None:
    """isolation="reuse" (default): python apps run one after another in the workers' warm
    processes, so an app sees what an earlier one left (as under HTEX); "fork": each in a
    child of its own, so it never does."""
    runs: Dict[str, List[Tuple[int, int]]] = {}
    for isolation in ("reuse", "fork"):
        with loaded(cluster, tmp_path, isolation=isolation) as ex:
            assert ex.isolation == isolation
            runs[isolation] = [counts().result(timeout=120) for _ in range(8)]  # one at a time
    pids = {pid for pid, _ in runs["reuse"]}
    assert len(pids) < 8 and max(n for _, n in runs["reuse"]) > 1, runs["reuse"]
    for pid in pids:  # each process counts its own apps, one by one
        seen = [n for p, n in runs["reuse"] if p == pid]
        assert seen == sorted(seen) and len(set(seen)) == len(seen), runs["reuse"]
    assert [n for _, n in runs["fork"]] == [1] * 8, runs["fork"]
    assert len({pid for pid, _ in runs["fork"]}) == 8, runs["fork"]
    with pytest.raises(ValueError, match="isolation='spawn'"):
        DiffuseParslExecutor(isolation="spawn")


def test_large_arguments_and_results_go_through_blobs(executor: DiffuseParslExecutor, cluster: Cluster) -> None:
    # arguments over inline_args_max (200 KiB) go as a blob input, a result over 1 MiB comes
    # back through the dispatcher's blob store
    text = "x" * (300 * 1024)
    fut = sized(text, 2 * 2**20)
    assert fut.result(timeout=120) == "x" * 10 + "y" * (2 * 2**20)
    report = cluster.client().get(exec_task_id(fut)).outcome.report  # type: ignore[union-attr]
    assert report.get("value_blob") and "value" not in report, report


def test_apps_run_as_processes_with_warm_false(cluster: Cluster, tmp_path: Path) -> None:
    """warm=False: each app is a process, python -m diffuse_client.parsl_runner, with its
    function and arguments as files and its result written to a file."""
    data = tmp_path / "data.txt"
    data.write_text("abc\n")
    with loaded(cluster, tmp_path, warm=False) as ex:
        assert ex.warm is False
        assert add(1, 2).result(timeout=120) == 3
        with pytest.raises(ValueError, match="boom"):
            raises("boom").result(timeout=120)
        fut = count_bytes(inputs=[File(str(data))], outputs=[File(str(tmp_path / "n.txt"))],
                          stdout=str(tmp_path / "count.log"))
        assert fut.result(timeout=120) == 0
        report = cluster.client().get(exec_task_id(fut)).outcome.report  # type: ignore[union-attr]
        assert "value" not in report, report
    assert (tmp_path / "n.txt").read_text().strip() == "4"
    assert "/inputs/2/data.txt" in (tmp_path / "count.log").read_text()


# ---------------------------------------------------------------- results reused by content


@bash_app
def shout(log: str, inputs: List[File] = [], outputs: List[File] = []) -> str:
    # every execution appends a line to log (a plain string: a side effect, not a File)
    return f"echo ran >> {log}; tr a-z A-Z < {inputs[0]} > {outputs[0]}"


@bash_app(cache=True)
def shout_memo(log: str, word: str) -> str:
    # Parsl cannot memoize File arguments (id_for_memo has no rule for them): plain strings
    return f"echo ran >> {log}; echo {word} | tr a-z A-Z >> {log}"


@bash_app
def fails_first(flag: str, inputs: List[File] = [], outputs: List[File] = []) -> str:
    # fails while flag does not exist (and makes it): a failure must not be kept
    return (f"if [ ! -e {flag} ]; then touch {flag}; exit 5; fi; "
            f"cp {inputs[0]} {outputs[0]}")


def shout_files(tmp_path: Path) -> Tuple[File, File, Path]:
    """The input and output Files of ``shout`` and its log."""
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    return File(str(src)), File(str(tmp_path / "out" / "shout.txt")), tmp_path / "ran.log"


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "process"])
def test_a_bash_app_is_reused_by_a_second_parsl_run(
    reuse_cluster: Cluster, tmp_path: Path, warm: bool
) -> None:
    client = reuse_cluster.client()
    src, out, log = shout_files(tmp_path)
    reused_before = client.status().reused
    with loaded(reuse_cluster, tmp_path, warm=warm):
        first = shout(str(log), inputs=[src], outputs=[out])
        assert first.result(timeout=120) == 0
        first_id = exec_task_id(first)
    report = client.get(first_id).outcome.report  # type: ignore[union-attr]
    assert ("value" in report) == warm, report  # a call's value (0), or a process's exit
    assert Path(out.filepath).read_text() == "HELLO\n" and log.read_text() == "ran\n"
    os.unlink(out.filepath)  # the reuse writes it back from the kept copy

    # a new DataFlowKernel: a new run directory, run id, job
    with loaded(reuse_cluster, tmp_path, warm=warm):
        second = shout(str(log), inputs=[src], outputs=[out])
        assert second.result(timeout=120) == 0
        second_id = exec_task_id(second)
    assert second_id != first_id
    outcome = client.get(second_id).outcome
    assert outcome is not None and outcome.reused_from == first_id
    assert log.read_text() == "ran\n", "the app ran once"
    assert Path(out.filepath).read_text() == "HELLO\n"
    assert client.status().reused == reused_before + 1

    Path(src.filepath).write_text("hello, world\n")  # new content: a new identity
    with loaded(reuse_cluster, tmp_path, warm=warm):
        third = shout(str(log), inputs=[src], outputs=[out])
        assert third.result(timeout=120) == 0
    outcome = client.get(exec_task_id(third)).outcome
    assert outcome is not None and outcome.reused_from is None
    assert log.read_text() == "ran\nran\n" and Path(out.filepath).read_text() == "HELLO, WORLD\n"


def test_python_apps_and_apps_with_stdout_are_not_reused(reuse_cluster: Cluster, tmp_path: Path) -> None:
    client = reuse_cluster.client()
    data = tmp_path / "data.txt"
    data.write_text("abc\n")
    ids: List[str] = []
    for _ in range(2):
        with loaded(reuse_cluster, tmp_path):
            apps = [add(1, 2),
                    count_bytes(inputs=[File(str(data))], outputs=[File(str(tmp_path / "n.txt"))],
                                stdout=str(tmp_path / "count.log"))]
            assert [a.result(timeout=120) for a in apps] == [3, 0]
            ids += [exec_task_id(a) for a in apps]
    assert all(client.get(i).outcome.reused_from is None for i in ids)  # type: ignore[union-attr]
    assert (tmp_path / "count.log").read_text().count("/inputs/") == 2, "stdout appended twice"


def test_a_failed_bash_app_is_not_kept_so_parsl_retries_run_it(
    reuse_cluster: Cluster, tmp_path: Path
) -> None:
    src, out, _ = shout_files(tmp_path)
    flag = tmp_path / "failed-once"
    with loaded(reuse_cluster, tmp_path, config={"retries": 1}):
        fut = fails_first(str(flag), inputs=[src], outputs=[out])
        assert fut.result(timeout=120) == 0
        assert fut.task_record["try_id"] == 1, "the second try ran, after a failure not kept"
    assert flag.exists() and Path(out.filepath).read_text() == "hello\n"

    other = tmp_path / "fails-then-runs"
    with loaded(reuse_cluster, tmp_path):  # without Parsl's retries: the app's own failure
        with pytest.raises(BashExitFailure) as e:
            fails_first(str(other), inputs=[src], outputs=[out]).result(timeout=120)
        assert e.value.exitcode == 5
        # the same call again runs (the failure was not kept) and succeeds
        assert fails_first(str(other), inputs=[src], outputs=[out]).result(timeout=120) == 0


def test_parsl_memoization_and_checkpoints_still_answer_first(
    reuse_cluster: Cluster, tmp_path: Path
) -> None:
    from parsl.dataflow.memoization import BasicMemoizer
    from parsl.utils import get_all_checkpoints

    client = reuse_cluster.client()
    log = tmp_path / "ran.log"
    submitted = client.status().submitted
    with loaded(reuse_cluster, tmp_path, config={"memoizer": BasicMemoizer(checkpoint_mode="task_exit")}):
        assert shout_memo(str(log), "hello").result(timeout=120) == 0
        assert shout_memo(str(log), "hello").result(timeout=120) == 0  # cache=True: memoized
        assert shout_memo(str(log), "again").result(timeout=120) == 0
    assert client.status().submitted == submitted + 2, "the memoized call never reached diffuse"
    assert log.read_text() == "ran\nHELLO\nran\nAGAIN\n"

    checkpoints = get_all_checkpoints(str(tmp_path / "runinfo"))
    assert checkpoints
    with loaded(reuse_cluster, tmp_path, config={"memoizer": BasicMemoizer(checkpoint_files=checkpoints)}):
        assert shout_memo(str(log), "hello").result(timeout=120) == 0
        assert shout_memo(str(log), "again").result(timeout=120) == 0
    assert client.status().submitted == submitted + 2, "answered from Parsl's checkpoints"
    assert log.read_text() == "ran\nHELLO\nran\nAGAIN\n"


def test_a_bash_apps_code_is_told_apart_the_same_in_every_process() -> None:
    assert bash_app_function(shout.wrapped_remote_function) is shout.func
    assert bash_app_function(add.func) is None, "a python app"
    assert bash_app_function(shout.func) is None, "not wrapped as @bash_app submits it"
    digest = code_digest(shout.func)
    assert digest is not None and digest != code_digest(shout_memo.func)
    other = subprocess.run(
        [sys.executable, "-c",
         "import test_parsl; from diffuse_client.parsl import code_digest; "
         "print(code_digest(test_parsl.shout.func))"],
        cwd=Path(__file__).parent, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    )
    assert other.stdout.strip() == digest
