"""The Client against a real dispatcher and workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from diffuse_client import (
    Client,
    DiffuseAPIError,
    DiffuseConnectionError,
    DiffuseError,
    PartialSubmitError,
    Task,
    WaitTimeout,
)
from helpers import CORES, WORKERS, Cluster, started, unique, wait_until


def test_submit_get_wait_and_logs(client: Client) -> None:
    tid = unique("hello")
    sub = client.submit(Task(id=tid, cmd="echo hello; echo to-stderr >&2"))
    assert sub.submitted == 1 and sub.batch >= 1
    done = client.wait([tid], timeout=30)
    info = done[tid]
    assert info.state == "succeeded"
    assert info.outcome is not None and info.outcome.exit_code == 0
    assert info.outcome.node in ("w0", "w1")
    assert client.logs(tid) == "hello\n"
    assert client.logs(tid, "stderr") == "to-stderr\n"
    got = client.get(tid)
    assert got.batch == sub.batch and got.ended
    assert [a.node for a in got.attempts] == [info.outcome.node]
    assert got.outcome is not None and got.outcome.report["stdout"] is not None


def test_argv_command_with_input_and_output(client: Client, tmp_path: Path) -> None:
    src = tmp_path / "in put.txt"  # a space, percent-encoded in the URI
    src.write_text("one\ntwo\nthree\n")
    dst = tmp_path / "out" / "count.txt"
    tid = unique("argv")
    client.submit(
        {"id": tid, "cmd": ["sh", "-c", 'wc -l < "$0" > "$1"', "{inputs[0]}", "{outputs[0]}"],
         "inputs": [str(src)], "outputs": [str(dst)]}
    )
    assert client.wait([tid], timeout=30)[tid].state == "succeeded"
    assert dst.read_text().strip() == "3"


def test_failed_task_outcome_carries_exit_code_and_stderr(client: Client) -> None:
    tid = unique("fails")
    client.submit({"id": tid, "cmd": "echo something broke >&2; exit 3"})
    info = client.wait([tid], timeout=30)[tid]
    assert info.state == "failed"
    assert info.outcome is not None
    assert info.outcome.exit_code == 3
    assert info.outcome.stderr_tail == "something broke\n"


def test_submit_many_in_acknowledged_batches_and_wait_for_many(client: Client) -> None:
    prefix = unique("many")
    tasks = [Task(id=f"{prefix}-{i}", cmd=["echo", str(i)]) for i in range(95)]
    subs = client.submit_many(tasks, batch_size=40)
    assert [s.submitted for s in subs] == [40, 40, 15]
    assert len({s.batch for s in subs}) == 3
    done = client.wait([t.id for t in tasks], timeout=60)
    assert len(done) == 95 and all(i.state == "succeeded" for i in done.values())
    states, unknown = client.states([f"{prefix}-3", f"{prefix}-nope", f"{prefix}-90"])
    assert sorted(states) == [f"{prefix}-3", f"{prefix}-90"] and unknown == [f"{prefix}-nope"]
    assert states[f"{prefix}-3"].outcome is not None and states[f"{prefix}-3"].outcome.exit_code == 0
    with pytest.raises(DiffuseAPIError) as e:
        client.wait([f"{prefix}-1", f"{prefix}-nope"], timeout=10)
    assert e.value.status == 404 and f"{prefix}-nope" in e.value.message
    b = client.batch(subs[0].batch)
    assert (b.tasks, b.pending, b.succeeded, b.failed) == (40, 0, 40, 0)


def test_bad_task_is_refused_with_the_dispatchers_message(client: Client) -> None:
    tid = unique("bad")
    with pytest.raises(DiffuseAPIError) as e:
        client.submit({"id": tid, "cmd": "cat {inputs[2]}", "inputs": ["/etc/hostname"]})
    assert e.value.status == 400
    assert "line 1" in e.value.message and "inputs[2]" in e.value.message
    with pytest.raises(DiffuseAPIError) as e2:
        client.submit({"id": tid, "cmd": "true", "priority": 40000})
    assert e2.value.status == 400 and "priority" in e2.value.message
    with pytest.raises(DiffuseAPIError) as e3:
        client.get(tid)  # nothing of a refused batch was taken
    assert e3.value.status == 404 and tid in e3.value.message
    # an unknown field is caught before anything is sent
    with pytest.raises(TypeError, match="bogus"):
        client.submit({"id": tid, "cmd": "true", "bogus": 1})
    with pytest.raises(TypeError, match="bogus"):
        client.submit_many([{"id": f"{tid}-{i}", "cmd": "true"} for i in range(5)] + [{"id": tid, "cmd": "x", "bogus": 1}])
    with pytest.raises(DiffuseAPIError):
        client.get(f"{tid}-0")


def test_duplicate_id_is_409_and_partial_submission_says_what_went_in(client: Client) -> None:
    prefix = unique("dup")
    client.submit({"id": f"{prefix}-0", "cmd": "true"})
    with pytest.raises(DiffuseAPIError) as e:
        client.submit({"id": f"{prefix}-0", "cmd": "true"})
    assert e.value.status == 409 and "already exists" in e.value.message
    tasks = [{"id": f"{prefix}-{i}", "cmd": "true"} for i in (1, 2, 3)] + [{"id": f"{prefix}-0", "cmd": "true"}]
    with pytest.raises(PartialSubmitError) as p:
        client.submit_many(tasks, batch_size=2)
    assert [b.submitted for b in p.value.batches] == [2]
    assert p.value.first_unsent == 2
    assert isinstance(p.value.cause, DiffuseAPIError) and p.value.cause.status == 409
    client.wait([f"{prefix}-1", f"{prefix}-2"], timeout=30)
    with pytest.raises(DiffuseAPIError):
        client.get(f"{prefix}-3")


def test_wrong_token_and_unreachable_dispatcher(cluster: Cluster) -> None:
    with pytest.raises(DiffuseAPIError) as e:
        Client(cluster.url, "not-the-token").status()
    assert e.value.status == 401 and "token" in e.value.message
    with pytest.raises(DiffuseConnectionError, match="cannot reach"):
        Client("http://127.0.0.1:9", "x", timeout=5).status()
    env_token = os.environ.pop("DIFFUSE_CLIENT_TOKEN", None)
    try:
        with pytest.raises(DiffuseError, match="no client token"):
            Client(cluster.url)
    finally:
        if env_token is not None:
            os.environ["DIFFUSE_CLIENT_TOKEN"] = env_token
    assert Client(cluster.url, token_file=str(cluster.token_file)).status().workers == WORKERS


def test_cancel_a_running_task(client: Client) -> None:
    tid = unique("sleeper")
    client.submit({"id": tid, "cmd": "echo started; sleep 60"})
    wait_until(lambda: started(client, tid), what="the task to start")
    assert "cancel" in client.cancel(tid)
    info = client.wait([tid], timeout=30)[tid]
    assert info.state == "cancelled"
    with pytest.raises(DiffuseAPIError) as e:
        client.cancel(tid)
    assert e.value.status == 409
    with pytest.raises(DiffuseAPIError) as e2:
        client.cancel(unique("no-such-task"))
    assert e2.value.status == 404


def test_cancel_job_and_job_counters(client: Client) -> None:
    job = unique("job")
    ids = [f"{job}-{i}" for i in range(6)]
    client.submit_many([{"id": i, "cmd": "echo started; sleep 60", "job": job} for i in ids])

    def all_slots_started() -> bool:
        running = [t.id for t in client.iter_tasks("running") if t.id in ids]
        return len(running) == WORKERS * CORES and all(started(client, t) for t in running)

    wait_until(all_slots_started, what="the job to fill every slot")
    r = client.cancel_job(job)
    assert r.job == job
    assert (r.cancelled, r.stopping) == (len(ids) - WORKERS * CORES, WORKERS * CORES)
    done = client.wait(ids, timeout=30)
    assert {i.state for i in done.values()} == {"cancelled"}
    j = client.job(job)
    assert (j.tasks, j.cancelled, j.queued, j.running) == (6, 6, 0, 0)
    with pytest.raises(DiffuseAPIError) as e:
        client.cancel_job(unique("no-such-job"))
    assert e.value.status == 404


def test_wait_times_out_with_what_is_pending(client: Client) -> None:
    tid = unique("slow")
    client.submit({"id": tid, "cmd": "sleep 30"})
    with pytest.raises(WaitTimeout) as e:
        client.wait([tid], timeout=0.5, poll=0.1)
    assert e.value.pending == [tid] and isinstance(e.value, TimeoutError)
    client.cancel(tid)
    assert client.wait([tid], timeout=30)[tid].state == "cancelled"


def test_locate_names_the_worker_that_cached_an_input(client: Client, tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(4096))
    with pytest.raises(DiffuseAPIError) as e:
        client.locate(data)  # no task reads it yet
    assert e.value.status == 404 and "no task reads or writes" in e.value.message
    tid = unique("reader")
    client.submit({"id": tid, "cmd": "wc -c {inputs[0]}", "inputs": [str(data)]})
    info = client.wait([tid], timeout=30)[tid]
    assert info.state == "succeeded"
    loc = client.locate(data)
    assert loc.uri == data.as_uri()
    assert loc.state == "cached" and loc.nodes == [info.node]


def test_status_metrics_and_listing(client: Client) -> None:
    st = client.status()
    assert st.workers == WORKERS and st.slots == WORKERS * CORES
    assert st.submitted == st.unfinished + st.ended
    assert f"diffuse_nodes {WORKERS}" in client.metrics()
    tid = unique("listed")
    client.submit({"id": tid, "cmd": "true"})
    client.wait([tid], timeout=30)
    assert tid in {t.id for t in client.iter_tasks("succeeded", page_size=7)}
    with pytest.raises(DiffuseAPIError) as e:
        client.list_tasks(state="sleeping")
    assert e.value.status == 400 and "sleeping" in e.value.message
