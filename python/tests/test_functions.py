"""FunctionExecutor against a real dispatcher and workers: Python functions run as function
tasks in warm processes on the workers (docs/warm.md).

The workers run calls with this interpreter (the executor's default ``python`` is
``sys.executable``: the test venv, which has diffuse_client and cloudpickle installed); they
inherit the test's environment, so nothing else is needed."""

from __future__ import annotations

import base64
import concurrent.futures as cf
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Counter, Dict, List, Optional, Tuple

import pytest

from diffuse_client import (
    Client,
    DiffuseExecutor,
    FunctionExecutor,
    Input,
    TaskFailed,
    call_value,
)
from diffuse_client.calls import RemoteTraceback, decode_result, dumps_args, dumps_function
from helpers import CORES, WORKERS, Cluster, started, unique, wait_until

THIS_MODULE = sys.modules[__name__]

#: A module-level constant the by-value function below reads.
GREETING = "hello"


def greet(name: str, punctuation: str = "!") -> str:
    """A function of this (test) module: the workers cannot import it, so it goes by value."""
    return f"{GREETING}, {_shout(name)}{punctuation}"


def _shout(s: str) -> str:
    return s.upper()


def fails(n: int) -> int:
    if n > 2:
        raise ValueError(f"n is {n}: too large")
    return n


def read_file(path: str) -> Tuple[str, str]:
    with open(path) as f:
        return path, f.read()


def bump() -> Tuple[int, int, str]:
    """Module state: a counter kept on the ``sys`` module of the process the call runs in."""
    n = getattr(sys, "_diffuse_test_calls", 0) + 1
    setattr(sys, "_diffuse_test_calls", n)
    return n, os.getpid(), os.environ.get("DIFFUSE_NODE", "")


def sleeper(s: float) -> str:
    print("started", flush=True)
    time.sleep(s)
    return "woke"


def make_lock() -> Any:
    return threading.Lock()


@pytest.fixture()
def ex(client: Client) -> Any:
    e = FunctionExecutor(client, by_value=[THIS_MODULE])
    yield e
    e.shutdown(wait=True, cancel_futures=True)


def test_results_map_kwargs_lambdas_and_functions_of_this_module_by_value(ex: FunctionExecutor) -> None:
    assert ex.submit(pow, 2, 10).result(timeout=60) == 1024
    assert list(ex.map(lambda x: x * x, range(10), timeout=60)) == [x * x for x in range(10)]
    assert ex.submit(greet, "ada", punctuation="?").result(timeout=60) == "hello, ADA?"
    offset = 7
    fs = [ex.submit(lambda a, b=0: a + b + offset, i, b=1) for i in range(5)]
    assert [f.result(timeout=60) for f in fs] == [i + 8 for i in range(5)]
    f = ex.submit(sorted, [3, 1, 2], reverse=True)
    assert f.result(timeout=60) == [3, 2, 1]
    assert f.info is not None and f.info.outcome is not None and f.info.outcome.node in ("w0", "w1")


def test_a_function_is_sent_once(client: Client, requests_seen: Counter[str]) -> None:
    with FunctionExecutor(client, by_value=[THIS_MODULE]) as ex:
        fs = [ex.submit(greet, str(i)) for i in range(20)]
        # five lambda objects of the same code and closure: one blob
        fs += [ex.submit(lambda x: x + 1, i) for i in range(5)]
        assert [f.result(timeout=60) for f in fs[:20]] == [f"hello, {i}!" for i in range(20)]
        assert [f.result(timeout=60) for f in fs[20:]] == [i + 1 for i in range(5)]
    blobs = {k: n for k, n in requests_seen.items() if "/v1/blobs/" in k}
    assert sum(n for k, n in blobs.items() if k.startswith("PUT")) <= 2, blobs
    assert sum(n for k, n in blobs.items() if k.startswith("HEAD")) <= 2, blobs
    # no per-task requests: batches and long polls
    assert requests_seen["GET /v1/tasks/{id}"] == 0 and requests_seen["GET /v1/status"] <= 1  # the first batch's floor


def test_an_exception_is_raised_with_the_remote_traceback(ex: FunctionExecutor) -> None:
    good, bad = ex.submit(fails, 1), ex.submit(fails, 5)
    assert good.result(timeout=60) == 1
    with pytest.raises(ValueError, match="n is 5: too large") as e:
        bad.result(timeout=60)
    cause = e.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    # by value (cloudpickle), the function's file is "<dynamic-code>": the line number stays
    line = fails.__code__.co_firstlineno + 2
    assert f"line {line}, in fails" in cause.tb and "ValueError: n is 5" in cause.tb
    assert "call_pickled" not in cause.tb  # the traceback starts at the user's function


def test_a_function_of_a_module_the_workers_cannot_import_fails_clearly(client: Client) -> None:
    with FunctionExecutor(client) as ex:  # no by_value: greet goes by reference
        f = ex.submit(greet, "x")
        with pytest.raises(TaskFailed) as e:
            f.result(timeout=60)
    assert "No module named 'test_functions'" in str(e.value)


def test_an_unserialisable_argument_raises_at_submit(ex: FunctionExecutor) -> None:
    with pytest.raises(TypeError, match=r"argument 1 of .*greet \(a _thread\.lock.*cannot be serialised"):
        ex.submit(greet, "x", threading.Lock())
    with pytest.raises(TypeError, match=r"keyword argument 'punctuation' of .*cannot be serialised"):
        ex.submit(greet, "x", punctuation=threading.Lock())
    with pytest.raises(TypeError, match="the function .* cannot be serialised"):
        ex.submit(threading.Lock().acquire)
    assert ex.outstanding() == 0  # nothing was queued
    assert ex.submit(greet, "still fine").result(timeout=60) == "hello, STILL FINE!"


def test_an_unserialisable_result_is_a_clear_error(ex: FunctionExecutor) -> None:
    with pytest.raises(RuntimeError, match=r"the function returned <unlocked _thread\.lock.*cannot be serialised"):
        ex.submit(make_lock).result(timeout=60)


def test_large_arguments_travel_as_a_blob_input(ex: FunctionExecutor) -> None:
    big = os.urandom(300 * 1024)  # over inline_args_max: an input (args_input)
    f = ex.submit(len, big)
    assert f.result(timeout=60) == len(big)
    assert f.info is not None and f.info.outcome is not None
    assert f.info.outcome.report["traffic"]["storage"] + f.info.outcome.report["traffic"]["local"] >= 2


def test_a_result_over_1_mib_comes_back_through_the_blob_store(ex: FunctionExecutor) -> None:
    g = ex.submit(bytes, 3 << 20)
    try:
        value = g.result(timeout=60)
    except TaskFailed as e:
        if "travel back inline" in str(e):
            pytest.skip("this diffuse binary returns results inline only (before value_blob)")
        raise
    assert value == bytes(3 << 20)
    assert g.info is not None and g.info.outcome is not None
    assert "value_blob" in g.info.outcome.report and "value" not in g.info.outcome.report


def test_a_file_argument_is_an_input_read_from_the_cache_where_the_call_runs(
    ex: FunctionExecutor, client: Client, tmp_path: Path
) -> None:
    data = tmp_path / "sample.txt"
    text = "line\n" * 200_000  # 1 MB
    data.write_text(text)
    size = data.stat().st_size
    before = client.status().traffic
    first = ex.submit(read_file, Input(data))
    path1, got1 = first.result(timeout=60)
    mid = client.status().traffic
    second = ex.submit(read_file, Input(data))
    path2, got2 = second.result(timeout=60)
    after = client.status().traffic
    assert got1 == got2 == text
    # the function got the staged copy's local path, on the worker, not the original path
    assert path1 != str(data) and path1.endswith("sample.txt") and "cache-w" in path1
    o1, o2 = first.info.outcome, second.info.outcome  # type: ignore[union-attr]
    assert o1 is not None and o2 is not None
    assert o2.node == o1.node, "the second call did not run where the file is cached"
    assert o1.report["traffic"]["bytes_storage"] >= size
    assert o2.report["traffic"]["bytes_local"] >= size
    assert o2.report["traffic"]["bytes_storage"] < size and o2.report["traffic"]["bytes_peer"] == 0
    assert mid.bytes_storage - before.bytes_storage >= size
    assert after.bytes_storage - mid.bytes_storage < size
    assert after.bytes_local - mid.bytes_local >= size
    # Input anywhere in the arguments; inputs= declares a file not passed to the function
    nested = ex.submit(lambda d: read_file(d["f"][0])[1][:5], {"f": [Input(data)]})
    assert nested.result(timeout=60) == "line\n"
    placed = ex.submit_call(len, ("abc",), inputs=[data])
    assert placed.result(timeout=60) == 3
    assert placed.info is not None and placed.info.outcome is not None
    assert placed.info.outcome.node == o1.node


def test_reuse_keeps_module_state_between_calls_and_fork_does_not(client: Client) -> None:
    runs: Dict[str, List[Tuple[int, int, str]]] = {}
    for mode in ("reuse", "fork"):
        with FunctionExecutor(client, isolation=mode, by_value=[THIS_MODULE]) as ex:
            # one at a time, so that a reuse-mode process is idle for the next call
            runs[mode] = [ex.submit(bump).result(timeout=60) for _ in range(8)]
    assert {n for n, _, _ in runs["fork"]} == {1}
    by_process: Dict[Tuple[str, int], List[int]] = {}
    for n, pid, node in runs["reuse"]:
        by_process.setdefault((node, pid), []).append(n)
    assert max(n for n, _, _ in runs["reuse"]) > 1, runs["reuse"]
    for counts in by_process.values():
        assert counts == list(range(1, len(counts) + 1)), runs["reuse"]


def test_a_call_over_its_time_limit_fails_timed_out(ex: FunctionExecutor) -> None:
    f = ex.submit_call(time.sleep, (30,), timeout_s=1)
    t0 = time.monotonic()
    with pytest.raises(TaskFailed, match="timed out"):
        f.result(timeout=60)
    assert time.monotonic() - t0 < 20


def test_cancelling_a_running_call_ends_it_cancelled(ex: FunctionExecutor, client: Client) -> None:
    f, g = ex.submit(sleeper, 60), ex.submit(sleeper, 60)
    wait_until(lambda: started(client, f.task_id) and started(client, g.task_id), what="the calls to start")
    client.cancel(f.task_id)  # through diffuse: the future is cancelled
    with pytest.raises(cf.CancelledError):
        f.result(timeout=30)
    assert g.cancel()  # the future of a running call: its task is cancelled
    t0 = time.monotonic()
    states = client.wait([f.task_id, g.task_id], timeout=30)
    assert {i.state for i in states.values()} == {"cancelled"}
    assert time.monotonic() - t0 < 10  # stopped, not run to its end


def test_shutdown_cancel_futures_cancels_queued_calls_and_lets_running_ones_end(client: Client) -> None:
    slots = WORKERS * CORES
    ex = FunctionExecutor(client, job=unique("fn-sleepers"), by_value=[THIS_MODULE])
    running = [ex.submit(sleeper, 4) for _ in range(slots)]
    wait_until(lambda: all(started(client, f.task_id) for f in running), what="every slot to be busy")
    queued = [ex.submit(sleeper, 4) for _ in range(slots)]
    wait_until(lambda: all(_state(client, f.task_id) == "queued" for f in queued), what="the queue")
    ex.shutdown(wait=True, cancel_futures=True)
    assert [f.result() for f in running] == ["woke"] * slots
    assert all(f.cancelled() for f in queued)
    states = client.wait([f.task_id for f in queued], timeout=30)
    assert {i.state for i in states.values()} == {"cancelled"}
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(pow, 1, 1)


def _state(client: Client, task_id: str) -> Optional[str]:
    """A task's state, or None while the executor has not sent it yet."""
    found, _ = client.states([task_id])
    return found[task_id].state if task_id in found else None


def test_reuse_true_lets_a_kept_result_stand_in(reuse_cluster: Cluster) -> None:
    client = reuse_cluster.client()
    with FunctionExecutor(client, reuse=True, by_value=[THIS_MODULE]) as ex:
        a = ex.submit(greet, "again")
        assert a.result(timeout=60) == "hello, AGAIN!"
        b = ex.submit(greet, "again")
        assert b.result(timeout=60) == "hello, AGAIN!"
        c = ex.submit(greet, "other")
        assert c.result(timeout=60) == "hello, OTHER!"
    assert b.info is not None and b.info.outcome is not None and c.info is not None
    assert b.info.outcome.reused_from == a.task_id
    assert c.info.outcome is not None and c.info.outcome.reused_from is None
    with FunctionExecutor(client, by_value=[THIS_MODULE]) as ex:  # default: reuse False
        d = ex.submit(greet, "again")
        assert d.result(timeout=60) == "hello, AGAIN!"
    assert d.info is not None and d.info.outcome is not None and d.info.outcome.reused_from is None


def test_diffuse_executor_submits_call_tasks(client: Client) -> None:
    """Other code (the Parsl executor) sends calls through DiffuseExecutor with its own
    serialization: a mapping with ``call`` instead of ``cmd``."""
    fn = client.put_blob(dumps_function(divmod))
    args = base64.b64encode(dumps_args((17, 5))).decode()
    call = {"fn": 0, "args": args, "entry": "diffuse_client.calls:call_pickled", "python": sys.executable}
    with DiffuseExecutor(client) as de:
        r1 = de.submit({"call": call, "inputs": [fn], "reuse": False}).result(timeout=60)
        r2 = de.submit(lambda n: {"call": {**call, "args": base64.b64encode(dumps_args((n, 4))).decode()},
                                  "inputs": [fn], "reuse": False}, 9).result(timeout=60)
        with pytest.raises(TypeError, match="both 'cmd' and 'call'"):
            de.submit({"cmd": "true", "call": call, "inputs": [fn]})
    assert r1.ok and r1.stdout == ""
    v1, v2 = call_value(client, r1.report), call_value(client, r2.report)
    assert v1 is not None and v2 is not None
    assert decode_result(v1) == (3, 2) and decode_result(v2) == (2, 1)

