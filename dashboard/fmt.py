"""Pure formatting helpers for the dashboard (no Streamlit, no I/O)."""
from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal


CURRENCY_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None or x != x else f"{x * 100:.{digits}f} %"


def missing(x) -> bool:
    """None, NaN or pandas' NA: a value nobody measured."""
    if x is None or str(x) in ("<NA>", "NaT", "nan"):   # pandas' NA has no truth value
        return True
    return isinstance(x, float) and x != x


def gpu_hours(x: float | None, digits: int = 1) -> str:
    return "–" if missing(x) else f"{x:,.{digits}f} GPU-h"


def number(x: float | int | None, digits: int = 1, unit: str = "") -> str:
    """The one number format of the tables: thousands separators, a fixed number of digits,
    the unit after a space; a blank cell for a value nobody measured."""
    if missing(x):
        return ""
    body = f"{x:,.{digits}f}"
    return f"{body} {unit}" if unit else body


def cell(x) -> str:
    """A text cell: blank for a missing value (never "None")."""
    return "" if missing(x) else str(x)


def money(amount: Decimal | int | str | None, currency: str = "USD") -> str:
    """Decimal money to text, rounded half-even to the cent; never goes through float."""
    if amount is None:
        return "–"
    d = Decimal(str(amount)).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    sign = "-" if d < 0 else ""
    sym = CURRENCY_SYMBOLS.get(currency)
    body = f"{abs(d):,.2f}"
    return f"{sign}{sym}{body}" if sym else f"{sign}{body} {currency}"


def trend(daily: list[float | None], window: int = 7) -> tuple[float | None, float | None]:
    """Mean of the last `window` days and its change from the `window` days before.

    Days without data (None/NaN) are left out; the change is None without two windows.
    """
    vals = [v for v in daily if v is not None and v == v]
    if not vals:
        return None, None
    last = vals[-window:]
    prev = vals[-2 * window:-window]
    cur = sum(last) / len(last)
    if not prev:
        return cur, None
    return cur, cur - sum(prev) / len(prev)


MIN_DEFAULT_DAYS = 3   # a month with less is too young to open on: its charts are a few points


def default_month(months: list[tuple[str, float]], min_days: float = MIN_DEFAULT_DAYS) -> tuple[str, str]:
    """(month, why) to open on, from (month, days of data) newest first: the latest month
    with at least `min_days` days of data, else the one with the most."""
    if not months:
        raise ValueError("no months with data")
    latest, latest_days = months[0]
    for month, days in months:
        if days >= min_days:
            if month == latest:
                return month, "the latest month with data"
            return month, (f"the latest month with at least {min_days:g} days of data "
                           f"({latest} has {_days(latest_days)} so far)")
    month, days = max(months, key=lambda m: m[1])
    return month, f"the month with the most data ({_days(days)}; none has {min_days:g} days yet)"


def _days(n: float) -> str:
    return f"{n:g} day" if n == 1 else f"{n:g} days"
