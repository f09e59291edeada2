from __future__ import annotations

import os
from pathlib import Path

import pytest

from slicemeter.broker import TansuBroker

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture
def broker(tmp_path):
    """A fresh Tansu broker per test (memory storage: nothing leaks between tests)."""
    with TansuBroker(log_path=tmp_path / "tansu.log") as b:
        yield b


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL cluster of the session's own (Debian's binaries, a temporary folder):
    the catalog of the DuckLake tests' lakes."""
    from slicemeter.testkit.postgres import start_cluster

    cluster = start_cluster()
    yield cluster
    cluster.stop()
