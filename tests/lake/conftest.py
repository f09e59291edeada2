from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL cluster of the session's own (Debian's binaries, a temporary folder):
    the catalog of the DuckLake tests' lakes."""
    from slicemeter.testkit.postgres import start_cluster

    cluster = start_cluster()
    yield cluster
    cluster.stop()
