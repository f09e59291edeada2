"""Reading the chargeback DataFrame for display: which columns hold money, totals in Decimal."""
from __future__ import annotations

from decimal import Decimal

import pandas as pd

from slicemeter.chargeback.money import RAW_PER_CENT, SHARE_SCALE, price_to_micro, round_half_up_div

# The preferred name of the billed amount, in order; else the last all-Decimal column.
COST_NAMES = ("cost", "total_cost", "charge", "amount", "total", "billed")
# Decimal columns that hold money (others hold GPU-hours, kWh, gCO2e)
MONEY_NAMES = ("charge", "idle_share", "cost", "waste", "energy_cost", "amount", "total", "billed")


def decimal_columns(df: pd.DataFrame) -> list[str]:
    out = []
    for col in df.columns:
        vals = df[col].dropna()
        if len(vals) and all(isinstance(v, Decimal) for v in vals):
            out.append(col)
    return out


def money_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in decimal_columns(df) if c in MONEY_NAMES or c.endswith(("_cost", "price"))]


def cost_column(df: pd.DataFrame) -> str | None:
    dec = decimal_columns(df)
    for name in COST_NAMES:
        if name in dec:
            return name
    return dec[-1] if dec else None


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
