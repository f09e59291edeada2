"""`slicemeter close`: freeze a month; later data for it becomes Correction rows."""
from __future__ import annotations

import argparse

import duckdb

from slicemeter.chargeback.close import close_month
from slicemeter.chargeback.bill import parse_month
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.store import connect, sql_text
from slicemeter.common import ConfigError, existing_db, is_lake, named


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="the DuckDB file ingest writes (not the readers' --snapshot)")
    p.add_argument("--month", required=True, help="month to close, YYYY-MM (UTC)")
    p.add_argument("--prices", default=str(DEFAULT_PRICES),
                   help="price catalog the month is closed with (default examples/prices.yaml)")


def run(args: argparse.Namespace) -> int:
    with named("--month"):
        parse_month(args.month)
    catalog = load_prices(args.prices)
    db = existing_db(args.db)
    if not is_lake(db):
        check_ingest_store(db)
    con = connect(db)
    try:
        carried = close_month(con, args.month, catalog)
    finally:
        con.close()
    print(f"closed {args.month}" + (f"; froze corrections for {', '.join(carried)}" if carried else ""))
    return 0


def check_ingest_store(path) -> None:
    """ConfigError unless `path` is ingest's own store. Closing anything else (the readers'
    file above all) would be undone: the next refresh replaces that file from the store,
    where the month is still open, and late data would rewrite it without corrections."""
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise ConfigError(f"--db: cannot open {path} as a DuckDB store: {exc}") from None
    try:
        owned = con.execute(sql_text("chargeback/ingest_store.sql")).fetchone()[0]
    finally:
        con.close()
    if not owned:
        raise ConfigError(f"--db: {path} is not ingest's store (a copy such as the readers' file --snapshot, "
                          "or another DuckDB file): close the month on the file ingest writes (ingest --db)")
