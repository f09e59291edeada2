"""Exact money: integer raw units, Decimal at the edges, largest-remainder rounding.

Chargeback sums many tiny products (price x share-seconds). To keep the sums exact they are
carried as Python ints / DuckDB HUGEINT in *raw units*: a price in micro-units of currency
times a share in micro-GPU-seconds. One currency unit for one GPU-hour is therefore
RAW_PER_UNIT = 10**6 * 10**6 * 3600 raw units, and a cent RAW_PER_CENT of them.
Only the final rows are turned into cents, all at once, by a largest-remainder scheme so
that the rounded rows still add up to the rounded total.
"""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Sequence

PRICE_SCALE = 10**6          # prices are carried as integer micro-units (6 decimals at most)
SHARE_SCALE = 10**6          # shares as integer micro-GPU-seconds
SECONDS_PER_HOUR = 3600
RAW_PER_UNIT = PRICE_SCALE * SHARE_SCALE * SECONDS_PER_HOUR
RAW_PER_CENT = RAW_PER_UNIT // 100
CENT = Decimal("0.01")
# A bill's money columns (Decimal: the invoice's and the detail's); COST is the amount owed
MONEY_COLUMNS = ("charge", "idle_share", "cost", "waste", "energy_cost")
COST = "cost"


def price_to_micro(price: Decimal) -> int:
    """Decimal price -> integer micro-units; refuses more than 6 decimals (would be lost)."""
    micro = price * PRICE_SCALE
    if micro != micro.to_integral_value():
        raise ValueError(f"{price} has more than 6 decimals")
    return int(micro)


def round_half_up_div(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded half away from zero, in exact integers."""
    q, r = divmod(abs(numerator), denominator)
    if 2 * r >= denominator:
        q += 1
    return q if numerator >= 0 else -q


def largest_remainder(raws: Sequence[int], denominator: int, total: int | None = None) -> list[int]:
    """Round each raws[i] / denominator to an integer so that the results sum to `total`
    (default: the rounded sum of raws). Each row gets its floor; the rows with the largest
    remainders (ties: earlier row first, so callers fix the order) get one more.
    Works for negative rows (corrections) because floor division keeps remainders >= 0."""
    floors = [r // denominator for r in raws]
    rems = [r - f * denominator for r, f in zip(raws, floors)]
    if total is None:
        total = round_half_up_div(sum(raws), denominator)
    extra = total - sum(floors)
    if not 0 <= extra <= len(raws):
        raise ValueError(f"cannot distribute {extra} units over {len(raws)} rows")
    order = sorted(range(len(raws)), key=lambda i: (-rems[i], i))
    for i in order[:extra]:
        floors[i] += 1
    return floors


def split_proportional(amount: int, weights: Sequence[int]) -> list[int]:
    """Split an integer amount over rows in proportion to non-negative integer weights,
    exactly (the parts sum to amount). All-zero weights -> nothing can be split: []."""
    wsum = sum(weights)
    if wsum <= 0:
        return []
    return largest_remainder([amount * w for w in weights], wsum, total=amount)


def nested_largest_remainder(raws: Sequence[int], paths: Sequence[tuple], denominator: int,
                             total: int | None = None) -> list[int]:
    """Round each raws[i] / denominator once, level by level: rows are grouped by the first
    key of their path (e.g. the tenant), the groups get `total` (default: the rounded sum)
    by largest remainder, and each group's rows share its amount the same way, one level
    further down the path at a time. So every group adds up to what its parent gave it and
    any view that sums the rows of a group gets that group's amount.
    Groups and rows keep the callers' order for ties."""
    if not paths or not paths[0]:
        return largest_remainder(raws, denominator, total)
    members: dict = {}
    for i, path in enumerate(paths):
        members.setdefault(path[0], []).append(i)
    groups = list(members.values())
    group_totals = largest_remainder([sum(raws[i] for i in g) for g in groups], denominator, total)
    out = [0] * len(raws)
    for g, g_total in zip(groups, group_totals):
        for i, v in zip(g, nested_largest_remainder([raws[i] for i in g], [paths[i][1:] for i in g],
                                                    denominator, g_total)):
            out[i] = v
    return out


def split_rounded(cost: int, part_raw: int, denominator: int) -> tuple[int, int]:
    """A rounded row amount `cost` (in units of `denominator` raw) split into (rest, part)
    with part = part_raw rounded and kept between 0 and cost, so that rest + part == cost
    and both have cost's sign (neither is negative on a non-negative row)."""
    lo, hi = sorted((0, cost))
    part = min(max(round_half_up_div(part_raw, denominator), lo), hi)
    return cost - part, part


def raw_to_cents(raws: Sequence[int]) -> list[Decimal]:
    """Raw amounts -> Decimal currency amounts (2 decimals) adding up to the rounded total."""
    return [Decimal(c) * CENT for c in largest_remainder(raws, RAW_PER_CENT)]


def raw_to_decimal(raw: int, places: int = 2) -> Decimal:
    """One raw amount -> Decimal currency rounded half-up to `places` decimals (reporting
    only: sums of such values are not guaranteed to add up; use raw_to_cents for bills)."""
    return (Decimal(raw) / Decimal(RAW_PER_UNIT)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


_MICRO_SHARE_HOUR = Decimal(SHARE_SCALE * SECONDS_PER_HOUR)
_QUANTUM = {places: Decimal(1).scaleb(-places) for places in range(13)}   # a bill's detail makes 10^5 calls


def micro_share_to_hours(units: int, places: int = 4) -> Decimal:
    """Micro-GPU-seconds -> GPU-hours as Decimal with `places` decimals."""
    quantum = _QUANTUM.get(places) or Decimal(1).scaleb(-places)
    return (Decimal(units) / _MICRO_SHARE_HOUR).quantize(quantum, rounding=ROUND_HALF_UP)
