"""Exceptions raised by the diffuse client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .executor import TaskResult


class DiffuseError(Exception):
    """Base class of every error this package raises."""


class DiffuseAPIError(DiffuseError):
    """The dispatcher answered a request with an error status.

    Attributes:
        status: the HTTP status code (400 bad request, 401 wrong token, 404 unknown task,
            job or object, 409 conflict such as a duplicate id or a task already ended,
            413 a batch over the size limit, ...).
        message: the dispatcher's own message (the ``error`` field of its JSON answer),
            e.g. ``line 1: field 'bogus': unknown field ...``.
        method: the request's method.
        path: the request's path and query.
    """

    def __init__(self, status: int, message: str, method: str = "", path: str = "") -> None:
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        where = f" ({method} {path})" if method else ""
        super().__init__(f"HTTP {status}{where}: {message}")


class DiffuseConnectionError(DiffuseError):
    """The dispatcher could not be reached (refused, reset, timed out)."""


class TaskFailed(DiffuseError):
    """A task ended failed (or was cancelled) rather than succeeded.

    Raised by the futures of :class:`diffuse_client.DiffuseExecutor`. ``result`` holds the
    whole outcome: state, exit code, the dispatcher's or worker's error, the end of the
    task's stderr (``result.stderr_tail``) and the worker's report.
    """

    def __init__(self, result: "TaskResult") -> None:
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


def describe_failure(result: "TaskResult") -> str:
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
