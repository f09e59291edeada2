"""The reader file brought up to date by the hours that changed (store/reader_file.py): after
any mix of ingest, late data, month closes with corrections and retention it equals a copy of
the whole store, table by table; a reader in another process, or in ingest's own, keeps
reading a consistent file while refreshes run; where the change log cannot say, the refresh
copies everything."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np
import pytest

from slicemeter import store
from slicemeter.chargeback.close import close_month
from slicemeter.chargeback.kept import forget_kept
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.ingest.strings import StringIds
from slicemeter.ingest.writer import Batch, apply_retention, write_batch
from slicemeter.store.reader_file import ReaderFile, data_files, reading
from slicemeter.testkit.recommend_rows import A100, add_gpu_hours, add_tenant
from slicemeter.testkit.synth_ticks import SynthNode, node_tables

JAN = 1_798_761_600_000      # 2027-01-01 00:00 UTC
HOUR_MS = 3_600_000
INTERVAL = 60_000
NODES = [SynthNode("gpu-node-0", "https://acme:6443"),
         SynthNode("gpu-node-1", "https://beta:6443", model_index=1, slices_per_gpu=2)]


class Ingest:
    """Hours of both nodes through ingest's writer; each (hour, shift) once, so no instant repeats."""

    def __init__(self, con):
        self.con, self.ids, self.offset = con, StringIds(con), 0

    def hour(self, h: int, shift_ms: int = 0, fold: bool = True) -> None:
        self.offset += 1
        b = Batch(next_offsets={("t", 0): self.offset})
        for k, node in enumerate(NODES):
            ts = JAN + h * HOUR_MS + shift_ms + np.arange(0, HOUR_MS, INTERVAL)
            gpus, slices = node_tables(node, ts, INTERVAL, seed=self.offset * 10 + k)
            b.gpus.append(gpus)
            b.slices.append(slices)
            b.samples += gpus.num_rows + slices.num_rows
        write_batch(self.con, b, self.ids, fold=fold)


def _tables(con) -> list[str]:
    return [name for name, with_rows, *_ in store.reader_tables(con)]


def _day_tables(con) -> list[str]:
    return [name for name, *_, by_day in store.reader_tables(con) if by_day]


def _assert_same_days(con, t: str) -> None:
    """The day figures of both files agree row for row: every column but the DOUBLE sums
    exactly (lists as multisets), the sums to 1e-9 relative (a sum's last bits follow the
    order DuckDB adds in)."""
    cols = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'r' "
                       "AND table_name = ? ORDER BY column_index", [t]).fetchall()
    # a list of hourly values is a multiset (aggregated in no order)
    exact = " AND ".join(f"list_sort(a.{c}) IS NOT DISTINCT FROM list_sort(b.{c})" if kind.endswith("[]")
                         else f"a.{c} IS NOT DISTINCT FROM b.{c}" for c, kind in cols if kind != "DOUBLE")
    close = " AND ".join(f"(a.{c} IS NULL AND b.{c} IS NULL OR abs(a.{c} - b.{c}) <= 1e-9 * (1 + abs(b.{c})))"
                         for c, kind in cols if kind == "DOUBLE") or "TRUE"
    n_r, n_s, matched = con.execute(
        f"SELECT (SELECT count(*) FROM r.{t}), (SELECT count(*) FROM s.{t}), "
        f"(SELECT count(*) FROM r.{t} a JOIN s.{t} b ON {exact} WHERE {close})").fetchone()
    assert n_r == n_s == matched, (t, n_r, n_s, matched)
    # not vacuous: rows wherever the hours they are computed from have some
    hours = {"reader_gpu_day": "gpu_hour", "reader_cluster_hour": "gpu_hour", "reader_slice_day": "slice_hour",
             "reader_kept_slice_day": "kept_slice_hour", "reader_slice_sizing_day": "slice_hour"}.get(t)
    assert hours is None or matched > 0 or not con.execute(f"SELECT count(*) FROM r.{hours}").fetchone()[0], t


def _assert_same(refreshed: Path, scratch: Path, tables: list[str]) -> None:
    """Every table of both files holds the same rows (EXCEPT ALL both ways, and the counts);
    the day figures, which a refresh computes rather than copies, to the last bits of their sums."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH {store.quote_literal(str(refreshed))} AS r (READ_ONLY)")
        con.execute(f"ATTACH {store.quote_literal(str(scratch))} AS s (READ_ONLY)")
        con.execute("USE r")
        days = _day_tables(con)
        for t in days:
            _assert_same_days(con, t)
        for t in tables:
            if t in days:
                continue
            t = store.quote_ident(t)
            extra, missing, n_r, n_s = con.execute(
                f"SELECT (SELECT count(*) FROM (FROM r.{t} EXCEPT ALL FROM s.{t})), "
                f"(SELECT count(*) FROM (FROM s.{t} EXCEPT ALL FROM r.{t})), "
                f"(SELECT count(*) FROM r.{t}), (SELECT count(*) FROM s.{t})").fetchone()
            assert (extra, missing, n_r) == (0, 0, n_s), t
    finally:
        con.close()


def _scratch(live, tmp_path: Path, n: int) -> Path:
    """A copy of the whole store as a first refresh makes it."""
    folder = tmp_path / f"scratch-{n}"
    folder.mkdir(parents=True)
    return ReaderFile(live, folder / "reader.duckdb").refresh()


@pytest.fixture()
def live(tmp_path):
    con = store.connect(tmp_path / "live.duckdb")
    add_tenant(con, "acme", "https://acme:6443")
    add_tenant(con, "beta", "https://beta:6443")
    yield con
    con.close()


def _hours_in(month_start_h: int, month_end_h: int, rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(month_start_h, month_end_h) for _ in range(n)]


@pytest.mark.parametrize("seed", [1, 2])
def test_refreshed_by_changed_hours_equals_a_whole_copy(live, tmp_path, seed):
    """Random ingest, late hours (the open and closed months), closes with corrections,
    retention and catalog changes; after each, the file readers are sent to equals a copy of
    the whole store, and every refresh once both data files exist copies changed hours only."""
    rng = random.Random(seed)
    ingest = Ingest(live)
    reader = ReaderFile(live, tmp_path / "reader.duckdb")
    feb, mar, apr = 31 * 24, 59 * 24, 90 * 24
    used: set[tuple[int, int]] = set()
    now = feb - 5          # the last hours of January first
    ingest.hour(feb - 6)
    ingest.hour(now)
    closes = {4: "2027-01", 9: "2027-02"}
    ops = ["ingest", "late", "late_deferred", "retention", "tenant"]
    for step in range(13):
        if step in closes:
            now = max(now, {"2027-01": feb, "2027-02": mar}[closes[step]] + 1)
            ingest.hour(now)
            close_month(live, closes[step], load_prices(DEFAULT_PRICES), now=datetime(2027, 4, 1))
            op = "close " + closes[step]
        else:
            op = rng.choice(ops)
        if op == "ingest":
            for _ in range(rng.choice([1, 2])):
                now += 1
                ingest.hour(now)
        elif op.startswith("late"):
            # an earlier hour of this month or of a closed one (a correction once closed)
            for h in _hours_in(feb - 6, now, rng, rng.choice([1, 3])):
                shift = rng.randrange(1, 59) * 1000
                if (h, shift) not in used:
                    used.add((h, shift))
                    ingest.hour(h, shift, fold=op == "late")
            store.fold_pending_rollups(live)
        elif op == "retention":
            apply_retention(live, 1.0, now_ms=JAN + now * HOUR_MS)
        elif op == "tenant":
            add_tenant(live, f"t{step}", f"https://t{step}:6443")
        reader.refresh()
        if step >= 2:
            assert reader.incremental, (step, op)
        assert os.readlink(reader.dest) in {f.name for f in data_files(reader.dest)}
        _assert_same(reader.dest, _scratch(live, tmp_path / "scratch", step), _tables(live))
    assert now < apr
    assert live.execute("SELECT count(DISTINCT as_of) FROM frozen_gpu_hour").fetchone()[0] == 2
    # the log keeps only what a data file has not seen
    assert live.execute("SELECT count(*) FROM reader_changes").fetchone()[0] <= 2 * 24


_HOLDER = textwrap.dedent("""
    import sys, duckdb
    con = duckdb.connect(sys.argv[1], read_only=True)
    def state():
        return con.execute("SELECT (SELECT count(*) FROM gpu_hour), (SELECT sum(sample_count) FROM slice_hour), "
                           "(SELECT count(*) FROM tenants), (SELECT count(*) FROM kept_slice_hour)").fetchone()
    for line in sys.stdin:
        print(repr(state()), flush=True)
""")


def _state(path: Path) -> tuple:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT (SELECT count(*) FROM gpu_hour), (SELECT sum(sample_count) FROM slice_hour), "
                           "(SELECT count(*) FROM tenants), (SELECT count(*) FROM kept_slice_hour)").fetchone()
    finally:
        con.close()


def test_a_reader_in_another_process_keeps_its_file_while_refreshes_run(live, tmp_path):
    """DuckDB's lock keeps the refresh off the file another process reads: the refresh that
    falls on it copies everything into a new file under that name; the reader reads its
    state unchanged until it closes."""
    ingest = Ingest(live)
    for h in range(3):
        ingest.hour(h)
    reader = ReaderFile(live, tmp_path / "reader.duckdb")
    reader.refresh()
    ingest.hour(3)
    held = Path(os.path.realpath(reader.refresh()))
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(reader.dest)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        def ask():
            holder.stdin.write("\n")
            holder.stdin.flush()
            return eval(holder.stdout.readline())
        first = ask()
        assert first[0] > 0
        ingest.hour(4)
        reader.refresh()                 # the other data file: changed hours
        assert reader.incremental and os.path.realpath(reader.dest) != str(held)
        ingest.hour(5)
        add_tenant(live, "gamma", "https://gamma:6443")
        reader.refresh()                 # back to the held one: copied whole under its name
        assert not reader.incremental and os.path.realpath(reader.dest) == str(held)
        assert ask() == first            # the holder still reads the state it opened
        _assert_same(reader.dest, _scratch(live, tmp_path, 0), _tables(live))
        assert _state(reader.dest) != first
    finally:
        holder.stdin.close()
        assert holder.wait() == 0
    for h in (6, 7):
        ingest.hour(h)
        reader.refresh()
        assert reader.incremental
    _assert_same(reader.dest, _scratch(live, tmp_path, 1), _tables(live))


def test_a_reader_in_ingests_process_holds_off_the_refresh_of_its_file(live, tmp_path):
    """fcntl locks do not tell one process's connections apart: a reader that opens the file
    through reading() keeps this process's refresh of it waiting until it closes."""
    ingest = Ingest(live)
    ingest.hour(0)
    reader = ReaderFile(live, tmp_path / "reader.duckdb")
    reader.refresh()
    with reading(reader.dest) as target:
        con = duckdb.connect(str(target), read_only=True)
        before = con.execute("SELECT count(*), sum(sample_count) FROM gpu_hour").fetchone()
        ingest.hour(1)
        reader.refresh()                 # the other data file
        ingest.hour(2)
        assert reader.start()            # due to write `target`: it waits for this reader
        assert con.execute("SELECT count(*), sum(sample_count) FROM gpu_hour").fetchone() == before
        con.close()
    reader.wait()
    # had it not waited, DuckDB would have refused the ATTACH and the file been copied whole
    assert reader.incremental and os.path.realpath(reader.dest) == str(target)
    _assert_same(reader.dest, _scratch(live, tmp_path, 0), _tables(live))


def test_a_plain_file_from_before_is_replaced_by_the_link(live, tmp_path):
    ingest = Ingest(live)
    ingest.hour(0)
    dest = tmp_path / "reader.duckdb"
    old = duckdb.connect(str(dest))
    old.execute("CREATE TABLE gpu_hour AS SELECT 1 AS hour")
    old.close()
    holder = duckdb.connect(str(dest), read_only=True)   # a reader of the old file keeps it
    reader = ReaderFile(live, dest)
    reader.refresh()
    assert dest.is_symlink() and not reader.incremental
    assert holder.execute("SELECT * FROM gpu_hour").fetchall() == [(1,)]
    holder.close()
    _assert_same(dest, _scratch(live, tmp_path, 0), _tables(live))
    ingest.hour(1)
    reader.refresh()
    ingest.hour(2)
    reader.refresh()
    assert reader.incremental
    _assert_same(dest, _scratch(live, tmp_path, 1), _tables(live))


def _two_refreshes(live, ingest, reader, h):
    for k in (h, h + 1):
        ingest.hour(k)
        reader.refresh()
        assert reader.incremental


@pytest.mark.parametrize("doubt", ["a data file without its state", "log pruned past the file", "kept tables emptied",
                                   "a migration", "a writer that names no hours", "another store's file"])
def test_where_the_log_cannot_say_the_refresh_copies_everything(live, tmp_path, doubt):
    ingest = Ingest(live)
    reader = ReaderFile(live, tmp_path / "reader.duckdb")
    for h in (0, 1):
        ingest.hour(h)
        reader.refresh()
    _two_refreshes(live, ingest, reader, 2)
    ingest.hour(4)
    if doubt == "a data file without its state":   # as the refresh before the change log wrote it
        other = next(f for f in data_files(reader.dest) if f.name != os.readlink(reader.dest))
        with duckdb.connect(str(other)) as con:
            con.execute("DROP TABLE reader_file_state")
    elif doubt == "log pruned past the file":
        live.execute("UPDATE reader_state SET pruned = refresh")
    elif doubt == "kept tables emptied":
        forget_kept(live)
    elif doubt == "a migration":
        live.execute("DELETE FROM schema_migrations WHERE name = '070_tenant_budgets.sql'")
        assert store.migrate(live) == ["070_tenant_budgets.sql"]
    elif doubt == "a writer that names no hours":
        # rows written behind the log's back: the row counts tell, the file is rewritten whole
        add_gpu_hours(live, "https://acme:6443", "n9", "GPU-x", A100, range(3))
    elif doubt == "another store's file":
        live.execute("UPDATE reader_state SET store_id = 'another'")
    reader.refresh()
    assert not reader.incremental
    _assert_same(reader.dest, _scratch(live, tmp_path, 0), _tables(live))
    ingest.hour(5)
    reader.refresh()
    _assert_same(reader.dest, _scratch(live, tmp_path, 1), _tables(live))
