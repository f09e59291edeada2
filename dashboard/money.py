"""Reading the chargeback DataFrame for display: its money columns, totals in Decimal."""
from __future__ import annotations

from decimal import Decimal

import pandas as pd

from slicemeter.common import ConfigError
from slicemeter.chargeback.money import MONEY_COLUMNS, RAW_PER_CENT, SHARE_SCALE, price_to_micro, round_half_up_div



def money_columns(df: pd.DataFrame) -> list[str]:
    """The bill's money columns that `df` holds (chargeback/money.py names them)."""
    return [c for c in MONEY_COLUMNS if c in df.columns]


def currency(df: pd.DataFrame, default: str = "USD") -> str:
    if "currency" in df.columns and len(df):
        return str(df["currency"].iloc[0])
    return str(df.attrs.get("currency", default))


def totals_by(df: pd.DataFrame, key: str, cost: str) -> pd.DataFrame:
    """Sum the Decimal cost per key without passing through float."""
    rows = {}
    for k, v in zip(df[key], df[cost]):
        rows[k] = rows.get(k, Decimal(0)) + (v if isinstance(v, Decimal) else Decimal(0))
    out = pd.DataFrame({key: list(rows), cost: list(rows.values())})
    return out.sort_values(cost, ascending=False, key=lambda s: s.map(Decimal)).reset_index(drop=True)


def share_cost(gpu_hour: Decimal, share_ms: int) -> Decimal:
    """What `share_ms` GPU-share-milliseconds cost at `gpu_hour` a GPU-hour, to the cent,
    in exact integers (a price in micro-units times micro-GPU-seconds, slicemeter.chargeback.money's raw units)."""
    raw = price_to_micro(gpu_hour) * int(share_ms) * (SHARE_SCALE // 1000)
    return Decimal(round_half_up_div(raw, RAW_PER_CENT)).scaleb(-2)


def unverified_usage(bill: pd.DataFrame) -> dict[str, Decimal]:
    """Tenant -> hours of its bill that rest on usage no NVML check covered (the bill's
    usage_unverified_hours; 0 on the allocation basis), only the tenants with some."""
    if "usage_unverified_hours" not in bill.columns:
        return {}
    out: dict[str, Decimal] = {}
    for tenant, h in zip(bill["tenant"], bill["usage_unverified_hours"]):
        if h:
            out[tenant] = out.get(tenant, Decimal(0)) + h
    return out


def price_lists(catalog, places) -> dict[str, list[str]]:
    """The catalog's GPU-hour price of each (model, node, cluster) in `places`, as the
    parallel lists sql/dashboard/gpu_table.sql binds ($price_model, $price_node,
    $price_cluster, $price_per_h; prices as exact decimal text). A place the catalog does not
    price is left out: its cost reads blank, not zero."""
    out: dict[str, list[str]] = {"price_model": [], "price_node": [], "price_cluster": [], "price_per_h": []}
    if catalog is None:
        return out
    for model, node, cluster in dict.fromkeys(places):
        try:
            price = catalog.price(model, node, cluster)
        except ConfigError:
            continue
        out["price_model"].append(model)
        out["price_node"].append(node)
        out["price_cluster"].append(cluster)
        out["price_per_h"].append(str(price))
    return out
