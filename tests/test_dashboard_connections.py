"""The dashboard's queries share connections within a script run and a data version, and
hold none after it: a held connection pins the readers' data file that ingest next updates
in place."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import streamlit as st

from slicemeter.dashboard import data
from slicemeter.testkit.dashboard_app import run_app
from slicemeter.testkit.fleet_fixture import build_fleet_db


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory) -> Path:
    return build_fleet_db(tmp_path_factory.mktemp("conns") / "fleet.duckdb", "2026-11", days=2)


def writable_elsewhere(path: Path) -> bool:
    """Whether another process can open `path` read-write now, as ingest's refresh does."""
    probe = "import duckdb, sys; duckdb.connect(sys.argv[1]).close()"
    return subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, timeout=60).returncode == 0


def test_a_pages_cold_run_opens_one_connection_for_all_its_queries(fleet_db, monkeypatch):
    st.cache_data.clear()
    pool = data._QUERY_CONNECTIONS
    names = []
    real_query = data.query
    monkeypatch.setattr(data, "query", lambda name, **params: names.append(name) or real_query(name, **params))
    at = run_app(fleet_db, monkeypatch)   # the default page: a run of its own
    opened, names[:] = pool.opened, []
    at.switch_page("views/gpus.py").run()
    assert not at.exception, at.exception
    assert len(set(names)) >= 4, names
    assert pool.opened - opened == 1
    assert pool.idle_count() == 0                 # the run's end closed it
    assert writable_elsewhere(fleet_db)


def test_connections_are_reused_within_a_version_and_closed_when_it_changes_or_the_run_ends(fleet_db):
    pool = data._QueryConnections()
    path = str(fleet_db)
    with pool.connection(path, ("v", 1), None) as first:
        pass
    with pool.connection(path, ("v", 1), None) as again:
        assert again is first
    with pool.connection(path, ("v", 1), "acme") as scoped:   # another tenant: a connection of its own
        assert scoped is not first
        assert scoped.execute("SELECT tenant FROM temp.main.scope_tenant").fetchone() == ("acme",)
    assert pool.idle_count() == 2 and pool.opened == 2
    assert not writable_elsewhere(fleet_db)   # held: the refresh could not update the file in place

    with pool.connection(path, ("v", 2), None) as newer:   # new data: the old version's connections go
        assert newer is not first
    with pytest.raises(duckdb.ConnectionException):
        first.execute("SELECT 1")
    assert pool.idle_count() == 1

    pool.release()
    assert pool.idle_count() == 0
    assert writable_elsewhere(fleet_db)


def test_a_connection_newer_data_overtook_is_closed_on_return_and_a_failed_one_is_not_kept(fleet_db):
    pool = data._QueryConnections()
    path = str(fleet_db)
    with pool.connection(path, ("v", 1), None) as old:
        with pool.connection(path, ("v", 2), None):
            pass
    with pytest.raises(duckdb.ConnectionException):
        old.execute("SELECT 1")
    with pytest.raises(duckdb.CatalogException):
        with pool.connection(path, ("v", 2), None) as failing:
            failing.execute("SELECT * FROM no_such_table")
    with pytest.raises(duckdb.ConnectionException):
        failing.execute("SELECT 1")
    assert pool.idle_count() == 0


def test_a_read_that_reaches_a_file_ingest_is_writing_reads_the_file_the_link_names_now(fleet_db, tmp_path,
                                                                                      monkeypatch):
    """The race of a refresh: a query looked at the readers' link (data file A), the link was
    switched to B, and ingest began writing A before the query connected. DuckDB's lock
    refuses the query on A; it is read again from B, where the link points now."""
    import shutil

    stale, fresh = tmp_path / "reader.duckdb.a", tmp_path / "reader.duckdb.b"
    shutil.copyfile(fleet_db, stale)
    shutil.copyfile(fleet_db, fresh)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                               "print('locked', flush=True); sys.stdin.read()", str(stale)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        looks = iter([(str(stale), ("a",)), (str(fresh), ("b",))])
        seen = []
        monkeypatch.setattr(data, "store_key", lambda: seen.append(1) or next(looks))
        st.cache_data.clear()
        months = data.query("months")
        assert len(seen) == 2                       # refused on A, read on B
        assert months["month"].tolist() == ["2026-11"]
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def test_the_dashboard_is_started_on_the_readers_link_not_the_data_file_it_names(fleet_db, tmp_path, monkeypatch):
    """`slicemeter dashboard --db SNAPSHOT` hands the app the link itself (made absolute): ingest
    switches it between two data files and writes the one it does not name, so an app sent
    to one data file would read every other refresh and meet ingest's lock on the rest."""
    import argparse
    import os

    from slicemeter import store
    from slicemeter.dashboard import cli
    from slicemeter.store.reader_file import ReaderFile

    con = store.connect(fleet_db)
    try:
        reader = ReaderFile(con, tmp_path / "snapshot.duckdb")
        reader.refresh()
        reader.refresh()
    finally:
        con.close()
    assert os.readlink(tmp_path / "snapshot.duckdb") == "snapshot.duckdb.b"
    started = {}
    monkeypatch.setattr(cli.os, "execve", lambda path, argv, env: started.update(argv=argv, env=env))
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    cli.run(parser.parse_args(["--db", "snapshot.duckdb"]))
    link = str(tmp_path / "snapshot.duckdb")
    assert started["env"]["SLICEMETER_DB"] == link
    assert started["argv"][started["argv"].index("--db") + 1] == link
