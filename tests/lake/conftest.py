from __future__ import annotations

import pytest


@pytest.fixture
def lake_db(postgres, tmp_path, request):
    """A new lake: its own catalog database in the session's cluster (tests/conftest.py
    postgres), data under tmp_path."""
    from slicemeter import store

    name = "lake_" + "".join(ch for ch in request.node.name if ch.isalnum())[-40:].lower()
    postgres.create_database(name)
    target, data = postgres.lake(name), tmp_path / "lake-data"
    store.connect(target, lake_data=data).close()    # creates its tables once
    return target, data
