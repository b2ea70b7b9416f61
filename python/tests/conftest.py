"""Fixtures: one real dispatcher and two real workers for the session (see helpers.py)."""

from __future__ import annotations

import collections
from typing import Any, Counter, Iterator

import pytest

from diffuse_client import Client, _http
from helpers import Cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One dispatcher and two workers (2 cores each) for the whole session."""
    c = Cluster(tmp_path_factory.mktemp("diffuse"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def reuse_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A second dispatcher and two workers, started with ``--reuse on`` whatever
    ``$DIFFUSE_REUSE`` says, for the tests of results reused by content."""
    c = Cluster(tmp_path_factory.mktemp("diffuse-reuse"), reuse="on")
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture()
def client(cluster: Cluster) -> Client:
    """A client of the session's dispatcher."""
    return cluster.client()


@pytest.fixture()
def requests_seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts the HTTP requests the client sends, by method and route (a spy, not a mock)."""
    seen: Counter[str] = collections.Counter()
    real = _http.Transport.request

    def spy(self: _http.Transport, method: str, path: str, *a: Any, **k: Any) -> _http.Response:
        if path.endswith("/logs"):
            route = "logs"
        elif path.startswith("/v1/tasks/"):
            route = "/v1/tasks/{id}" + ("/cancel" if path.endswith("/cancel") else "")
        else:
            route = path
        seen[f"{method} {route}"] += 1
        return real(self, method, path, *a, **k)

    monkeypatch.setattr(_http.Transport, "request", spy)
    yield seen
