"""`slicemeter close`: freeze a month; later data for it becomes Correction rows."""
from __future__ import annotations

import argparse

from slicemeter.chargeback.close import close_month
from slicemeter.chargeback.bill import parse_month
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.store import connect
from slicemeter.common import existing_db, named


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="the DuckDB file ingest writes (not a snapshot)")
    p.add_argument("--month", required=True, help="month to close, YYYY-MM (UTC)")
    p.add_argument("--prices", default=str(DEFAULT_PRICES),
                   help="price catalog the month is closed with (default examples/prices.yaml)")


def run(args: argparse.Namespace) -> int:
    with named("--month"):
        parse_month(args.month)
    catalog = load_prices(args.prices)
    con = connect(existing_db(args.db))
    try:
        carried = close_month(con, args.month, catalog)
    finally:
        con.close()
    print(f"closed {args.month}" + (f"; froze corrections for {', '.join(carried)}" if carried else ""))
    return 0
