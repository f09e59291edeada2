"""The store's shared helpers: one transaction, registered Arrow tables, DuckDB's own
statement splitter, connections opened at once in threads."""
from __future__ import annotations

import threading

import duckdb
import pyarrow as pa
import pytest

from slicemeter import store
from slicemeter.store import registered, transaction
from slicemeter.store.script import execute_text, statements


def test_transaction_commits_or_rolls_back():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a INT)")
    with transaction(con):
        con.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(ZeroDivisionError):
        with transaction(con):
            con.execute("INSERT INTO t VALUES (2)")
            1 / 0
    assert con.execute("SELECT a FROM t").fetchall() == [(1,)]


def test_registered_tables_go_when_the_block_ends_even_on_error():
    con = duckdb.connect()
    with pytest.raises(RuntimeError):
        with registered(con, arrow_in=pa.table({"a": [1, 2]})):
            assert con.execute("SELECT sum(a) FROM arrow_in").fetchall() == [(3,)]
            raise RuntimeError
    with pytest.raises(duckdb.CatalogException):
        con.execute("SELECT * FROM arrow_in")


def test_a_semicolon_in_a_string_or_comment_is_no_statement_boundary():
    text = "-- a comment; with a semicolon\nCREATE TABLE t (s VARCHAR);\nINSERT INTO t VALUES ('a;\nb'), ($x);\n"
    assert statements(text) == ["CREATE TABLE t (s VARCHAR)", "INSERT INTO t VALUES ('a;\nb'), ($x)"]
    con = duckdb.connect()
    execute_text(con, text, {"x": "c", "unused": 1})
    assert con.execute("SELECT s FROM t ORDER BY s").fetchall() == [("a;\nb",), ("c",)]


def test_connections_opened_at_once_in_threads_register_the_functions_once(tmp_path):
    """Threads of one process opening the same file at once (ingest's headline and live-bill
    threads both read the snapshot) share one DuckDB instance: each sets up its views."""
    for i in range(5):
        path = tmp_path / f"s{i}.duckdb"
        store.connect(path).close()
        barrier, errors = threading.Barrier(6), []

        def open_it():
            barrier.wait()
            try:
                store.connect(path, read_only=True).close()
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


def _macros(con, database: str) -> set[str]:
    return {name for (name,) in con.execute(
        "SELECT function_name FROM duckdb_functions() WHERE database_name = ? AND NOT internal "
        "AND function_type IN ('macro', 'table_macro')", [database]).fetchall()}


def test_a_store_file_keeps_the_views_macros_and_makes_them_again_when_their_text_changes(tmp_path, monkeypatch):
    """Connections after the first find the macros in the file (none of their own); a changed
    text is made again by the next read-write connection, the macros it does not define
    dropped, while a read-only one uses its own TEMP macros of the new text in their place."""
    path = tmp_path / "s.duckdb"
    store.connect(path).close()
    for read_only in (False, True):
        with store.connect(path, read_only=read_only) as con:
            assert "cb_calc_sums" in _macros(con, "s") and not _macros(con, "temp")
            assert con.execute("SELECT count(*) FROM gpu_hour_tenant").fetchone() == (0,)   # TEMP views as before

    statements, digest = store._view_statements()
    changed = tuple((m, q.replace("CREATE OR REPLACE TEMP MACRO cb_calc_sums(",
                                  "CREATE OR REPLACE TEMP MACRO cb_calc_sums_renamed(")) for m, q in statements)
    monkeypatch.setattr(store, "_view_statements", lambda: (changed, "0123456789abcdef"))
    with store.connect(path, read_only=True) as con:     # stale in the file: its own, found first
        assert "cb_calc_sums_renamed" in _macros(con, "temp") and "cb_calc_sums" in _macros(con, "s")
    with store.connect(path) as con:
        kept = _macros(con, "s")
        assert "cb_calc_sums_renamed" in kept and "cb_calc_sums" not in kept and not _macros(con, "temp")
        assert con.execute("SELECT view_name FROM duckdb_views() WHERE starts_with(view_name, 'slicemeter_views_')"
                           ).fetchall() == [("slicemeter_views_0123456789abcdef",)]
    monkeypatch.setattr(store, "_view_statements", lambda: (statements, digest))
    with store.connect(path) as con:
        kept = _macros(con, "s")
        assert "cb_calc_sums" in kept and "cb_calc_sums_renamed" not in kept
