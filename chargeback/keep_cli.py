"""`slicemeter keep`: keep a month's money again from its rollups.

Ingest keeps the money of every GPU-hour it folds (docs/live-bill.md, Kept money). A month
needs keeping again where its rollups were written otherwise: a store or lake from before
money was kept, or a lake month two workers kept one GPU-hour of at once. Until then its
bills are right but recomputed from every slice-hour.
"""
from __future__ import annotations

import argparse

from slicemeter.chargeback.bill import parse_month
from slicemeter.chargeback.close_cli import check_ingest_store
from slicemeter.chargeback.kept import keep_hours, kept_current, unmeasured_slice_hours
from slicemeter.common import ConfigError, existing_db, is_lake, named
from slicemeter.store import connect


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True,
                   help="ingest's store: its DuckDB file (stop ingest first) or its lake (ducklake:...)")
    p.add_argument("--month", required=True, help="month to keep, YYYY-MM (UTC)")


def run(args: argparse.Namespace) -> int:
    with named("--month"):
        m_start, m_end = parse_month(args.month)
    db = existing_db(args.db)
    if not is_lake(db):
        check_ingest_store(db)   # the readers' file is rewritten from the store by every refresh
    con = connect(db)
    try:
        gpu_hours = con.execute(
            "SELECT count(*) FROM (SELECT hour, gpu_uuid FROM gpu_hour WHERE hour >= $1 AND hour < $2 "
            "UNION SELECT hour, gpu_uuid FROM slice_hour WHERE hour >= $1 AND hour < $2)",
            [m_start, m_end]).fetchone()[0]
        if not gpu_hours:
            raise ConfigError(f"--month: {args.month} has no GPU-hours in {args.db}: nothing to keep")
        keep_hours(con, m_start, m_end)
        current = kept_current(con, m_start, m_end)
        unmeasured = 0 if current else unmeasured_slice_hours(con, m_start, m_end)
    finally:
        con.close()
    if current:
        print(f"kept {args.month}: {gpu_hours} GPU-hours; its bills read the kept money")
        return 0
    if unmeasured:
        print(f"kept {args.month}: {gpu_hours} GPU-hours; its bills are still computed from the rollups: "
              f"{unmeasured} slice-hours have usage no reader measured, billed per share kind")
        return 0
    print(f"kept {args.month}, but the kept money no longer matches the rollups: ingest wrote the month "
          "meanwhile; its bills are computed from the rollups until a batch or another keep covers it")
    return 1
