"""Row builders for the recommend tests: write slice_hour / gpu_hour rows straight into a
real DuckDB store (the ingest contract), so the recommend tests choose exact rollups without
running ingest."""
from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from slicemeter.store import transaction
from slicemeter.common import GiB

A100 = ("NVIDIA A100-SXM4-80GB", 81920 * 1024 * 1024)
L4 = ("NVIDIA L4", 23034 * 1024 * 1024)
NOV = datetime(2026, 11, 1)


def hour(h: int, base: datetime = NOV) -> datetime:
    return base + timedelta(hours=h)


def add_tenant(con, tenant: str, api_server: str) -> None:
    con.execute("INSERT INTO tenants (tenant, display_name, api_server) VALUES (?, ?, ?)",
                [tenant, tenant.upper(), api_server])


def add_gpu_hours(con, cluster, node, gpu_uuid, model, hours, metered_s=3600.0) -> None:
    name, total = model
    con.executemany(
        "INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, "
        "metered_s, sample_count) VALUES (?, ?, ?, ?, ?, ?, ?, 360)",
        [[hour(h), cluster, node, gpu_uuid, name, total, metered_s] for h in hours])


def add_slice_hour(con, h, cluster, node, gpu_uuid, pod_uid, *, total, mem_peak, sm_mean,
                   mem_mean=None, sm_max=None, alloc_mem=None, alloc_cores=None,
                   whole=False, age=5.0, metered_s=3600.0, namespace="ns",
                   container="main", when=None) -> None:
    """One hour of one slice. mem_peak None stores no hourly peak (the mean is used)."""
    mem_mean = mem_peak * 0.8 if mem_mean is None else mem_mean
    alloc_mem = total if (whole and alloc_mem is None) else alloc_mem
    alloc_cores = 1.0 if (whole and alloc_cores is None) else alloc_cores
    am, ac = (alloc_mem or 0) / total, alloc_cores or 0.0
    um = mem_mean / total
    con.execute(
        """INSERT INTO slice_hour (hour, cluster, node, gpu_uuid, namespace, pod, pod_uid,
            container, whole_gpu, metered_s, sample_count, alloc_memory_bytes,
            alloc_cores_ratio, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s,
            used_mem_share_s, used_sm_share_s, usage_share_s, memory_used_byte_s,
            memory_used_max_bytes, sm_util_max, hami_nvml_disagree_s, last_kernel_age_s,
            latest_ts_ms)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 360, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 0)""",
        [when or hour(h), cluster, node, gpu_uuid, namespace, "pod-" + pod_uid, pod_uid,
         container, whole, metered_s, alloc_mem, alloc_cores, am * metered_s,
         ac * metered_s, max(am, ac) * metered_s, um * metered_s, sm_mean * metered_s,
         max(um, sm_mean) * metered_s, mem_mean * metered_s,
         None if mem_peak is None else int(mem_peak), sm_max, age])


# A small fleet whose optimum is known by construction (test_recommend_plan explains it).
A, B = "https://acme.example:6443", "https://beta.example:6443"
PRICES = {"NVIDIA A100-SXM4-80GB": Decimal("2.40"), "NVIDIA L4": Decimal("0.80")}
HOURS = range(24)

# (cluster, node, gpu, model)
GPUS = [(A, "a-0", "a0-0", A100), (A, "a-0", "a0-1", A100), (A, "a-1", "a1-0", A100),
        (A, "a-1", "a1-1", A100), (A, "a-2", "l4-0", L4),
        (B, "b-0", "b0-0", A100), (B, "b-0", "b0-1", A100), (B, "b-0", "b0-2", A100)]
# (pod_uid, gpu, share of memory and SM, whole GPU)
SLICES = [("s1", "a0-0", 0.2, False), ("s2", "a0-1", 0.2, False), ("s3", "a1-0", 0.2, False),
          ("s4", "a1-0", 0.2, False), ("w", "a1-1", 0.05, True), ("l", "l4-0", 0.1, False),
          ("b1", "b0-0", 0.3, False), ("b2", "b0-1", 0.3, False)]


def build_fleet(con):
    with transaction(con):   # one commit: row-by-row commits to a file are slow
        add_tenant(con, "acme", A)
        add_tenant(con, "beta", B)
        where = {g: (c, n, m) for c, n, g, m in GPUS}
        for c, n, g, m in GPUS:
            add_gpu_hours(con, c, n, g, m, HOURS)
        for uid, g, share, whole in SLICES:
            c, n, (_, total) = where[g]
            for h in HOURS:
                add_slice_hour(con, h, c, n, g, uid, total=total, mem_peak=share * total,
                               sm_mean=share, alloc_mem=int(0.5 * total), alloc_cores=0.5,
                               whole=whole)
