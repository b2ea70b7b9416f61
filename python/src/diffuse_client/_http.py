"""A small HTTP/1.1 transport over the standard library, with one kept-alive connection per thread.

The dispatcher closes a connection that stays idle for ``--header-timeout`` (10 s by default),
so a connection idle for longer than :data:`IDLE_REUSE_S` is not reused: a request is never
written to a socket the server may be closing. A GET that still fails on a reused connection is
tried once more on a fresh one; a POST or PUT is never sent twice by this layer.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from .errors import DiffuseAPIError, DiffuseConnectionError

#: Seconds a kept-alive connection may have been idle and still be reused.
IDLE_REUSE_S = 4.0

_Conn = Union[http.client.HTTPConnection, http.client.HTTPSConnection]


@dataclass
class Response:
    """A response read whole: status, headers (lower-case names) and body."""

    status: int
    headers: Dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body.decode("utf-8"))

    def text(self) -> str:
        """The body decoded as UTF-8 (invalid bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")


class Transport:
    """Sends requests to one base URL with a bearer token."""

    def __init__(self, url: str, token: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"dispatcher URL {url!r}: expected http://HOST:PORT or https://HOST:PORT")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self.timeout = timeout
        self._local = threading.local()

    def _new_connection(self) -> _Conn:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def _connection(self) -> Tuple[_Conn, bool]:
        """This thread's connection, and whether it was used before."""
        conn: Optional[_Conn] = getattr(self._local, "conn", None)
        last: float = getattr(self._local, "last", 0.0)
        if conn is not None and time.monotonic() - last < IDLE_REUSE_S:
            return conn, True
        if conn is not None:
            conn.close()
        conn = self._new_connection()
        self._local.conn = conn
        return conn, False

    def _drop(self) -> None:
        conn: Optional[_Conn] = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def close(self) -> None:
        """Closes the calling thread's connection (others close when their thread ends)."""
        self._drop()

    def request(
        self,
        method: str,
        path: str,
        query: Optional[Mapping[str, Union[str, int]]] = None,
        body: Optional[bytes] = None,
        content_type: str = "application/json",
        ok: Tuple[int, ...] = (200,),
        fresh: bool = False,
    ) -> Response:
        """Sends one request and reads the whole answer.

        ``fresh``: on a new connection, closed afterwards (for streamed responses). A status
        outside ``ok`` raises :class:`DiffuseAPIError` with the dispatcher's message; a network
        failure raises :class:`DiffuseConnectionError`.
        """
        target = self._prefix + path
        if query:
            target += "?" + urllib.parse.urlencode({k: str(v) for k, v in query.items()})
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        idempotent = method in ("GET", "HEAD")
        for attempt in (1, 2):
            if fresh:
                conn, reused = self._new_connection(), False
            else:
                conn, reused = self._connection()
            try:
                conn.request(method, target, body=body, headers=headers)
                raw = conn.getresponse()
                data = raw.read()
                resp_headers = {k.lower(): v for k, v in raw.getheaders()}
            except (OSError, http.client.HTTPException) as e:
                if fresh:
                    conn.close()
                else:
                    self._drop()
                if attempt == 1 and reused and idempotent:
                    continue
                if isinstance(e, socket.timeout):
                    why = f"no answer within {self.timeout:g} s"
                else:
                    why = str(e) or type(e).__name__
                raise DiffuseConnectionError(
                    f"{method} {self.url}{path}: cannot reach the dispatcher: {why}"
                ) from e
            if fresh:
                conn.close()
            else:
                self._local.last = time.monotonic()
                if resp_headers.get("connection", "").lower() == "close":
                    self._drop()
            resp = Response(raw.status, resp_headers, data)
            if resp.status not in ok:
                raise DiffuseAPIError(resp.status, _error_message(resp), method, target)
            return resp
        raise AssertionError("unreachable")  # pragma: no cover


def _error_message(resp: Response) -> str:
    """The ``error`` field of a JSON error body, else the body's text, else the reason."""
    text = resp.text().strip()
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("error"), str):
        return str(obj["error"])
    return text or http.client.responses.get(resp.status, "error")
