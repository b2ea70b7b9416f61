"""Exceptions raised by the diffuse client.

:class:`TaskFailed`, the error of an executor's future whose task failed, is in
:mod:`diffuse_client.result`, next to the :class:`TaskResult` it carries.
"""

from __future__ import annotations


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
