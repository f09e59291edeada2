"""`slicemeter lake-maintain`: keep a DuckLake store small while its workers write, never
changing what it bills (docs/lake.md, Maintenance).

Workers only append (store/lake.py), so a lake grows by rows that readers merge away:
every batch's hour-rollup deltas, kept money, offsets, owner and inventory rows, each
batch a few Parquet files. A pass:

1. folds each GPU-hour's and slice-hour's deltas into one row (sql/lake/fold_deltas.sql)
   and drops kept money that a later keeping replaced (sql/lake/compact_kept.sql), a day
   per commit, then the superseded offset, owner and inventory rows
   (sql/lake/compact_small.sql);
2. DuckLake's own maintenance: inlined rows flushed to files, adjacent small files merged
   (each row keeps its `snapshot_id`, which the views read), snapshots older than
   `--keep-snapshots-s` expired and the files no snapshot needs any more deleted.

Step 1 deletes, so its commits conflict with workers' batches committed meanwhile
(docs/upstream.md, DuckLake): the pass does the day again (store.retry_conflicts), and a
worker whose batch lost goes back to its stored offsets (ingest/writer.py LakeCommitLost).
A day that keeps losing is left for the next pass and the command exits 1 naming it.
Readers holding a snapshot older than `--keep-snapshots-s` may find its files gone.
"""
from __future__ import annotations

import argparse
import logging
from datetime import datetime, timedelta

import duckdb

from slicemeter.common import ConfigError, is_lake
from slicemeter.store import connect, retry_conflicts, sql_text, transaction
from slicemeter.store.lake import ALIAS
from slicemeter.store.script import execute_script

log = logging.getLogger("slicemeter.lake_maintain")
DAY = timedelta(days=1)


def data_files(con: duckdb.DuckDBPyConnection) -> int:
    """The lake's live data files (those its latest snapshot reads)."""
    return con.execute(f"SELECT count(*) FROM __ducklake_metadata_{ALIAS}.ducklake_data_file "
                       "WHERE end_snapshot IS NULL").fetchone()[0]


def _days(con: duckdb.DuckDBPyConnection) -> list[datetime]:
    """The UTC days with hour deltas or kept money, oldest first."""
    rows = con.execute(f"""SELECT DISTINCT date_trunc('day', hour) AS day FROM (
        SELECT hour FROM {ALIAS}.main.gpu_hour_pending UNION ALL SELECT hour FROM {ALIAS}.main.slice_hour_pending
        UNION ALL SELECT hour FROM {ALIAS}.main.kept_gpu_hour) ORDER BY day""").fetchall()
    return [r[0] for r in rows]


def _in_commits(con: duckdb.DuckDBPyConnection, script: str, params: dict, attempts: int) -> bool:
    """`script` in one commit, again while workers' commits conflict; False if it kept losing."""
    def run() -> None:
        with transaction(con):
            execute_script(con, script, params)

    try:
        retry_conflicts(run, attempts=attempts)
        return True
    except duckdb.TransactionException as exc:
        log.warning("%s %s: gave up after %d conflicting commits (%s)", script, params, attempts, exc)
        return False


def maintain(con: duckdb.DuckDBPyConnection, keep_snapshots_s: int = 3600, attempts: int = 20) -> list[str]:
    """One pass (see the module doc); returns what was left undone (empty: all done)."""
    left = []
    for day in _days(con):
        params = {"start": day, "end": day + DAY}
        for script in ("lake/fold_deltas.sql", "lake/compact_kept.sql"):
            if not _in_commits(con, script, params, attempts):
                left.append(f"{script} for {day:%Y-%m-%d}")
    if not _in_commits(con, "lake/compact_small.sql", {}, attempts):
        left.append("lake/compact_small.sql")
    older_than = f"now() - INTERVAL '{int(keep_snapshots_s)} seconds'"
    for call in (f"ducklake_flush_inlined_data('{ALIAS}')",
                 f"ducklake_merge_adjacent_files('{ALIAS}')",
                 f"ducklake_expire_snapshots('{ALIAS}', older_than => {older_than})",
                 f"ducklake_cleanup_old_files('{ALIAS}', older_than => {older_than})"):
        try:   # counted, not fetched: their rows hold times with zones, which need pytz in Python
            retry_conflicts(lambda: con.execute(f"SELECT count(*) FROM {call}").fetchall(), attempts=attempts)
        except duckdb.TransactionException as exc:
            log.warning("%s: gave up after %d conflicting commits (%s)", call, attempts, exc)
            left.append(call)
    return left


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="the lake, ducklake:postgres:CONNINFO")
    p.add_argument("--keep-snapshots-s", type=int, default=3600,
                   help="snapshots younger than this stay readable (default 3600; a reader holding an older one "
                        "may find its files gone)")


def run(args: argparse.Namespace) -> int:
    if not is_lake(args.db):
        raise ConfigError(f"--db: lake-maintain works on a DuckLake (ducklake:postgres:...), not {args.db!r}: "
                          "ingest folds a DuckDB file's deltas itself")
    if args.keep_snapshots_s < 0:
        raise ConfigError("--keep-snapshots-s: must be 0 or more")
    con = connect(args.db)
    try:
        before = data_files(con)
        left = maintain(con, args.keep_snapshots_s)
        after = data_files(con)
    finally:
        con.close()
    log.info("lake maintained: %d data files before, %d after", before, after)
    for what in left:
        log.error("not done (workers' commits kept conflicting; the next pass tries again): %s", what)
    return 1 if left else 0
