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
