from __future__ import annotations

import importlib.util
import os
import uuid
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
    """test-artifacts/, kept after the run for a person to look at (screenshots). Every xdist
    worker shares it, so each test writes names of its own there and never empties it."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


# tests/lake/ needs DuckDB's lake extensions, which exist for DuckDB 1.5.5 only, so it runs in
# an environment of its own (`make test` runs it in .venv-lake); an environment without them
# collects the rest
LAKE_EXTENSIONS = importlib.util.find_spec("duckdb_extension_ducklake") is not None
collect_ignore = [] if LAKE_EXTENSIONS else ["lake"]


def pytest_report_header(config):
    if not LAKE_EXTENSIONS:
        return "tests/lake: not collected here (no DuckLake extensions); make test runs them in .venv-lake"


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL cluster of the session's own (Debian's binaries, a temporary folder):
    the catalog of the tests' lakes."""
    from slicemeter.testkit.postgres import start_cluster

    cluster = start_cluster()
    yield cluster
    cluster.stop()


@pytest.fixture
def lake_db(postgres, tmp_path):
    """A new lake: its own catalog database in the session's cluster (postgres above), data
    under tmp_path; (its target, its data folder)."""
    from slicemeter import store

    name = f"lake_{uuid.uuid4().hex[:16]}"
    postgres.create_database(name)
    target, data = postgres.lake(name), tmp_path / "lake-data"
    store.connect(target, lake_data=data).close()    # creates its tables once
    return target, data


@pytest.fixture(params=["file", "lake"])
def any_store(request, tmp_path) -> str:
    """A new store of each backend, for tests of what every store must do alike: a DuckDB
    file, and a DuckLake (lake_db). The lake is skipped where DuckDB has no lake extensions:
    `make test` runs these tests in .venv-lake too."""
    if request.param == "file":
        return str(tmp_path / "store.duckdb")
    if not LAKE_EXTENSIONS:
        pytest.skip("no DuckLake extensions in this environment (make test runs the lake in .venv-lake)")
    return request.getfixturevalue("lake_db")[0]
