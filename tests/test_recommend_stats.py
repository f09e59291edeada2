"""Percentiles, recommendations and flags of slicemeter.rightsizing.plan against SQL written here,
independently of sql/rightsizing/slices.sql (nearest rank by row_number, flags as
plain comparisons), on a real DuckDB file."""
from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest

from slicemeter.common import month_window
from slicemeter.rightsizing.plan import Thresholds, build_plan
from slicemeter.store import connect
from slicemeter.testkit.recommend_rows import A100, GiB, add_gpu_hours, add_slice_hour, add_tenant, hour

CLUSTER = "https://acme.example:6443"

# Nearest-rank percentile: the value at rank ceil(q * n) of the sorted hourly values.
EXPECTED_SQL = """
WITH h AS (
    SELECT pod_uid,
           CASE WHEN memory_used_max_bytes IS NULL THEN memory_used_byte_s / metered_s
                ELSE memory_used_max_bytes END AS mem,
           used_sm_share_s / metered_s AS sm,
           CASE WHEN sm_util_max IS NULL THEN used_sm_share_s / metered_s
                ELSE sm_util_max END AS smx
    FROM slice_hour
    WHERE hour >= TIMESTAMP '2026-11-01' AND hour < TIMESTAMP '2026-12-01' AND metered_s > 0
),
rm AS (SELECT pod_uid, mem, row_number() OVER (PARTITION BY pod_uid ORDER BY mem) AS r,
              count(*) OVER (PARTITION BY pod_uid) AS n FROM h),
rs AS (SELECT pod_uid, sm, row_number() OVER (PARTITION BY pod_uid ORDER BY sm) AS r,
              count(*) OVER (PARTITION BY pod_uid) AS n FROM h)
SELECT m.pod_uid,
  max(CASE WHEN m.r = ceil(0.50 * m.n) THEN m.mem END) AS mem_p50,
  max(CASE WHEN m.r = ceil(0.95 * m.n) THEN m.mem END) AS mem_p95,
  max(CASE WHEN m.r = ceil(0.99 * m.n) THEN m.mem END) AS mem_p99,
  max(m.mem) AS mem_max,
  (SELECT max(CASE WHEN s.r = ceil(0.50 * s.n) THEN s.sm END) FROM rs s WHERE s.pod_uid = m.pod_uid) AS sm_p50,
  (SELECT max(CASE WHEN s.r = ceil(0.95 * s.n) THEN s.sm END) FROM rs s WHERE s.pod_uid = m.pod_uid) AS sm_p95,
  (SELECT max(CASE WHEN s.r = ceil(0.99 * s.n) THEN s.sm END) FROM rs s WHERE s.pod_uid = m.pod_uid) AS sm_p99,
  (SELECT max(smx) FROM h WHERE h.pod_uid = m.pod_uid) AS sm_max,
  count(*) AS hours
FROM rm m GROUP BY m.pod_uid
"""


@pytest.fixture
def store(tmp_path):
    con = connect(tmp_path / "rec.duckdb")
    yield con
    con.close()


def _fill(con, seed=7):
    """Eight slices with random hourly use; the last hour's grant and kernel age decide
    the flags. Returns {pod_uid: (grant_mem, grant_cores, last_age)}."""
    rng = random.Random(seed)
    con.execute("BEGIN TRANSACTION")   # one commit: row-by-row commits to a file are slow
    add_tenant(con, "acme", CLUSTER)
    total = A100[1]
    grants = {}
    for s in range(8):
        gpu = f"GPU-{s // 2}"
        n_hours = rng.choice([1, 3, 17, 40, 101, 150])
        base_mem = rng.uniform(0.5, 20) * GiB
        base_sm = rng.uniform(0.0, 0.4) if s != 5 else 0.002   # slice 5: near-idle
        if s == 6:
            base_mem = 19 * GiB                                  # slice 6: OOM risk
        for h in range(n_hours):
            peak = None if (s == 3 and h % 4 == 0) else base_mem * rng.uniform(0.6, 1.0)
            add_slice_hour(con, h, CLUSTER, f"node-{s // 4}", gpu, f"uid-{s}", total=total,
                           mem_peak=peak, mem_mean=base_mem * rng.uniform(0.3, 0.6),
                           sm_mean=base_sm * rng.uniform(0.2, 1.0),
                           sm_max=None if s == 2 else min(1.0, base_sm * 1.5),
                           alloc_mem=20 * GiB, alloc_cores=[0.5, 0.3, 0.1, 0.0][s % 4],
                           metered_s=rng.choice([600.0, 1800.0, 3600.0]),
                           age=None if s == 7 else (float(h) if s != 4 else 90000.0 + h))
        grants[f"uid-{s}"] = (20 * GiB, [0.5, 0.3, 0.1, 0.0][s % 4])
    for g in range(4):
        add_gpu_hours(con, CLUSTER, f"node-{g // 2}", f"GPU-{g}", A100, range(150))
    # Outside the window: must not count.
    add_slice_hour(con, 0, CLUSTER, "node-0", "GPU-0", "uid-0", total=total,
                   mem_peak=79 * GiB, sm_mean=1.0, alloc_mem=20 * GiB, alloc_cores=0.5,
                   when=hour(0) - timedelta(hours=1))
    con.execute("COMMIT")
    return grants


def test_percentiles_match_independent_sql(store):
    _fill(store)
    plan = build_plan(store, "2026-11", headroom=0.0)
    got = plan.slices.set_index("pod_uid")
    want = store.execute(EXPECTED_SQL).df().set_index("pod_uid")
    assert sorted(got.index) == sorted(want.index) and len(want) == 8
    for col in ["mem_p50", "mem_p95", "mem_p99", "mem_max", "sm_p50", "sm_p95", "sm_p99",
                "sm_max", "hours"]:
        for uid in want.index:
            assert got.loc[uid, col] == pytest.approx(want.loc[uid, col], rel=1e-9), (uid, col)
    # The distribution is not degenerate: p50 < p99 for some slice (the test could fail).
    assert (want["mem_p50"] < want["mem_p99"]).any()


def test_recommendations_and_flags_match_independent_sql(store):
    _fill(store)
    headroom = 0.25
    t = Thresholds()
    plan = build_plan(store, "2026-11", headroom=headroom, thresholds=t)
    got = plan.slices.set_index("pod_uid")
    want = store.execute(f"""
        WITH e AS ({EXPECTED_SQL}),
        last AS (SELECT pod_uid, arg_max(alloc_memory_bytes, hour) AS am,
                        arg_max(alloc_cores_ratio, hour) AS ac,
                        arg_max(last_kernel_age_s, hour) AS age
                 FROM slice_hour WHERE hour >= TIMESTAMP '2026-11-01' GROUP BY pod_uid)
        SELECT e.pod_uid,
          greatest(1, ceil(e.mem_p99 * {1 + headroom} / 1048576 - 1e-9))::BIGINT AS gpumem,
          least(100, greatest(1, ceil(e.sm_p99 * {1 + headroom} * 100 - 1e-9)))::BIGINT AS gpucores,
          (l.am > 2 * e.mem_p99) OR (l.ac > 0 AND l.ac > 2 * e.sm_p99) AS over_requested,
          e.mem_p99 > 0.9 * l.am AS oom_risk,
          coalesce(l.age >= 86400, false) OR e.sm_p99 < 0.01 AS idle, e.sm_p99
        FROM e JOIN last l USING (pod_uid)""").df().set_index("pod_uid")
    for uid in want.index:
        assert got.loc[uid, "recommended_gpumem_mib"] == want.loc[uid, "gpumem"], uid
        assert got.loc[uid, "recommended_gpucores_pct"] == want.loc[uid, "gpucores"], uid
        for flag in ["over_requested", "oom_risk", "idle"]:
            assert bool(got.loc[uid, flag]) == bool(want.loc[uid, flag]), (uid, flag)
    # Each flag is exercised both ways by the data above.
    for flag in ["over_requested", "oom_risk", "idle"]:
        assert want[flag].any() and not want[flag].all(), flag
    assert bool(got.loc["uid-6", "oom_risk"]) and bool(got.loc["uid-5", "idle"])
    assert bool(got.loc["uid-4", "idle"])              # no kernel for 25 h
    # no kernel age at all decides nothing by itself: SM use does
    assert math.isnan(got.loc["uid-7", "last_kernel_age_s"])
    assert bool(got.loc["uid-7", "idle"]) == bool(want.loc["uid-7", "sm_p99"] < 0.01)


def test_headroom_scales_recommendation(store):
    total = A100[1]
    add_gpu_hours(store, CLUSTER, "n", "GPU-0", A100, range(10))
    for h in range(10):
        add_slice_hour(store, h, CLUSTER, "n", "GPU-0", "u", total=total,
                       mem_peak=1000 * 1048576, sm_mean=0.2, alloc_mem=4000 * 1048576,
                       alloc_cores=0.5)
    r0 = build_plan(store, "2026-11", headroom=0.0).slices.iloc[0]
    r5 = build_plan(store, "2026-11", headroom=0.5).slices.iloc[0]
    assert (r0["recommended_gpumem_mib"], r0["recommended_gpucores_pct"]) == (1000, 20)
    assert (r5["recommended_gpumem_mib"], r5["recommended_gpucores_pct"]) == (1500, 30)
    assert bool(r0["over_requested"]) and r0["tenant"] == "unassigned"


def test_namespace_override_sets_tenant(store):
    add_tenant(store, "acme", CLUSTER)
    store.execute("INSERT INTO tenant_namespace_overrides VALUES (?, 'shared-tools', 'platform')",
                  [CLUSTER])
    add_gpu_hours(store, CLUSTER, "n", "GPU-0", A100, range(2))
    for ns in ("shared-tools", "ml"):
        add_slice_hour(store, 0, CLUSTER, "n", "GPU-0", ns, total=A100[1], mem_peak=GiB,
                       sm_mean=0.1, alloc_mem=2 * GiB, alloc_cores=0.2, namespace=ns)
    got = build_plan(store, "2026-11").slices.set_index("pod_uid")["tenant"].to_dict()
    assert got == {"shared-tools": "platform", "ml": "acme"}


@pytest.mark.parametrize("bad", ["2026-13", "2026-1", "nov", "2026-11; DROP TABLE x"])
def test_bad_month_is_named(bad):
    with pytest.raises(ValueError, match="YYYY-MM"):
        month_window(bad)


def test_month_window_hours():
    assert month_window("2026-11")[2] == 720
    assert month_window("2026-12")[1].year == 2027
    assert month_window("2028-02")[2] == 29 * 24


def test_grant_falls_back_to_stored_share(store):
    """No annotation grant (alloc_* NULL): the grant is the allocation share ingest stored
    (from HAMi's own limit) times the GPU's memory, so the flags still work."""
    add_gpu_hours(store, CLUSTER, "n", "GPU-0", A100, range(3))
    for h in range(3):
        add_slice_hour(store, h, CLUSTER, "n", "GPU-0", "u", total=A100[1], mem_peak=GiB,
                       sm_mean=0.05, alloc_mem=8 * GiB, alloc_cores=0.4)
    store.execute("UPDATE slice_hour SET alloc_memory_bytes = NULL, alloc_cores_ratio = NULL")
    row = build_plan(store, "2026-11").slices.iloc[0]
    assert row["grant_memory_mib"] == 8 * 1024 and row["grant_cores_pct"] == pytest.approx(40.0)
    assert bool(row["over_requested"])
