"""`slicemeter export`: a month's invoice CSV, Parquet detail and FOCUS 1.2 files."""
from __future__ import annotations

import argparse
import sys

import duckdb

from slicemeter.chargeback.bill import BASES, IDLE_POLICIES, SHARES, InvariantError, compute_bill, parse_month
from slicemeter.chargeback.exports import ExportNotWritten, check_tenant, write_exports
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.store import connect
from slicemeter.common import arrow_on_system_allocator, check_choice, existing_db, named


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="DuckDB file (a snapshot is fine), or a DuckLake ducklake:postgres:CONNINFO")
    p.add_argument("--month", required=True, help="invoice month, YYYY-MM (UTC)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--basis", default="allocation", help=f"{' | '.join(BASES)} (default allocation)")
    p.add_argument("--idle", default="platform", help=f"{' | '.join(IDLE_POLICIES)} (default platform)")
    p.add_argument("--share", default="dominant", help=f"{' | '.join(SHARES)} (default dominant)")
    p.add_argument("--tenant", default=None, help="only this tenant's rows")
    p.add_argument("--prices", default=str(DEFAULT_PRICES), help="price catalog YAML (default examples/prices.yaml)")


# DuckDB's buffer pool defaults to 80 % of the machine's memory and holds the month's
# GPU-hour working tables: a bound keeps a large fleet's export beside ingest and the
# dashboards on one host (DuckDB spills to its temp directory past it). Once the bill is
# computed the working tables are done with, and the lower bound makes DuckDB hand their
# memory back before Python builds the files: otherwise both peak together.
MEMORY_LIMIT = "1100MB"
FILES_MEMORY_LIMIT = "256MB"


def _open(db: str):
    """Read-only (a snapshot, or a file ingest is writing); read-write only for a file that
    predates chargeback's migrations. The export itself writes only TEMP tables."""
    try:
        con = connect(db, read_only=True)
    except duckdb.CatalogException:
        con = connect(db)
    else:
        if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'closed_months'").fetchone()[0]:
            con.close()
            con = connect(db)
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    con.execute("SET enable_progress_bar = false")   # stdout lists the files written, nothing else
    return con


def run(args: argparse.Namespace) -> int:
    arrow_on_system_allocator()
    with named("--month"):
        parse_month(args.month)
    for flag, value, choices in (("--basis", args.basis, BASES), ("--idle", args.idle, IDLE_POLICIES),
                                 ("--share", args.share, SHARES)):
        with named(flag):
            check_choice(value, choices)
    with named("--tenant"):
        check_tenant(args.tenant)
    catalog = load_prices(args.prices)
    con = _open(existing_db(args.db))
    try:
        bill = compute_bill(con, args.month, args.basis, args.idle, args.share, catalog, args.tenant)
        if not bill.detail_records:
            # the FinOps validator refuses a FOCUS file without rows (its allowed-value
            # rules need a value to check), so an empty month is refused, not written
            who = f" for tenant {args.tenant}" if args.tenant else ""
            print(f"slicemeter export: {args.month}{who} has no charge to bill (no metered GPU-hours, no "
                  "corrections): no files written", file=sys.stderr)
            return 4
        con.execute(f"SET memory_limit = '{FILES_MEMORY_LIMIT}'")
        paths = write_exports(con, bill, args.out, args.tenant)
    except InvariantError as exc:
        print(f"slicemeter export: the bill does not add up, no files written: {exc}", file=sys.stderr)
        return 3
    except ExportNotWritten as exc:
        print(f"slicemeter export: {exc}", file=sys.stderr)
        return 1
    finally:
        con.close()
    state = "closed" if bill.closed else "open"
    credits = f", credits {bill.credits}" if bill.credits else ""
    print(f"{args.month} ({state}): total {bill.total} {bill.currency}, GPU cost {bill.gpu_cost}{credits}", file=sys.stderr)
    for p in paths:
        print(p)
    return 0
