"""A task's outcome as :class:`diffuse_client.DiffuseExecutor` hands it back
(:class:`TaskResult`), and the error its future raises when the task failed (:class:`TaskFailed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from .client import TaskInfo, reused_from
from .errors import DiffuseError


@dataclass
class TaskResult:
    """What a task ended with.

    ``stdout`` is its captured standard output, fetched through the dispatcher
    (``GET /v1/tasks/{id}/logs``) when it succeeded and printed something: ``''`` when it printed
    nothing, ``None`` when it was not fetched (``fetch_stdout=False``, a failed task) or could not
    be (``stdout_error`` says why: e.g. its worker is gone). ``report`` is the worker's report
    (timings, ``traffic`` by source, ``stderr_tail``...; see :class:`diffuse_client.Outcome`).
    ``reused_from`` is the id of the task whose kept result stood in for this one (it did not
    run), ``None`` when it ran.
    """

    task_id: str
    state: str
    exit_code: Optional[int]
    stdout: Optional[str]
    report: Dict[str, Any]
    node: Optional[str] = None
    error: Optional[str] = None
    attempt: int = 0
    stdout_error: Optional[str] = None
    info: Optional[TaskInfo] = field(default=None, repr=False)

    @classmethod
    def from_info(cls, info: TaskInfo, stdout: Optional[str] = None) -> "TaskResult":
        """The result of an ended task's view."""
        oc = info.outcome
        return cls(
            task_id=info.id,
            state=info.state,
            exit_code=oc.exit_code if oc else None,
            stdout=stdout,
            report=dict(oc.report) if oc else {},
            node=(oc.node if oc else None) or info.node,
            error=oc.error if oc else None,
            attempt=oc.attempt if oc else info.attempt,
            info=info,
        )

    @property
    def reused_from(self) -> Optional[str]:
        """The task whose kept result stood in for this one; ``None`` when this one ran."""
        return reused_from(self.report)

    @property
    def ok(self) -> bool:
        """Whether the task succeeded."""
        return self.state == "succeeded"

    @property
    def stderr_tail(self) -> str:
        """The last 4 KiB of stderr from the worker's report of a failed attempt ('' if none)."""
        t = self.report.get("stderr_tail")
        return t if isinstance(t, str) else ""


class TaskFailed(DiffuseError):
    """A task ended failed (or was cancelled) rather than succeeded.

    Raised by the futures of :class:`diffuse_client.DiffuseExecutor`. ``result`` holds the
    whole outcome: state, exit code, the dispatcher's or worker's error, the end of the
    task's stderr (``result.stderr_tail``) and the worker's report.
    """

    def __init__(self, result: TaskResult) -> None:
        self.result = result
        super().__init__(describe_failure(result))

    @property
    def task_id(self) -> str:
        """The failed task's id."""
        return self.result.task_id

    @property
    def exit_code(self) -> Optional[int]:
        """Its exit code, if its process ran and exited."""
        return self.result.exit_code

    @property
    def error(self) -> Optional[str]:
        """The reason given by the dispatcher or the worker (time-out, input not found...)."""
        return self.result.error

    @property
    def stderr_tail(self) -> str:
        """The last 4 KiB of its stderr, as the worker reported it ('' if none)."""
        return self.result.stderr_tail


def describe_failure(result: TaskResult) -> str:
    """One readable paragraph: which task, why, on which worker, and its stderr's end."""
    if result.error:
        why = result.error
    elif result.exit_code is not None:
        why = f"exit code {result.exit_code}"
    else:
        why = result.state
    where = f" (on worker {result.node})" if result.node else ""
    text = f"task {result.task_id!r} {result.state}: {why}{where}"
    tail = result.stderr_tail.rstrip("\n")
    if tail:
        text += "\n" + "\n".join("  | " + line for line in tail.splitlines()[-20:])
    return text
