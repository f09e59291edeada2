"""Right-sizing and consolidation: what each slice should ask for, and how many GPUs the
fleet could give back.

`build_plan(con, month, headroom, prices)` reads the stored hourly rollups (slice_hour,
gpu_hour) through sql/rightsizing/*.sql and returns a `Plan`:
- `.slices`: per slice, percentiles of memory and SM use over the month's hourly values,
  the recommended `nvidia.com/gpumem` (MiB) and `nvidia.com/gpucores` (percent), flags,
  and where the consolidation plan would put it;
- `.placement`: per GPU, today's slices and needs beside the planned ones;
- `.groups`: per (tenant cluster, GPU model), GPUs today, FFD, the plan, the lower bound;
- `.summary`: the headline figures (see `summarize`).
The recommendation and packing steps are pure functions of DataFrames; only `build_plan`
and `recurring_demands` touch the database.
"""
from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np
import pandas as pd

from slicemeter.rightsizing import packing
from slicemeter.common import MiB, month_window
from slicemeter.headline import Family, Samples, samples
from slicemeter.store import registered, sql_text



@dataclass(frozen=True)
class Thresholds:
    """When a slice is flagged. Defaults: over-requested when the grant is
    more than twice the p99 need; OOM risk when p99 memory is above 90 % of the limit; idle
    when no kernel ran for a day at the latest sample, or p99 SM use is below 1 %."""
    over_request_factor: float = 2.0
    oom_ratio: float = 0.9
    idle_after_s: float = 24 * 3600.0
    idle_sm_ratio: float = 0.01


@dataclass
class Plan:
    month: str
    headroom: float
    slices: pd.DataFrame
    placement: pd.DataFrame
    groups: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)


def _price_table(prices) -> tuple[dict[str, Decimal], str | None]:
    """Accept {model: Decimal per GPU-hour}, or a catalog object with `.gpu_hour` and
    `.currency` (slicemeter.chargeback.prices' catalog)."""
    if prices is None:
        return {}, None
    currency = getattr(prices, "currency", None)
    table = getattr(prices, "gpu_hour", prices)
    out = {}
    for model, price in dict(table).items():
        if isinstance(price, float):
            raise TypeError(f"price for {model!r} must be Decimal or str, not float")
        out[str(model)] = Decimal(str(price))
    return out, currency


def price_key(prices, currency: str = "USD") -> str:
    """The prices a plan is made with (as build_plan takes them), as text that is equal for
    equal catalogs: part of a kept plan's stamp (slicemeter.rightsizing.kept)."""
    table, cat_currency = _price_table(prices)
    return json.dumps({"currency": (cat_currency or currency) if table else None,
                       "gpu_hour": sorted((model, format(price.normalize(), "f")) for model, price in table.items())})


# ---------------------------------------------------------------- right-sizing (pure)

def recommend_slices(stats: pd.DataFrame, headroom: float = 0.2,
                     thresholds: Thresholds = Thresholds()) -> pd.DataFrame:
    """Add recommendations and flags to the per-slice statistics (sql/rightsizing/slices.sql).

    gpumem (MiB) = ceil(p99 memory peak x (1 + headroom)), at least 1, at most the GPU;
    gpucores (%) = ceil(p99 hourly SM share x (1 + headroom) x 100), in [1, 100].
    A whole-GPU pod's grant is the whole GPU (memory total, 100 % cores)."""
    if headroom < 0 or not math.isfinite(headroom):
        raise ValueError(f"headroom must be >= 0, got {headroom!r}")
    t = thresholds
    df = stats.copy()
    total = df["memory_total_bytes"].astype("float64")
    whole = df["whole_gpu"].astype(bool)
    grant_mem = df["alloc_memory_bytes"].astype("float64")
    grant_mem = grant_mem.where(~(whole & grant_mem.isna()), total)
    grant_cores = df["alloc_cores_ratio"].astype("float64")
    grant_cores = grant_cores.where(~(whole & grant_cores.isna()), 1.0)
    df["grant_memory_mib"] = np.ceil(grant_mem / MiB)
    df["grant_cores_pct"] = np.round(grant_cores * 100.0, 1)

    mem_p99 = df["mem_p99"].astype("float64").fillna(0.0)
    sm_p99 = df["sm_p99"].astype("float64").fillna(0.0)
    rec_mem = np.maximum(np.ceil(mem_p99 * (1.0 + headroom) / MiB - 1e-9), 1.0)
    rec_mem = np.where(total.notna(), np.minimum(rec_mem, np.floor(total / MiB)), rec_mem)
    df["recommended_gpumem_mib"] = rec_mem.astype("int64")
    rec_cores = np.clip(np.ceil(sm_p99 * (1.0 + headroom) * 100.0 - 1e-9), 1.0, 100.0)
    df["recommended_gpucores_pct"] = rec_cores.astype("int64")

    # HAMi treats gpucores 0 as "no limit": no cores grant, nothing over-requested there.
    over_mem = grant_mem.notna() & (grant_mem > t.over_request_factor * mem_p99)
    over_cores = (grant_cores > 0) & (grant_cores > t.over_request_factor * sm_p99)
    df["over_requested"] = (over_mem | over_cores.fillna(False)).astype(bool)
    df["oom_risk"] = (grant_mem.notna() & (grant_mem > 0)
                      & (mem_p99 > t.oom_ratio * grant_mem)).astype(bool)
    age = df["last_kernel_age_s"].astype("float64")
    df["hours_since_kernel"] = age / 3600.0
    # No kernel age (never, or not reported: whole GPUs without HAMi) proves nothing on its
    # own; SM use below the threshold does.
    df["idle"] = ((age >= t.idle_after_s).fillna(False) | (sm_p99 < t.idle_sm_ratio)).astype(bool)
    df["memory_saving_mib"] = (df["grant_memory_mib"] - df["recommended_gpumem_mib"]).clip(lower=0)
    return df


# ---------------------------------------------------------------- consolidation (pure)

def slice_demands(slices: pd.DataFrame, headroom: float) -> np.ndarray:
    """Needs as fractions of the slice's GPU: p95 memory peak and p95 SM share, plus the
    headroom; whole-GPU pods stay whole (1, 1)."""
    total = slices["memory_total_bytes"].astype("float64")
    mem = slices["mem_p95"].astype("float64").fillna(0.0) * (1.0 + headroom) / total
    sm = slices["sm_p95"].astype("float64").fillna(0.0) * (1.0 + headroom)
    d = np.column_stack([mem.fillna(1.0).to_numpy(), sm.to_numpy()])
    d = np.clip(d, 0.0, 1.0)
    d[slices["whole_gpu"].astype(bool).to_numpy()] = 1.0
    return d


def _assign_gpus(bins: list[list[int]], item_gpu: list[str], item_whole: list[bool],
                 gpus: pd.DataFrame, keep: str = "nodes") -> list[str | None]:
    """Map planned bins onto the group's real GPUs. Returns the GPU uuid per bin (None:
    the group needs a GPU more than it has).

    keep="nodes": keep the GPUs of as few nodes as possible, so whole nodes go back (a
    cloud or a lease returns nodes, not GPUs): nodes holding whole-GPU pods first (those
    pods, multi-GPU ones included, then never move), then the busiest nodes.
    keep="gpus": keep the GPUs that most of each bin's slices are already on (fewest moves).
    Either way each bin then goes to the kept GPU holding most of its slices."""
    node_of = dict(zip(gpus["gpu_uuid"], gpus["node"]))
    per_gpu: dict[str, int] = {}
    whole_nodes: set = set()
    for u, w in zip(item_gpu, item_whole):
        per_gpu[u] = per_gpu.get(u, 0) + 1
        if w:
            whole_nodes.add(node_of.get(u))
    all_gpus = list(gpus["gpu_uuid"])
    if keep == "nodes":
        per_node: dict = {}
        for u in all_gpus:
            per_node[node_of[u]] = per_node.get(node_of[u], 0) + per_gpu.get(u, 0)
        rank = sorted(all_gpus, key=lambda u: (node_of[u] not in whole_nodes,
                                               -per_node[node_of[u]], str(node_of[u]),
                                               -per_gpu.get(u, 0), u))
        allowed = set(rank[:len(bins)])
    else:
        allowed = set(all_gpus)
    pairs: dict[tuple[int, str], int] = {}
    for b, items in enumerate(bins):
        for i in items:
            if item_gpu[i] in allowed:
                pairs[(b, item_gpu[i])] = pairs.get((b, item_gpu[i]), 0) + 1
    chosen: dict[int, str] = {}
    taken: set[str] = set()
    for (b, g), _ in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1])):
        if b not in chosen and g not in taken:
            chosen[b] = g
            taken.add(g)
    kept_nodes = {node_of.get(g) for g in taken}
    free = sorted((g for g in allowed if g not in taken),
                  key=lambda g: (node_of.get(g) not in kept_nodes, str(node_of.get(g)), g))
    if keep != "nodes":
        free = free[: max(len(bins) - len(chosen), 0)]
    out: list[str | None] = []
    for b in range(len(bins)):
        if b in chosen:
            out.append(chosen[b])
        elif free:
            out.append(free.pop(0))
        else:
            out.append(None)
    return out


def _frame(con, name: str, params: dict) -> pd.DataFrame:
    """Run sql/rightsizing/<name>.sql into a DataFrame through Arrow: the same frame as
    `.df()` (same dtypes), but strings are not built one Python object at a time (411k
    slices x 7 string columns: ~1 s of `.df()` on a month of a large fleet)."""
    # On the caller's connection (its transaction, its registered relations). DuckDB warns
    # that Arrow from an execute() result copies the rows once more; that copy is cheap next
    # to `.df()`, and con.sql() would fail where the caller left a result unfetched. The
    # warning is filtered for this module, not within catch_warnings(), which is not
    # thread-safe (ingest plans in a thread of its own); set on each call, since a filter set
    # at import would go with any catch_warnings() block the import ran in (idempotent).
    warnings.filterwarnings("ignore", message="Arrow output on a DB-API result", category=UserWarning,
                            module=r"slicemeter\.rightsizing\.plan")
    table = con.execute(sql_text(f"rightsizing/{name}.sql"), params).to_arrow_table()
    return table.to_pandas()


def mark_current(slices: pd.DataFrame, tolerance_h: float = 1.0) -> pd.Series:
    """A slice is current when it was metered in the window's last hour with data (within
    `tolerance_h`, for a late Tick); the others ended before the window's end."""
    if slices.empty:
        return pd.Series([], dtype=bool)
    latest = slices["last_hour"].max()
    return slices["last_hour"] >= latest - pd.Timedelta(hours=tolerance_h)


def recurring_demands(con, slices: pd.DataFrame, gpus: pd.DataFrame, params: dict,
                      headroom: float) -> pd.DataFrame:
    """Per GPU, the need of the slices that ended before the window's end (batch jobs and
    the like) as one unit the plan moves whole: the p95 over the GPU's metered hours of
    their hourly summed need (sql/rightsizing/ephemeral.sql), plus the headroom. Jobs that ran
    one after another on a GPU are not added up as if they ran together."""
    cols = ["gpu_uuid", "need_mem_ratio", "need_sm_ratio"]
    ended = slices.loc[~slices["current"].astype(bool), ["gpu_uuid", "pod_uid", "container"]]
    if ended.empty:
        return pd.DataFrame(columns=cols)
    with registered(con, recommend_ephemeral_keys=ended,
                    recommend_gpu_info=gpus[["gpu_uuid", "memory_total_bytes", "hours"]]):
        p95 = _frame(con, "ephemeral", params)
    out = pd.DataFrame({
        "gpu_uuid": p95["gpu_uuid"],
        "need_mem_ratio": np.clip(p95["mem_p95"].to_numpy(dtype=float) * (1 + headroom), 0, 1),
        "need_sm_ratio": np.clip(p95["sm_p95"].to_numpy(dtype=float) * (1 + headroom), 0, 1)})
    return out[(out["need_mem_ratio"] > 0) | (out["need_sm_ratio"] > 0)].reset_index(drop=True)


def consolidate(slices: pd.DataFrame, gpus: pd.DataFrame, headroom: float,
                budget_s: float = 1.0, keep: str = "nodes",
                recurring: pd.DataFrame | None = None):
    """Pack each (cluster, model) group's current slices, and the per-GPU recurring need
    of the slices that ended (`recurring`, see recurring_demands), onto that group's GPUs
    (see _assign_gpus for `keep`). Slices with current == False are not placed.
    Returns (slices with planned_gpu_uuid, placement per GPU, groups)."""
    slices = slices.reset_index(drop=True).copy()
    d = slice_demands(slices, headroom)
    slices["need_mem_ratio"] = d[:, 0]
    slices["need_sm_ratio"] = d[:, 1]
    if "current" not in slices.columns:
        slices["current"] = True
    cur = np.flatnonzero(slices["current"].to_numpy(dtype=bool))
    items = pd.DataFrame({
        "slice_row": cur, "gpu_uuid": slices["gpu_uuid"].to_numpy()[cur],
        "cluster": slices["cluster"].to_numpy()[cur],
        "model": slices["model"].fillna("unknown").to_numpy()[cur],
        "whole": slices["whole_gpu"].to_numpy(dtype=bool)[cur],
        "mem": d[cur, 0], "sm": d[cur, 1],
        # a pod's slices sit on distinct GPUs (HAMi): keep them apart in the plan
        "pod": slices["pod_uid"].to_numpy()[cur]})
    if recurring is not None and len(recurring):
        rec = recurring.merge(gpus[["gpu_uuid", "cluster", "model"]], on="gpu_uuid")
        items = pd.concat([items, pd.DataFrame({
            "slice_row": -1, "gpu_uuid": rec["gpu_uuid"], "cluster": rec["cluster"],
            "model": rec["model"].fillna("unknown"), "whole": False,
            "mem": rec["need_mem_ratio"].astype(float), "sm": rec["need_sm_ratio"].astype(float),
            "pod": None})],
            ignore_index=True)
    demand = items[["mem", "sm"]].to_numpy(dtype=float)
    pod_code, _ = pd.factorize(items["pod"])          # None -> -1
    multi = pd.Series(pod_code).map(pd.Series(pod_code).value_counts()) > 1
    apart_all = np.where((pod_code >= 0) & multi.to_numpy(), pod_code, -1)
    target = np.full(len(items), None, dtype=object)
    model_g = gpus["model"].fillna("unknown")
    keys = sorted(set(zip(items["cluster"], items["model"])) | set(zip(gpus["cluster"], model_g)))
    n_items = max(len(items), 1)
    group_rows = []
    for cluster, model in keys:
        idx = np.flatnonzero(((items["cluster"] == cluster) & (items["model"] == model)).to_numpy())
        g = gpus[(gpus["cluster"] == cluster) & (model_g == model)]
        item_gpu = items["gpu_uuid"].to_numpy()[idx].tolist()
        today: dict[str, list[int]] = {}
        for k, u in enumerate(item_gpu):
            today.setdefault(u, []).append(k)
        res = packing.pack(demand[idx], initial=list(today.values()),
                           budget_s=budget_s * max(len(idx), 1) / n_items,
                           apart=apart_all[idx])
        targets = _assign_gpus(res.bins, item_gpu, items["whole"].to_numpy()[idx].tolist(), g, keep)
        for b, members in enumerate(res.bins):
            target[idx[members]] = targets[b]
        is_slice = items["slice_row"].to_numpy()[idx] >= 0
        group_rows.append({
            "cluster": cluster, "model": model,
            "tenant": g["tenant"].iloc[0] if len(g) else None,
            "gpus_today": len(g), "gpus_with_slices_today": len(today),
            "slices": int(is_slice.sum()), "recurring_units": int((~is_slice).sum()),
            "gpus_ffd": res.ffd_bins, "gpus_planned": res.n_bins,
            "lower_bound": res.lower_bound, "proven_optimal": res.proven_optimal,
            "method": res.method,
        })
    groups = pd.DataFrame(group_rows)
    items["target"] = target

    planned_gpu = np.full(len(slices), None, dtype=object)
    srow = items["slice_row"].to_numpy()
    planned_gpu[srow[srow >= 0]] = target[srow >= 0]
    slices["planned_gpu_uuid"] = planned_gpu

    items["is_slice"] = items["slice_row"] >= 0
    today_load = items.groupby("gpu_uuid").agg(
        slices_today=("is_slice", "sum"), need_mem_today=("mem", "sum"), need_sm_today=("sm", "sum"))
    planned = items[items["target"].notna()].groupby("target").agg(
        slices_planned=("is_slice", "sum"), units_planned=("mem", "size"),
        need_mem_planned=("mem", "sum"), need_sm_planned=("sm", "sum"))
    placement = gpus.merge(today_load, left_on="gpu_uuid", right_index=True, how="left")
    placement = placement.merge(planned, left_on="gpu_uuid", right_index=True, how="left")
    for c in ("slices_today", "need_mem_today", "need_sm_today", "slices_planned",
              "units_planned", "need_mem_planned", "need_sm_planned"):
        placement[c] = placement[c].fillna(0)
    for c in ("slices_today", "slices_planned", "units_planned"):
        placement[c] = placement[c].astype("int64")
    placement["freed"] = placement["units_planned"] == 0
    placement = placement.drop(columns=["units_planned"])
    moved = items[items["target"].notna() & (items["target"] != items["gpu_uuid"])]
    placement["moves_in"] = placement["gpu_uuid"].map(moved.groupby("target").size()).fillna(0).astype("int64")
    node_of = dict(zip(gpus["gpu_uuid"], gpus["node"]))
    slices["planned_node"] = slices["planned_gpu_uuid"].map(node_of)
    slices["moves"] = slices["current"].astype(bool) & (slices["planned_gpu_uuid"] != slices["gpu_uuid"])
    return slices, placement, groups


# ---------------------------------------------------------------- summary and entry point

def _money(x: Decimal) -> Decimal:
    return x.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def summarize(slices, placement, groups, month_hours, price_table, currency) -> dict[str, Any]:
    gpus_total = len(placement)
    extra = int((groups["gpus_planned"] - groups["gpus_today"]).clip(lower=0).sum()) if len(groups) else 0
    gpus_planned = int(groups["gpus_planned"].sum()) if len(groups) else 0
    freed = placement[placement["freed"]]
    nodes = placement.groupby("node")["freed"].all()
    saving = Decimal(0)
    unpriced = sorted({str(m) for m in freed["model"].fillna("unknown") if str(m) not in price_table})
    if price_table:
        for model, n in freed["model"].fillna("unknown").value_counts().items():
            if model in price_table:
                saving += price_table[model] * int(n) * month_hours
    metered = float(placement["metered_s"].sum())
    kept_metered = float(placement.loc[~placement["freed"], "metered_s"].sum())
    used = float(slices["usage_share_s"].sum()) if len(slices) else 0.0
    lb = int(groups["lower_bound"].sum()) if len(groups) else 0
    return {
        "gpus_total": gpus_total,
        "gpus_with_slices_today": int((placement["slices_today"] > 0).sum()),
        "gpus_planned": gpus_planned,
        "gpus_freeable": int(len(freed)),
        "gpus_short": extra,   # groups whose p95 needs exceed their GPUs today
        "nodes_total": int(len(nodes)),
        "nodes_freeable": int(nodes.sum()),
        "gpus_ffd": int(groups["gpus_ffd"].sum()) if len(groups) else 0,
        "lower_bound_gpus": lb,
        "optimality_gap": gpus_planned - lb,   # GPUs; 0 = proven optimal
        "proven_optimal": bool(groups["proven_optimal"].all()) if len(groups) else True,
        "utilization_today": used / metered if metered else 0.0,
        "projected_utilization": used / kept_metered if kept_metered else 0.0,
        "monthly_saving": _money(saving),
        "currency": currency if price_table else None,
        "unpriced_models": unpriced if price_table else [],
        "month_hours": month_hours,
        "slices": int(len(slices)),
        "slices_moved": int(slices["moves"].sum()) if len(slices) else 0,
        "slices_ended": int((~slices["current"].astype(bool)).sum()) if len(slices) else 0,
        "over_requested": int(slices["over_requested"].sum()) if len(slices) else 0,
        "oom_risk": int(slices["oom_risk"].sum()) if len(slices) else 0,
        "idle": int(slices["idle"].sum()) if len(slices) else 0,
    }


def build_plan(con, month: str, headroom: float = 0.2, prices=None, *, currency: str = "USD",
               thresholds: Thresholds = Thresholds(), budget_s: float = 1.0,
               keep: str = "nodes") -> Plan:
    """The plan for `month` ('YYYY-MM'). `prices`: {model: Decimal per GPU-hour} (then
    `currency` names the currency) or a catalog object with .gpu_hour and .currency.
    `budget_s` bounds the local search across all groups (greedy packing always runs).
    `keep`: "nodes" (free whole nodes) or "gpus" (fewest moves), see _assign_gpus."""
    if keep not in ("nodes", "gpus"):
        raise ValueError(f"keep must be 'nodes' or 'gpus', got {keep!r}")
    start, end, month_hours = month_window(month)
    price_table, cat_currency = _price_table(prices)
    params = {"start": start, "end": end}
    stats = _frame(con, "slices", params)
    gpus = _frame(con, "gpus", params)
    # Slices on a GPU without a gpu_hour row still get the GPU's place from slice_hour;
    # their capacity is unknown, so fall back to the largest memory seen for that GPU.
    if len(stats) and stats["memory_total_bytes"].isna().any():
        fallback = stats.groupby("gpu_uuid")[["alloc_memory_bytes", "mem_max"]].max().max(axis=1)
        stats["memory_total_bytes"] = stats["memory_total_bytes"].fillna(stats["gpu_uuid"].map(fallback))
    fallback_total = stats.groupby("gpu_uuid")["memory_total_bytes"].max() if len(stats) else None
    if fallback_total is not None:
        gpus["memory_total_bytes"] = gpus["memory_total_bytes"].fillna(gpus["gpu_uuid"].map(fallback_total))
    slices = recommend_slices(stats, headroom, thresholds)
    slices["current"] = mark_current(slices).to_numpy(dtype=bool)
    recurring = recurring_demands(con, slices, gpus, params, headroom)
    t0 = time.perf_counter()
    slices, placement, groups = consolidate(slices, gpus, headroom, budget_s, keep, recurring)
    summary = summarize(slices, placement, groups, month_hours, price_table,
                        cat_currency or currency)
    summary["plan_seconds"] = time.perf_counter() - t0
    if price_table:
        placement["price_gpu_hour"] = placement["model"].map(price_table)
    return Plan(month, headroom, slices, placement, groups, summary)


# The current month's plan as ingest serves it (docs/metrics.md, "Ingest")
RECOMMEND_METRICS = {
    "slicemeter_recommend_freeable_gpus": Family(
        "GPUs the current month's consolidation plan frees", (), lambda s: s["gpus_freeable"]),
    "slicemeter_recommend_monthly_saving": Family(
        "Monthly saving of the current month's plan at catalog prices", ("currency",),
        lambda s: s["monthly_saving"] if s.get("currency") else None),
}


def headline_metrics(plan: Plan) -> Samples:
    """RECOMMEND_METRICS' samples of `plan`."""
    return samples(RECOMMEND_METRICS, [({"currency": plan.summary.get("currency") or ""}, plan.summary)])
