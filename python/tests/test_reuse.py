"""Results reused by content, from the Python client: program files hashed as the Rust client
hashes them, and identical tasks reused by a real dispatcher (``--reuse on``) and workers."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Dict, List

from diffuse_client import Client, DiffuseExecutor, ProgramHasher, Task, TaskInfo
from diffuse_client.programs import shell_words
from helpers import Cluster, unique


def sha(path: Path) -> str:
    """The hex SHA-256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def filled(hasher: ProgramHasher, task: Dict[str, Any]) -> Dict[str, str]:
    """The ``programs`` a task gets from ``hasher``."""
    d = Task.from_dict(task).to_dict()
    hasher.fill(d)
    programs: Dict[str, str] = d.get("programs", {})
    return programs


# ---------------------------------------------------------------- program files


def test_a_script_named_in_the_command_is_hashed_and_a_data_file_is_not(tmp_path: Path) -> None:
    # the cases of programs.rs's test, with the same expectations
    (tmp_path / "run.py").write_text("print(1)\n")
    (tmp_path / "x").write_text("data")
    abs_run = str(tmp_path / "run.py")
    h = ProgramHasher(tmp_path)
    a = filled(h, {"id": "a", "cmd": "python3 run.py {inputs[0]} >> x", "inputs": ["file:///x"]})
    assert a == {"run.py": sha(tmp_path / "run.py")}, "only run.py names a program (x is data)"
    b = filled(h, {"id": "b", "cmd": ["python3", abs_run], "inputs": ["file:///x"]})
    assert b == {abs_run: a["run.py"]}
    c = filled(h, {"id": "c", "cmd": ["python3", abs_run], "reuse": False})
    assert c == {}, "not reusable: not hashed"
    (tmp_path / "run.py").write_text("print(2)\n")
    again = filled(ProgramHasher(tmp_path), {"id": "a", "cmd": "python3 run.py >> x"})
    assert again["run.py"] != a["run.py"], "an edited script changes its digest"


def test_executables_values_and_shell_punctuation(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    (tmp_path / "notes.txt").write_text("not a program\n")
    (tmp_path / "dir.sh").mkdir()  # a directory is no program, whatever its name
    h = ProgramHasher(tmp_path)
    got = filled(h, {"id": "t", "cmd": "RUN=./tool \"./tool\"|cat notes.txt;(dir.sh) {inputs[0]}.sh"})
    assert got == {"./tool": sha(tool)}, got
    assert filled(h, {"id": "t", "cmd": ["RUN=./tool"]}) == {}, "an argv element is not split at ="
    assert shell_words("a=b 'c d' \"e\"&&f<g `h` i\x1cj") == ["b", "c", "d", "e", "f", "g", "h", "i\x1cj"]


def test_relative_words_are_looked_up_under_base_dir(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "step.sh").write_text("echo step\n")
    monkeypatch.chdir(tmp_path)
    assert filled(ProgramHasher(), {"id": "t", "cmd": "sh step.sh"}) == {"step.sh": sha(tmp_path / "step.sh")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert filled(ProgramHasher(elsewhere), {"id": "t", "cmd": "sh step.sh"}) == {}


# ---------------------------------------------------------------- reuse, end to end


def shout_task(tid: str, script: Path, src: Path, out: Path, log: Path, **more: Any) -> Task:
    """A task running ``script`` on ``src`` into ``out``; every run appends a line to ``log``
    (named in the command, a data file: not hashed, not part of the identity)."""
    return Task(id=tid, cmd=f"sh {script} {{inputs[0]}} {{outputs[0]}} >> {log}",
                inputs=[str(src)], outputs=[str(out)], **more)


def ended(client: Client, tid: str) -> TaskInfo:
    """The final view of a task, which must have succeeded."""
    info = client.wait([tid], timeout=60)[tid]
    assert info.state == "succeeded", info
    assert info.outcome is not None
    return info


def reused_from(info: TaskInfo) -> Any:
    """The task whose result stood in for ``info`` (``None``: it ran)."""
    assert info.outcome is not None
    return info.outcome.reused_from


def setup_files(tmp_path: Path) -> List[Path]:
    """A script (upper-cases its input, prints a line), its input, its output and the log."""
    script = tmp_path / "shout.sh"
    script.write_text('tr a-z A-Z < "$1" > "$2"; echo ran\n')
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    return [script, src, tmp_path / "out" / "shout.txt", tmp_path / "ran.log"]


def test_an_identical_task_is_reused_and_reuse_false_runs(reuse_cluster: Cluster, tmp_path: Path) -> None:
    client = reuse_cluster.client()
    script, src, out, log = setup_files(tmp_path)
    before = client.status().reused
    first = unique("first")
    client.submit(shout_task(first, script, src, out, log))
    assert reused_from(ended(client, first)) is None
    assert out.read_text() == "HELLO\n" and log.read_text() == "ran\n"
    assert client.results().results >= 1

    out.unlink()  # the reuse writes it back from the kept copy
    second = unique("second")
    client.submit(shout_task(second, script, src, out, log))
    info = ended(client, second)
    assert reused_from(info) == first
    assert log.read_text() == "ran\n", "the command did not run again"
    assert out.read_text() == "HELLO\n"
    assert client.status().reused == before + 1

    third = unique("third")
    client.submit(shout_task(third, script, src, out, log, reuse=False))
    assert reused_from(ended(client, third)) is None
    assert log.read_text() == "ran\nran\n", "reuse=False runs"


def test_an_edited_script_or_input_runs_again(reuse_cluster: Cluster, tmp_path: Path) -> None:
    client = reuse_cluster.client()
    script, src, out, log = setup_files(tmp_path)
    ids = [unique("edit") for _ in range(4)]
    client.submit(shout_task(ids[0], script, src, out, log))
    ended(client, ids[0])
    client.submit(shout_task(ids[1], script, src, out, log))
    assert reused_from(ended(client, ids[1])) == ids[0]

    script.write_text('tr a-z A-Z < "$1" > "$2"; echo ran; echo edited >&2\n')
    client.submit(shout_task(ids[2], script, src, out, log))
    assert reused_from(ended(client, ids[2])) is None, "the script's digest changed"

    src.write_text("world!\n")  # another size too: a same-size rewrite in one mtime tick is not seen
    client.submit(shout_task(ids[3], script, src, out, log))
    assert reused_from(ended(client, ids[3])) is None, "the input's content changed"
    assert out.read_text() == "WORLD!\n" and log.read_text() == "ran\n" * 3


def test_executor_results_say_reused_from_and_clear_results_forgets(
    reuse_cluster: Cluster, tmp_path: Path
) -> None:
    client = reuse_cluster.client()
    script, src, out, log = setup_files(tmp_path)
    with DiffuseExecutor(client, poll=0.1) as ex:
        t = shout_task("", script, src, out, log).to_dict()
        run = ex.submit(t["cmd"], inputs=t["inputs"], outputs=t["outputs"]).result(timeout=60)
        again = ex.submit(t["cmd"], inputs=t["inputs"], outputs=t["outputs"]).result(timeout=60)
        assert run.reused_from is None and again.reused_from == run.task_id
        assert again.ok and log.read_text() == "ran\n"

        kept = client.results()
        assert kept.reuse and kept.results >= 1 and kept.bytes > 0 and kept.digests >= 1
        cleared = client.clear_results()
        assert cleared.results == kept.results, "the counts from before"
        assert client.results().results == 0
        after = ex.submit(t["cmd"], inputs=t["inputs"], outputs=t["outputs"]).result(timeout=60)
        assert after.reused_from is None and log.read_text() == "ran\nran\n"
    assert os.path.exists(out)
