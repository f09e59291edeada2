"""The live bill: each tenant's money so far this month, a forecast to the month's end, and
its budget from the tenant catalog (docs/live-bill.md).

Month-to-date is what the month's invoice would say now: `chargeback()`'s cost per tenant
(Regular lines and the corrections the invoice carries), on one basis and idle policy.

Forecast = month-to-date + the month's mean rate so far x the seconds left in the month.
The rate is the tenant's Regular money over the seconds elapsed since the month began; until
a day has elapsed, the part of that first day not yet seen is filled at the previous month's
mean rate, so the 1st is neither extrapolated from a few minutes nor forecast at zero.
Corrections of closed months are money of this invoice but no rate, so they are added once.
A mean over the month moves a little with each hour, so a noisy hour moves the forecast by
its own money times (month / elapsed), not by the month: the alert's `for:` does the rest.

Exact: Decimal and fractions throughout, rounded half up to the cent once; float only as
the Prometheus sample (slicemeter/headline.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction

import duckdb
import pandas as pd

from slicemeter.chargeback.bill import chargeback, month_str
from slicemeter.chargeback.dividend import previous_month
from slicemeter.chargeback.money import CENT, COST, round_half_up_div
from slicemeter.chargeback.prices import DEFAULT_PRICES, PriceCatalog, load_prices
from slicemeter.common import month_bounds
from slicemeter.headline import Family, Samples, samples
from slicemeter.store import sql_text

DAY_S = 86_400
REGULAR = "Regular"


@dataclass(frozen=True)
class MonthMoney:
    """A tenant's invoice so far: all of it, and the part that is the month's own hours."""
    total: Decimal = Decimal("0.00")
    regular: Decimal = Decimal("0.00")


@dataclass(frozen=True)
class TenantMonth:
    tenant: str
    basis: str
    currency: str
    month_to_date: Decimal
    forecast: Decimal


def month_seconds(month: str, now: datetime) -> tuple[int, int]:
    """(seconds of `month` elapsed at `now`, clamped to the month; the month's seconds)."""
    start, end = month_bounds(month)
    begin = datetime(start.year, start.month, 1, tzinfo=timezone.utc)
    length = (end - start).days * DAY_S
    return min(max(int((now - begin).total_seconds()), 0), length), length


def forecast(money: MonthMoney, elapsed_s: int, month_s: int, previous_rate: Fraction | None = None) -> Decimal:
    """The month's money at its end (pure): money.total + the mean rate of money.regular so far
    x the seconds left. Within the first day the rate is taken over the whole day, its unseen
    part at `previous_rate` (money per second of the previous month; None: nothing)."""
    remaining = month_s - elapsed_s
    if remaining <= 0:
        return money.total
    window = max(elapsed_s, min(DAY_S, month_s))
    seen = Fraction(money.regular) + (previous_rate or 0) * (window - elapsed_s)
    extra = seen * remaining / window
    return (money.total + Decimal(round_half_up_div(extra.numerator * 100, extra.denominator)) * CENT).quantize(CENT)


def invoice_money(invoice: pd.DataFrame) -> dict[str, MonthMoney]:
    """Tenant -> its MonthMoney, summed from an invoice (chargeback()'s rows) in Decimal."""
    out: dict[str, MonthMoney] = {}
    for tenant, charge_class, cost in zip(invoice["tenant"], invoice["charge_class"], invoice[COST]):
        had = out.get(tenant, MonthMoney())
        out[tenant] = MonthMoney(had.total + cost, had.regular + (cost if charge_class == REGULAR else 0))
    return out


def previous_rates(invoice: pd.DataFrame, month_s: int) -> dict[str, Fraction]:
    """Tenant -> its mean Regular money per second over a whole past month's invoice."""
    return {t: Fraction(m.regular) / month_s for t, m in invoice_money(invoice).items()}


def budgets(con: duckdb.DuckDBPyConnection) -> dict[str, Decimal]:
    """Tenant -> monthly budget, as the tenant catalog stores it."""
    return {t: Decimal(b) for t, b in con.execute(sql_text("chargeback/tenant_budgets.sql")).fetchall()}


def month_forecasts(invoice: pd.DataFrame, month: str, now: datetime,
                    previous_invoice: pd.DataFrame | None = None) -> dict[str, tuple[MonthMoney, Decimal]]:
    """Tenant -> (its money of `invoice`, month `month`'s, and its forecast at `now`).
    previous_invoice: the month before's, needed while less than a day of `month` has
    elapsed (without it, that day's unseen part counts as nothing); see needs_previous."""
    elapsed, length = month_seconds(month, now)
    rates = {}
    if previous_invoice is not None and elapsed < DAY_S:
        rates = previous_rates(previous_invoice, month_seconds(previous_month(month), now)[1])
    money = invoice_money(invoice)
    return {t: (money.get(t, MonthMoney()), forecast(money.get(t, MonthMoney()), elapsed, length, rates.get(t)))
            for t in sorted(set(money) | set(rates))}


def needs_previous(month: str, now: datetime) -> bool:
    """Whether month_forecasts at `now` reads the previous month's invoice."""
    return month_seconds(month, now)[0] < DAY_S


def live_bill(con: duckdb.DuckDBPyConnection, now: datetime, bases: tuple[str, ...], idle: str,
              prices: PriceCatalog | None = None, tenants: tuple[str, ...] = ()) -> list[TenantMonth]:
    """Every tenant's month-to-date and forecast on each basis for the month of `now`: the
    tenants the invoice names and `tenants` (a budgeted tenant with no money yet has 0)."""
    month = month_str(now.date())
    prices = prices or load_prices(DEFAULT_PRICES)
    rows = []
    for basis in bases:
        invoice = chargeback(con, month, basis=basis, idle=idle, prices=prices)
        previous = (chargeback(con, previous_month(month), basis=basis, idle=idle, prices=prices)
                    if needs_previous(month, now) else None)
        found = month_forecasts(invoice, month, now, previous)
        for tenant in sorted(set(found) | set(tenants)):
            money, expected = found.get(tenant, (MonthMoney(), MonthMoney().total))
            rows.append(TenantMonth(tenant, basis, prices.currency, money.total, expected))
    return rows


_TENANT_MONTH = ("tenant", "basis", "currency")
LIVE_BILL_METRICS = {
    "slicemeter_tenant_month_to_date_charge": Family(
        "The tenant's invoice for the current UTC month so far (cost: charges, idle share, corrections)",
        _TENANT_MONTH, lambda r: r.month_to_date),
    "slicemeter_tenant_month_forecast_charge": Family(
        "Month-to-date plus the month's mean rate so far over the rest of the month (docs/live-bill.md)",
        _TENANT_MONTH, lambda r: r.forecast),
}
BUDGET_METRICS = {
    "slicemeter_tenant_month_budget": Family(
        "The tenant's monthly budget from the tenant catalog", ("tenant", "currency"), lambda b: b),
}


def live_bill_metrics(rows: list[TenantMonth], budget: dict[str, Decimal], currency: str) -> Samples:
    """LIVE_BILL_METRICS' samples of `rows` and BUDGET_METRICS' of `budget` (in `currency`)."""
    out = samples(LIVE_BILL_METRICS, (({"tenant": r.tenant, "basis": r.basis, "currency": r.currency}, r)
                                      for r in rows))
    out.update(samples(BUDGET_METRICS, (({"tenant": t, "currency": currency}, b) for t, b in sorted(budget.items()))))
    return out
