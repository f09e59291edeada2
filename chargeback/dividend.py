"""The sharing dividend: what slicing GPUs saved, against the same containers on whole GPUs.

Definitions: docs/dividend.md. In one sentence: without slicing, every container granted any
part of a GPU would hold the whole device, so the GPUs the fleet would need are its slices'
metered hours; the GPUs it used are the GPU-hours that held at least one slice; the
difference, at catalog prices and at the measured idle power of each model, is the dividend.

`compute()` is pure (frames from sql/chargeback/dividend_*.sql in, figures out); `dividend()`
runs the queries on a connection. Money is Decimal from integer milliseconds, never float.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

import pandas as pd

from slicemeter.chargeback.prices import PriceCatalog
from slicemeter.store import sql_text
from slicemeter.common import ConfigError, month_window
from slicemeter.headline import Family, Samples, samples

FLEET = "fleet"
ENTERPRISE_BAND = (0.20, 0.25)   # typical utilization of enterprise GPU fleets (docs/dividend.md)
MS_PER_HOUR = 3_600_000
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Figures:
    """One scope's dividend (the fleet, or the GPUs of one tenant's cluster) over a period."""

    scope: str
    hours: int                    # hours with metered data
    gpus: int                     # physical GPUs metered
    containers: int               # distinct containers served
    metered_gpu_h: float
    in_use_gpu_h: float           # GPU-hours that held at least one slice
    whole_gpu_h: float            # GPU-hours the same slices would hold as whole GPUs
    busy_gpu_h: float             # NVML SM busy time
    gpu_cost: Decimal             # the period's metered GPU-hours at catalog prices
    cost_avoided: Decimal         # the avoided GPU-hours at catalog prices
    monthly_cost_avoided: Decimal  # cost_avoided at this period's rate over the whole month
    kwh_avoided: float            # avoided GPU-hours x the model's measured idle power
    co2e_kg_avoided: float
    currency: str | None

    @property
    def gpus_in_use(self) -> float:
        return self.in_use_gpu_h / self.hours if self.hours else 0.0

    @property
    def gpus_needed(self) -> float:
        """GPUs the same containers would need if each took whole GPUs."""
        return self.whole_gpu_h / self.hours if self.hours else 0.0

    @property
    def gpus_avoided(self) -> float:
        return self.gpus_needed - self.gpus_in_use

    @property
    def sharing_factor(self) -> float | None:
        """N in "N x the users on the same hardware": whole-GPU need / GPUs in use."""
        return self.whole_gpu_h / self.in_use_gpu_h if self.in_use_gpu_h else None

    @property
    def containers_per_gpu(self) -> float | None:
        """Container slices served per physical GPU metered (idle GPUs included)."""
        return self.whole_gpu_h / self.metered_gpu_h if self.metered_gpu_h else None

    @property
    def utilization(self) -> float | None:
        return self.busy_gpu_h / self.metered_gpu_h if self.metered_gpu_h else None

    @property
    def utilization_unshared(self) -> float | None:
        """The same work on whole GPUs: busy time over the GPU-hours they would hold."""
        return self.busy_gpu_h / self.whole_gpu_h if self.whole_gpu_h else None


@dataclass
class Report:
    month: str
    month_hours: int
    fleet: Figures
    tenants: list[Figures]
    daily: pd.DataFrame = field(repr=False)   # day, sharing_factor, gpus_in_use, gpus_needed, gpus_avoided, utilization
    carbon_g_per_kwh: Decimal = Decimal(0)
    idle_watts: dict[str, float] = field(default_factory=dict)
    unpriced_models: list[str] = field(default_factory=list)


def _hours(ms: int) -> float:
    return int(ms) / MS_PER_HOUR


def _price(catalog: PriceCatalog | None, row) -> Decimal | None:
    if catalog is None:
        return None
    try:
        return catalog.price(row.model, row.node, row.cluster)
    except ConfigError:   # a model without a price is listed in the report, not fatal
        return None


def _figures(scope: str, rows: pd.DataFrame, hours: int, containers: int, prices: list[Decimal | None],
             idle_watts: dict[str, float], carbon: Decimal, month_hours: int, currency: str | None) -> Figures:
    gpu_cost = cost_avoided = Decimal(0)
    kwh = 0.0
    # column by column, not row by row: a fleet has a row per priced group (thousands at
    # fleet scale), and building a row object each costs more than the sums themselves
    for model, metered_ms, whole_gpu_ms, in_use_ms, price in zip(
            rows["model"], rows["metered_ms"], rows["whole_gpu_ms"], rows["in_use_ms"], prices):
        avoided_ms = int(whole_gpu_ms) - int(in_use_ms)
        if price is not None:
            gpu_cost += price * int(metered_ms) / MS_PER_HOUR
            cost_avoided += price * avoided_ms / MS_PER_HOUR
        kwh += _hours(avoided_ms) * idle_watts.get(model, 0.0) / 1000
    monthly = cost_avoided * month_hours / hours if hours else Decimal(0)
    return Figures(
        scope=scope, hours=int(hours), gpus=int(rows["gpus"].sum()) if len(rows) else 0, containers=int(containers),
        metered_gpu_h=_hours(rows["metered_ms"].sum()), in_use_gpu_h=_hours(rows["in_use_ms"].sum()),
        whole_gpu_h=_hours(rows["whole_gpu_ms"].sum()), busy_gpu_h=float(rows["sm_util_s"].sum()) / 3600,
        gpu_cost=gpu_cost.quantize(CENT, ROUND_HALF_UP), cost_avoided=cost_avoided.quantize(CENT, ROUND_HALF_UP),
        monthly_cost_avoided=monthly.quantize(CENT, ROUND_HALF_UP), kwh_avoided=kwh,
        co2e_kg_avoided=kwh * float(carbon) / 1000, currency=currency,
    )


def compute(month: str, groups: pd.DataFrame, coverage: pd.DataFrame, idle_watts: dict[str, float],
            catalog: PriceCatalog | None) -> Report:
    """The month's report from the dividend queries' frames (pure)."""
    _, _, month_hours = month_window(month)
    groups = groups.copy()
    for col in ("metered_ms", "in_use_ms", "whole_gpu_ms"):
        groups[col] = groups[col].map(int)
    # a GPU metered on several days counts once per scope: count GPUs over the period
    by_gpu = groups.groupby(["tenant", "cluster", "node", "model"], dropna=False, as_index=False).agg(
        gpus=("gpus", "max"), metered_ms=("metered_ms", "sum"), in_use_ms=("in_use_ms", "sum"),
        whole_gpu_ms=("whole_gpu_ms", "sum"), sm_util_s=("sm_util_s", "sum"))
    prices = [_price(catalog, r) for r in by_gpu.itertuples()]
    carbon = catalog.carbon_g_per_kwh if catalog is not None else Decimal(0)
    currency = catalog.currency if catalog is not None else None
    period = coverage[coverage["day"].isna() & coverage["tenant"].isna()]
    per_tenant = coverage[coverage["day"].isna() & coverage["tenant"].notna()].set_index("tenant")
    fleet = _figures(FLEET, by_gpu, int(period["hours"].sum()), int(period["containers"].sum()), prices,
                     idle_watts, carbon, month_hours, currency)
    tenants = []
    for tenant in sorted(by_gpu["tenant"].unique()):
        mask = (by_gpu["tenant"] == tenant).to_numpy()
        cov = per_tenant.loc[tenant] if tenant in per_tenant.index else {"hours": 0, "containers": 0}
        tenants.append(_figures(tenant, by_gpu[mask], int(cov["hours"]), int(cov["containers"]),
                                [p for p, m in zip(prices, mask) if m], idle_watts, carbon, month_hours, currency))
    daily = _daily(groups, coverage)
    unpriced = sorted({str(r.model) for r, p in zip(by_gpu.itertuples(), prices) if p is None}) if catalog else []
    return Report(month, month_hours, fleet, tenants, daily, carbon, dict(idle_watts), unpriced)


def _daily(groups: pd.DataFrame, coverage: pd.DataFrame) -> pd.DataFrame:
    if groups.empty:
        return pd.DataFrame(columns=["day", "sharing_factor", "gpus_in_use", "gpus_needed", "gpus_avoided", "utilization"])
    d = groups.groupby("day", as_index=False).agg(
        metered_ms=("metered_ms", "sum"), in_use_ms=("in_use_ms", "sum"),
        whole_gpu_ms=("whole_gpu_ms", "sum"), sm_util_s=("sm_util_s", "sum"))
    hours = coverage[coverage["day"].notna() & coverage["tenant"].isna()].set_index("day")["hours"]
    h = d["day"].map(hours).fillna(0).astype(float).to_numpy()
    in_use = d["in_use_ms"].map(_hours).to_numpy()
    whole = d["whole_gpu_ms"].map(_hours).to_numpy()
    metered = d["metered_ms"].map(_hours).to_numpy()
    out = pd.DataFrame({
        "day": pd.to_datetime(d["day"]),
        "sharing_factor": [w / u if u else None for w, u in zip(whole, in_use)],
        "gpus_in_use": [u / x if x else 0.0 for u, x in zip(in_use, h)],
        "gpus_needed": [w / x if x else 0.0 for w, x in zip(whole, h)],
        "utilization": [s / 3600 / m if m else None for s, m in zip(d["sm_util_s"], metered)],
    })
    out["gpus_avoided"] = out["gpus_needed"] - out["gpus_in_use"]
    return out


def _frame(con, name: str, params: dict) -> pd.DataFrame:
    return con.execute(sql_text(f"chargeback/{name}.sql"), params).df()


def dividend(con, month: str, catalog: PriceCatalog | None) -> Report:
    """The month's sharing dividend from the store (rollups; a snapshot is fine)."""
    start, end, _ = month_window(month)
    params = {"start": start, "end": end}
    groups = _frame(con, "dividend_groups", params)
    coverage = _frame(con, "dividend_coverage", params)
    idle = {str(m): float(w) for m, w in _frame(con, "dividend_idle_power", params).itertuples(index=False)}
    return compute(month, groups, coverage, idle, catalog)


def in_band(utilization: float | None) -> str:
    """Where a utilization sits against the enterprise band: below, within or above."""
    if utilization is None:
        return "no data"
    lo, hi = ENTERPRISE_BAND
    return "below" if utilization < lo else "within" if utilization <= hi else "above"



# The dividend of the current and the previous month as ingest serves it (docs/dividend.md);
# scope is "fleet" or a tenant (the GPUs of its cluster), month YYYY-MM.
_SCOPE_MONTH = ("scope", "month")
DIVIDEND_METRICS = {
    "slicemeter_dividend_sharing_factor": Family(
        "GPUs the month's containers would need as whole GPUs, per GPU in use (N x the users)", _SCOPE_MONTH,
        lambda f: f.sharing_factor),
    "slicemeter_dividend_containers_per_gpu": Family(
        "Container slices served per physical GPU metered", _SCOPE_MONTH, lambda f: f.containers_per_gpu),
    "slicemeter_dividend_gpus_in_use": Family(
        "GPUs holding at least one container slice, month average", _SCOPE_MONTH, lambda f: f.gpus_in_use),
    "slicemeter_dividend_gpus_needed": Family(
        "GPUs the same containers would hold as whole GPUs, month average", _SCOPE_MONTH, lambda f: f.gpus_needed),
    "slicemeter_dividend_gpus_avoided": Family(
        "Whole-GPU need minus GPUs in use, month average", _SCOPE_MONTH, lambda f: f.gpus_avoided),
    "slicemeter_dividend_utilization_ratio": Family(
        "NVML SM busy time over metered GPU time (0-1)", _SCOPE_MONTH, lambda f: f.utilization),
    "slicemeter_dividend_monthly_cost_avoided": Family(
        "The avoided GPUs at catalog prices over the whole month", (*_SCOPE_MONTH, "currency"),
        lambda f: f.monthly_cost_avoided if f.currency else None),
    "slicemeter_dividend_energy_avoided_kwh": Family(
        "The avoided GPU-hours at each model's measured idle power", _SCOPE_MONTH, lambda f: f.kwh_avoided),
    "slicemeter_dividend_co2e_avoided_grams": Family(
        "The avoided energy at the catalog's carbon intensity", _SCOPE_MONTH, lambda f: f.co2e_kg_avoided * 1000),
}


def dividend_metrics(reports: list[Report]) -> Samples:
    """DIVIDEND_METRICS' samples for the fleet and each tenant of each report's month."""
    return samples(DIVIDEND_METRICS, (({"scope": f.scope, "month": report.month, "currency": f.currency or ""}, f)
                                      for report in reports for f in [report.fleet, *report.tenants]))


def previous_month(month: str) -> str:
    start, _, _ = month_window(month)
    year, mon = (start.year - 1, 12) if start.month == 1 else (start.year, start.month - 1)
    return f"{year:04d}-{mon:02d}"
