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


@pytest.fixture
def lake_db(postgres, tmp_path, request):
    """A new lake: its own catalog database in the session's cluster, data under tmp_path."""
    from slicemeter import store

    name = "lake_" + "".join(ch for ch in request.node.name if ch.isalnum())[-40:].lower()
    postgres.create_database(name)
    target, data = postgres.lake(name), tmp_path / "lake-data"
    store.connect(target, lake_data=data).close()    # creates its tables once
    return target, data
