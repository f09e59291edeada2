"""Closing a month: freeze what it was billed from, so its files never change.

close_month(con, "2026-10", catalog):
- records the month and its price catalog in closed_months;
- copies the month's rollups (with today's tenant attribution) into the frozen tables,
  as_of = the month itself;
- for every earlier closed month whose live rollups changed since its last frozen copy
  (late data), freezes the live state again with as_of = this month: this month's invoice
  carried those differences as Correction rows, and now they are final too.
Months close in order: a month cannot close while an earlier month with data is open.
"""
from __future__ import annotations

from datetime import datetime, timezone

from slicemeter.chargeback.bill import check_priced, closed_months, month_str, parse_month
from slicemeter.chargeback.prices import PriceCatalog, parse_prices_text
from slicemeter.store import transaction
from slicemeter.store.script import execute_script
from slicemeter.common import ConfigError, named


def _fingerprint(con, m_start, m_end, src_asof):
    return con.execute("SELECT * FROM cb_fingerprint(?, ?, ?)", [m_start, m_end, src_asof]).fetchone()


def _latest_asof(con, data_month):
    return con.execute("SELECT max(as_of) FROM frozen_gpu_hour WHERE data_month = ?", [data_month]).fetchone()[0]


def close_month(con, month: str, catalog: PriceCatalog, now: datetime | None = None) -> list[str]:
    """Close `month`; returns the closed months whose late data this close froze as well."""
    with named("month"):
        m_start, m_end = parse_month(month)
    closed = closed_months(con)
    if m_start in closed:
        raise ConfigError(f"month {month} is already closed")
    open_before = con.execute(
        "SELECT DISTINCT date_trunc('month', hour)::DATE AS m FROM gpu_hour WHERE hour < ? ORDER BY m",
        [m_start]).fetchall()
    still_open = [m for (m,) in open_before if m not in closed]
    if still_open:
        raise ConfigError(f"month {month}: close {month_str(still_open[0])} first (months close in order)")
    stamp = (now or datetime.now(timezone.utc)).replace(tzinfo=None)
    carried = []
    with transaction(con):
        con.execute("INSERT INTO closed_months VALUES (?, ?, ?, ?)",
                    [m_start, stamp, catalog.source_text, catalog.fingerprint()])
        execute_script(con, "chargeback/freeze.sql", {"as_of": m_start, "m_start": m_start, "m_end": m_end})
        for c_month in sorted(closed):
            c_end = parse_month(month_str(c_month))[1]
            if _fingerprint(con, c_month, c_end, None) != _fingerprint(con, c_month, c_end, _latest_asof(con, c_month)):
                execute_script(con, "chargeback/freeze.sql", {"as_of": m_start, "m_start": c_month, "m_end": c_end})
                carried.append(month_str(c_month))
        # a frozen copy is billed for ever after (its corrections too): one that no price
        # applies to is refused now, while the month can still wait for the data that names it
        for c_month in [m_start] + [parse_month(c)[0] for c in carried]:
            try:
                check_priced(con, c_month, m_start, catalog if c_month == m_start else
                             parse_prices_text(closed[c_month], f"closed month {month_str(c_month)} prices"))
            except ConfigError as exc:
                raise ConfigError(f"month {month}: not closed, {exc}") from None
    return carried
