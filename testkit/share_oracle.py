"""The slice shares of each hour worked out in Python from the raw samples, straight from
the contract in sql/schema/001_contract.sql, sharing no SQL with the rollups it checks: a
wrong formula in the rollup SQL (or in a macro it calls) shows as a difference."""
from __future__ import annotations

import numpy as np
import pandas as pd

KEYS = ["hour", "gpu_uuid", "pod_uid", "container"]
SHARE_COLUMNS = ["alloc_mem_share_s", "alloc_cores_share_s", "alloc_dominant_share_s", "used_mem_share_s",
                 "used_sm_share_s", "usage_share_s", "memory_used_byte_s", "memory_used_max_bytes",
                 "hami_nvml_disagree_s", "usage_unverified_s", "usage_unknown_s"]
# HAMi's self-reported memory is trusted unless it is off from NVML's by more than this
DISAGREE_BYTES = 128 << 20
DISAGREE_RATIO = 0.05


def _share(x: pd.Series, whole: pd.Series) -> np.ndarray:
    """x clipped to [0, 1], missing as 0; a whole-GPU slice holds the whole GPU (1)."""
    return np.where(whole, 1.0, np.clip(x.astype(float).fillna(0.0).to_numpy(), 0.0, 1.0))


def raw_slice_samples(con) -> pd.DataFrame:
    """Every retained slice sample with its GPU's memory size (plain columns, no formula)."""
    return con.execute(
        "SELECT r.*, i.memory_total_bytes FROM raw_slice r LEFT JOIN gpu_inventory_named i USING (gpu_uuid)").df()


def slice_shares(raw: pd.DataFrame) -> pd.DataFrame:
    """Per slice-hour the share sums of the contract, from `raw_slice_samples` rows."""
    r = raw
    dt = r["interval_ms"].astype(float) / 1000.0
    whole = r["whole_gpu"].fillna(False).astype(bool).to_numpy()
    total = r["memory_total_bytes"].astype(float)
    hami, nvml = r["hami_memory_used_bytes"].astype(float), r["nvml_memory_used_bytes"].astype(float)
    disagree = ((hami - nvml).abs() > np.maximum(DISAGREE_BYTES, DISAGREE_RATIO * nvml)).fillna(False).to_numpy()
    trusted = np.where(hami.isna() | disagree, nvml, hami)
    granted_mem = r["alloc_memory_bytes"].astype(float).fillna(r["hami_memory_limit_bytes"].astype(float))
    limit = r["sm_limit_ratio"].astype(float)
    # HAMi-core writes a 100 % sm_limit for a pod without a core limit: only 0 < x < 1 limits
    granted_cores = r["alloc_cores_ratio"].astype(float).fillna(limit.where((limit > 0) & (limit < 1)))
    # a DRA slice's Tick sends its shares after the claim's split: those are its grant
    granted_mem_share = r["alloc_mem_share_ratio"].astype(float).fillna(granted_mem / total)
    granted_cores = r["alloc_cores_share_ratio"].astype(float).fillna(granted_cores)
    a_mem, a_cores = _share(granted_mem_share, whole), _share(granted_cores, whole)
    u_mem = _share(pd.Series(trusted, index=r.index) / total, np.zeros(len(r), bool))
    u_sm = _share(r["sm_util_ratio"], np.zeros(len(r), bool))
    unknown = (hami.isna() & nvml.isna() & r["sm_util_ratio"].isna()).to_numpy(bool)   # no reading at all
    unverified = (r["usage_verified"].astype("boolean") == False).fillna(False).to_numpy(bool)   # noqa: E712 (null: unknown)
    per_sample = pd.DataFrame({
        "hour": pd.to_datetime(r["ts_ms"] // 3_600_000 * 3_600_000, unit="ms"),
        "gpu_uuid": r["gpu_uuid"], "pod_uid": r["pod_uid"], "container": r["container"],
        "alloc_mem_share_s": a_mem * dt, "alloc_cores_share_s": a_cores * dt,
        "alloc_dominant_share_s": np.maximum(a_mem, a_cores) * dt,
        "used_mem_share_s": u_mem * dt, "used_sm_share_s": u_sm * dt, "usage_share_s": np.maximum(u_mem, u_sm) * dt,
        "memory_used_byte_s": trusted * dt, "memory_used_max_bytes": trusted,
        "hami_nvml_disagree_s": np.where(disagree, dt, 0.0),
        "usage_unverified_s": np.where(unverified, dt, 0.0),
        "usage_unknown_s": np.where(unknown, dt, 0.0),
    })
    # a slice-hour without any memory reading has no memory figure (SQL's sum of nulls)
    sums = {c: "sum" for c in SHARE_COLUMNS} | {"memory_used_max_bytes": "max",
                                                "memory_used_byte_s": lambda x: x.sum(min_count=1)}
    return per_sample.groupby(KEYS, as_index=False).agg(sums).sort_values(KEYS).reset_index(drop=True)


def disagreements(con, rollup: pd.DataFrame | None = None) -> pd.DataFrame:
    """The slice_hour rows (or `rollup`'s) whose shares differ from the oracle's (rtol 1e-9)."""
    got = rollup if rollup is not None else con.execute(f"SELECT {', '.join(KEYS + SHARE_COLUMNS)} FROM slice_hour").df()
    want = slice_shares(raw_slice_samples(con))
    both = want.merge(got, on=KEYS, how="outer", suffixes=("_want", "_got"), indicator=True)
    bad = both["_merge"] != "both"
    for c in SHARE_COLUMNS:
        w, g = both[f"{c}_want"].astype(float), both[f"{c}_got"].astype(float)
        bad |= ~np.isclose(w.fillna(-1), g.fillna(-1), rtol=1e-9, atol=1e-9)
    return both[bad]
