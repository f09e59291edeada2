"""`slicemeter report`: a month's sharing dividend as a terminal table, and as a Markdown
or HTML file to send round (docs/dividend.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.common import ConfigError, existing_db, month_window, named

FORMATS = {".md": "render_markdown", ".markdown": "render_markdown", ".html": "render_html", ".htm": "render_html"}


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="DuckDB file (a snapshot is fine), or a DuckLake ducklake:postgres:CONNINFO")
    p.add_argument("--month", required=True, help="month, YYYY-MM (UTC)")
    p.add_argument("--prices", type=Path, default=DEFAULT_PRICES,
                   help="price catalog YAML: GPU prices and the grid's carbon intensity (default examples/prices.yaml)")
    p.add_argument("--out", type=Path, action="append", default=[], metavar="FILE",
                   help="also write the report here: .md or .html (repeatable)")


def run(args: argparse.Namespace) -> int:
    from slicemeter.chargeback import report
    from slicemeter.chargeback.dividend import dividend
    from slicemeter.store import connect, sql_text

    with named("--month"):
        month_window(args.month)
    for out in args.out:
        if out.suffix.lower() not in FORMATS:
            raise ConfigError(f"--out: {out} must end in .md or .html")
    existing_db(args.db)
    catalog = load_prices(args.prices)
    con = connect(args.db, read_only=True)
    try:
        rep = dividend(con, args.month, catalog)
        start, end, _ = month_window(args.month)
        degraded = con.execute(sql_text("chargeback/tenant_degraded.sql"),
                               {"start": start, "end": end, "throttled_share": catalog.throttled_share}).fetchall()
    finally:
        con.close()
    sys.stdout.write(report.render_text(rep, degraded))
    for out in args.out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(getattr(report, FORMATS[out.suffix.lower()])(rep, degraded))
        print(f"wrote {out}", file=sys.stderr)
    return 0
