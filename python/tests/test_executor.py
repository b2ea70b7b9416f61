"""DiffuseExecutor against a real dispatcher and workers."""

from __future__ import annotations

import concurrent.futures as cf
import time
from pathlib import Path
from typing import Any, Counter, Optional

import pytest

from diffuse_client import (
    Client,
    DiffuseAPIError,
    DiffuseExecutor,
    Task,
    TaskFailed,
    TaskFuture,
    TaskResult,
)
from helpers import CORES, WORKERS, started, unique, wait_until


def state(client: Client, task_id: str) -> Optional[str]:
    """A task's state, or None while the executor has not sent it yet."""
    try:
        return client.get(task_id).state
    except DiffuseAPIError as e:
        if e.status == 404:
            return None
        raise


def test_map_runs_1000_commands_and_returns_every_result_in_order(
    client: Client, requests_seen: Counter[str]
) -> None:
    t0 = time.monotonic()
    with DiffuseExecutor(client, poll=0.05) as ex:
        results = list(ex.map("echo", range(1000)))
    took = time.monotonic() - t0
    assert len(results) == 1000
    assert all(isinstance(r, TaskResult) and r.ok and r.exit_code == 0 for r in results)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(1000)]
    assert {r.node for r in results} == {f"w{i}" for i in range(WORKERS)}
    # One stdout fetch per task; everything else is batched: a handful of submissions, and
    # long polls (/v1/states with wait_s), at most one per `poll` seconds by each of the two
    # followers; no /v1/status polling (one /v1/status: the first batch's floor).
    assert requests_seen["GET logs"] == 1000
    assert requests_seen["GET /v1/tasks/{id}"] == 0
    assert requests_seen["GET /v1/status"] <= 1
    assert requests_seen["POST /v1/tasks"] <= 10
    polls = requests_seen["POST /v1/states"]
    assert polls <= 2 * took / 0.05 + 5, dict(requests_seen)
    others = sum(n for k, n in requests_seen.items() if k != "GET logs")
    assert others <= 12 + polls, dict(requests_seen)
    print(f"\n1000 tasks in {took:.1f} s; requests: {dict(requests_seen)}")


def test_a_result_comes_as_soon_as_its_task_ends_while_a_long_poll_waits(
    client: Client, requests_seen: Counter[str]
) -> None:
    with DiffuseExecutor(client, job=unique("latency")) as ex:
        slow = ex.submit("echo started; sleep 60")
        wait_until(lambda: started(client, slow.task_id), what="the slow task to start")
        time.sleep(3)  # a poll naming only the slow task now waits for seconds
        waits = requests_seen["POST /v1/states"]
        t0 = time.monotonic()
        fast = ex.submit("echo fast")
        assert fast.result(timeout=30).stdout == "fast\n"
        took = time.monotonic() - t0
        assert slow.cancel()
    # heard of by the other follower's poll at once, not when the first poll's wait ends
    assert took < 1.0, took
    assert requests_seen["POST /v1/states"] - waits <= 6, dict(requests_seen)
    assert requests_seen["GET /v1/status"] <= 1


def test_a_failed_task_raises_with_its_error_and_stderr(client: Client) -> None:
    with DiffuseExecutor(client) as ex:
        f = ex.submit("echo disk on fire >&2; exit 3")
        with pytest.raises(TaskFailed) as e:
            f.result(timeout=30)
    assert e.value.exit_code == 3
    assert e.value.stderr_tail == "disk on fire\n"
    assert e.value.task_id == f.task_id
    assert "exit code 3" in str(e.value) and "disk on fire" in str(e.value)
    assert e.value.result.state == "failed"


def test_a_task_the_dispatcher_fails_raises_its_reason(client: Client, tmp_path: Path) -> None:
    with DiffuseExecutor(client) as ex:
        f = ex.submit("cat {inputs[0]}", inputs=[tmp_path / "missing.txt"])
        with pytest.raises(TaskFailed) as e:
            f.result(timeout=30)
    assert e.value.error is not None and "not found" in e.value.error
    assert "missing.txt" in str(e.value)


def test_inputs_outputs_argv_and_callables(client: Client, tmp_path: Path) -> None:
    src = tmp_path / "words.txt"
    src.write_text("a b c\nd e\n")
    out = tmp_path / "out" / "lines.txt"
    with DiffuseExecutor(client) as ex:
        f1 = ex.submit(["wc", "-w", "{inputs[0]}"], inputs=[src])
        f2 = ex.submit("wc -l < {inputs[0]} > {outputs[0]}", inputs=[src], outputs=[out])
        f3 = ex.submit(["printf", "%s|"], "x y", "z")  # argv: arguments appended as they are
        f4 = ex.submit("printf '%s|'", "x y", "z")  # shell: arguments appended, quoted
        f5 = ex.submit(lambda n: Task(id=unique("made"), cmd=f"echo $((6*{n}))"), 7)
        f6 = ex.submit("echo $GREETING", env={"GREETING": "hi"}, cores=2)
        r1, r2, r3, r4, r5, r6 = (f.result(timeout=30) for f in (f1, f2, f3, f4, f5, f6))
        sizes = list(ex.map(lambda p: {"cmd": "wc -c < {inputs[0]}", "inputs": [p]}, [src, out]))
    assert r1.stdout is not None and r1.stdout.split()[0] == "5"
    assert r2.stdout == "" and out.read_text().strip() == "2"
    assert r3.stdout == "x y|z|" and r4.stdout == "x y|z|"
    assert r5.stdout == "42\n" and r5.task_id.startswith("made-")
    assert r6.stdout == "hi\n"
    assert [r.stdout for r in sizes] == ["10\n", "2\n"]
    assert r1.report["traffic"]["bytes_storage"] + r1.report["traffic"]["bytes_local"] + r1.report["traffic"][
        "bytes_peer"
    ] == src.stat().st_size


def test_unknown_fields_raise_at_submit_and_a_refused_task_fails_alone(client: Client) -> None:
    with DiffuseExecutor(client) as ex:
        with pytest.raises(TypeError, match="colour"):
            ex.submit("true", colour="blue")
        good = [ex.submit("echo ok") for _ in range(3)]
        bad = ex.submit("echo never", priority=99999)
        good += [ex.submit("echo ok") for _ in range(3)]
        with pytest.raises(DiffuseAPIError) as e:
            bad.result(timeout=30)
        assert e.value.status == 400 and "priority" in e.value.message
        assert [f.result(timeout=30).stdout for f in good] == ["ok\n"] * 6


def test_cancelling_a_future_cancels_its_task(client: Client) -> None:
    ex = DiffuseExecutor(client)
    f = ex.submit("echo started; sleep 60")
    wait_until(lambda: started(client, f.task_id), what="the task to start")
    assert f.cancel()
    done, _ = cf.wait([f], timeout=10)  # a cancelled future wakes concurrent.futures.wait
    assert f in done and f.cancelled()
    ex.shutdown(wait=True)
    assert client.wait([f.task_id], timeout=30)[f.task_id].state == "cancelled"


def test_a_task_cancelled_through_diffuse_cancels_its_future(client: Client) -> None:
    job = unique("exjob")
    with DiffuseExecutor(client, job=job) as ex:
        fs = [ex.submit("echo started; sleep 60") for _ in range(2)]
        wait_until(lambda: all(started(client, f.task_id) for f in fs), what="the tasks to start")
        client.cancel_job(job)
        for f in fs:
            with pytest.raises(cf.CancelledError):
                f.result(timeout=30)
    assert client.job(job).cancelled == 2


def test_shutdown_cancel_futures_cancels_queued_tasks_and_lets_running_ones_end(client: Client) -> None:
    slots = WORKERS * CORES
    # A job of its own: the default job's tasks were short, and a worker holds the next task
    # ready behind a task of a short job (--ready-below), which then shows as running.
    ex = DiffuseExecutor(client, job=unique("sleepers"))
    running = [ex.submit("echo started; sleep 5") for _ in range(slots)]
    wait_until(lambda: all(started(client, f.task_id) for f in running), what="every slot to be busy")
    queued = [ex.submit("echo started; sleep 5") for _ in range(slots)]
    wait_until(lambda: all(state(client, f.task_id) == "queued" for f in queued), what="the queue")
    ex.shutdown(wait=True, cancel_futures=True)
    assert all(f.done() for f in running + queued)
    assert [f.result().stdout for f in running] == ["started\n"] * slots
    assert all(f.cancelled() for f in queued)
    states = client.wait([f.task_id for f in queued], timeout=30)
    assert {i.state for i in states.values()} == {"cancelled"}
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit("true")


def test_futures_work_with_as_completed(client: Client) -> None:
    with DiffuseExecutor(client) as ex:
        fs = {ex.submit("sleep 0.$((RANDOM % 5)); echo", i): i for i in range(20)}
        got = {fs[f]: f.result().stdout for f in cf.as_completed(fs, timeout=60)}
    assert got == {i: f"{i}\n" for i in range(20)}
    assert all(isinstance(f, TaskFuture) for f in fs)
