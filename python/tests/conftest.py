"""Fixtures: one real dispatcher and two real workers for the session (see helpers.py)."""

from __future__ import annotations

from typing import Iterator

import pytest

from diffuse_client import Client
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
