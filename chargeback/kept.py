"""Money kept per hour (docs/live-bill.md, Kept money).

Ingest keeps the bill's integer inputs of every GPU-hour a fold changes, in the fold's
transaction (sql/ingest/keep_money.sql); `compute_bill` reads them for the month it
invoices when they are current (`kept_current`) and recomputes from the rollups otherwise.
`keep_hours` keeps a range of hours again (`slicemeter keep`, chargeback/keep_cli.py, a month):
for rollups written by other means than a fold (a generated month, a store from before the
kept tables).
"""
from __future__ import annotations

from datetime import date, datetime, time, timedelta

from slicemeter.store import sql_text, transaction
from slicemeter.store.lake import is_lake_connection
from slicemeter.store.script import execute_script

# Hours kept per statement by keep_hours: a day of a large fleet's slice-hours at a time,
# so the join of slice-hours with their GPU-hours stays within memory.
_CHUNK = timedelta(days=1)


def unmeasured_slice_hours(con, m_start: date, m_end: date) -> int:
    """The slice-hours of [m_start, m_end) with usage no reader measured: a month with any
    is billed from the rollups (kept_current)."""
    return con.execute("SELECT count(*) FROM slice_hour WHERE hour >= ? AND hour < ? AND usage_unknown_s > 0",
                       [m_start, m_end]).fetchone()[0]


def unverified_slice_hours(con, m_start: date, m_end: date) -> int:
    """The slice-hours of [m_start, m_end) with usage NVML could not check: on the usage basis
    under `unverified_usage: allocation` a month with any is billed from the rollups
    (chargeback/bill.py month_lines)."""
    return con.execute("SELECT count(*) FROM slice_hour WHERE hour >= ? AND hour < ? AND usage_unverified_s > 0",
                       [m_start, m_end]).fetchone()[0]


def kept_current(con, m_start: date, m_end: date) -> bool:
    """Whether the kept hours of [m_start, m_end) match the rollups (kept_sources): their row
    counts, sample counts and latest samples agree (rollups only grow when samples are folded).
    A month with usage no reader measured is billed from the rollups: its usage stand-in
    depends on the share kind (docs/dra.md, "In the bill"), and the kept hours keep one usage."""
    if unmeasured_slice_hours(con, m_start, m_end):
        return False
    gpu_live, gpu_kept, slice_live, slice_kept = con.execute(
        "SELECT * FROM kept_sources(?, ?)", [m_start, m_end]).fetchone()
    if gpu_live[0] == 0 and slice_live[0] == 0:
        return False
    return tuple(gpu_live) == tuple(gpu_kept) and tuple(slice_live) == tuple(slice_kept)


def keep_hours(con, start: date | datetime, end: date | datetime) -> None:
    """Keep the money of every GPU-hour in [start, end) again, a day per transaction (on a
    lake appended, as its workers keep: sql/lake/keep_money.sql)."""
    t = datetime.combine(start, time()) if not isinstance(start, datetime) else start
    stop = datetime.combine(end, time()) if not isinstance(end, datetime) else end
    on_lake = is_lake_connection(con)
    while t < stop:
        upto = min(t + _CHUNK, stop)
        with transaction(con):
            if on_lake:
                execute_script(con, "lake/touched_in_range.sql", {"start": t, "end": upto})
                con.execute(sql_text("lake/keep_money.sql"))
            else:
                con.execute("INSERT INTO kept_touched_t "
                            "SELECT hour, gpu_uuid FROM gpu_hour WHERE hour >= $1 AND hour < $2 "
                            "UNION SELECT hour, gpu_uuid FROM slice_hour WHERE hour >= $1 AND hour < $2 "
                            "UNION SELECT hour, gpu_uuid FROM kept_gpu_hour WHERE hour >= $1 AND hour < $2",
                            [t, upto])
                con.execute(sql_text("ingest/keep_money.sql"))
        t = upto


def forget_kept(con) -> None:
    """Empty the kept tables: every bill is then computed from the rollups (benchmarks and
    tests compare both paths on the same data; on a lake this deletes beside its workers'
    appends, which conflicts with any of them committing meanwhile)."""
    if is_lake_connection(con):
        con.execute("DELETE FROM lake.main.kept_gpu_hour")
        con.execute("DELETE FROM lake.main.kept_slice_hour")
        return
    con.execute("DELETE FROM kept_gpu_hour")
    con.execute("DELETE FROM kept_slice_hour")
    con.execute("INSERT INTO reader_changes (hour) VALUES (NULL)")   # every hour: the readers' file copies all
