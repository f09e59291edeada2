"""A small generated month of the stored contract (gpu_hour, slice_hour, tenants), written
straight into a real DuckDB file, for dashboard, chargeback and recommend tests.

Three tenants, five nodes, ten GPUs of two models and slices with recognisable patterns:
four 25 % inference pods on one GPU, whole-GPU training, a diurnal service, a nightly batch,
an idle reservation that never runs a kernel, and an hour-long metering gap. Deterministic:
every figure is a formula of the hour, so tests can recompute anything in SQL.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

from slicemeter.store import connect, registered
from slicemeter.common import GiB

MODELS = {
    "NVIDIA A100-SXM4-80GB": 81920 * 1024**2,
    "NVIDIA L4": 23034 * 1024**2,
}
TENANTS = [
    # tenant, display name, api server (= the cluster identity in Ticks), cost centre
    ("acme", "ACME Research", "https://acme.tenants.example:6443", "CC-1001"),
    ("globex", "Globex Inference", "https://globex.tenants.example:6443", "CC-2002"),
    ("initech", "Initech Labs", "https://initech.tenants.example:6443", "CC-3003"),
]
# node -> (tenant, model)
NODES = {
    "gpu-node-1": ("acme", "NVIDIA A100-SXM4-80GB"),
    "gpu-node-2": ("acme", "NVIDIA A100-SXM4-80GB"),
    "gpu-node-3": ("globex", "NVIDIA A100-SXM4-80GB"),
    "gpu-node-4": ("globex", "NVIDIA L4"),
    "gpu-node-5": ("initech", "NVIDIA L4"),
}
GAP_NODE = "gpu-node-5"  # unmetered for GAP_HOURS on the second day
GAP_HOURS = range(30, 33)


@dataclass(frozen=True)
class SliceSpec:
    namespace: str
    pod: str
    container: str
    gpu: int              # GPU index on the node
    mem_share: float      # allocated memory / GPU memory
    cores: float          # allocated SM ratio
    pattern: str          # steady | diurnal | batch | idle | training
    level: float = 0.0    # usage level of the pattern
    whole: bool = False


# node -> slices; a node's two GPUs are index 0 and 1
SLICES: dict[str, list[SliceSpec]] = {
    "gpu-node-1": [
        SliceSpec("llm", "train-llama-0", "trainer", 0, 1.0, 1.0, "training", 0.85, whole=True),
        SliceSpec("notebooks", "jupyter-alice", "notebook", 1, 0.25, 0.25, "idle"),
        SliceSpec("notebooks", "jupyter-bob", "notebook", 1, 0.25, 0.25, "diurnal", 0.15),
    ],
    "gpu-node-2": [
        SliceSpec("search", "embed-0", "server", 0, 0.25, 0.25, "steady", 0.20),
        SliceSpec("search", "embed-1", "server", 0, 0.25, 0.25, "steady", 0.20),
        SliceSpec("search", "embed-2", "server", 0, 0.25, 0.25, "steady", 0.20),
        SliceSpec("search", "embed-3", "server", 0, 0.25, 0.25, "steady", 0.20),
        SliceSpec("etl", "nightly-etl", "worker", 1, 0.5, 0.5, "batch", 0.45),
    ],
    "gpu-node-3": [
        SliceSpec("chat", "chat-api-0", "vllm", 0, 0.5, 0.5, "diurnal", 0.35),
        SliceSpec("chat", "chat-api-1", "vllm", 0, 0.5, 0.5, "diurnal", 0.30),
        SliceSpec("research", "reserved-gpu", "sleep", 1, 1.0, 1.0, "idle", whole=True),
    ],
    "gpu-node-4": [
        SliceSpec("chat", "rerank-0", "server", 0, 0.3, 0.3, "steady", 0.10),
        SliceSpec("vision", "ocr-0", "worker", 1, 0.2, 0.5, "batch", 0.40),
    ],
    "gpu-node-5": [
        SliceSpec("ml", "fine-tune", "trainer", 0, 0.75, 0.6, "training", 0.55),
        SliceSpec("ml", "eval-job", "runner", 1, 0.25, 0.25, "idle"),
        SliceSpec("shared-tools", "grafana-render", "render", 1, 0.1, 0.1, "steady", 0.05),
    ],
}


def gpu_uuid(node: str, index: int) -> str:
    n = int(node.rsplit("-", 1)[1])
    return f"GPU-{n:04d}{index:04d}-5eed-4c0d-a1ce-{n:06d}{index:06d}"


def usage(spec: SliceSpec, h: int) -> float:
    """Usage share of the slice's GPU in hour h of the month (a fraction in [0, 1]).

    Diurnal services grow through the month (+40 % by day 30) so trends have a slope.
    """
    hod = h % 24
    if spec.pattern == "idle":
        return 0.0
    if spec.pattern == "steady":
        return spec.level
    if spec.pattern == "training":
        return spec.level
    if spec.pattern == "diurnal":
        growth = 1.0 + 0.4 * h / (30 * 24)
        return spec.level * growth * (0.5 + 0.5 * math.sin((hod - 6) / 24 * 2 * math.pi)) + 0.01
    if spec.pattern == "batch":
        return spec.level if hod < 6 else 0.01
    raise ValueError(spec.pattern)


def kernel_age_s(spec: SliceSpec, h: int, u: float) -> float | None:
    """Seconds since the slice's last kernel at the end of hour h; None = never ran one."""
    if spec.pattern == "idle":
        return None
    if u > 0.02:
        return 5.0
    if spec.pattern == "batch":  # the batch ran until 06:00
        return 3600.0 * ((h % 24) - 5)
    return 600.0


def fleet(copies: int = 1):
    """(node, base node, tenant, model): the five nodes, repeated `copies` times for benchmarks."""
    for c in range(copies):
        for base, (tenant, model) in NODES.items():
            n = int(base.rsplit("-", 1)[1]) + len(NODES) * c
            yield f"gpu-node-{n}", base, tenant, model


def build_rows(month: str = "2026-11", days: int | None = None,
               copies: int = 1) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    start = datetime.strptime(month + "-01", "%Y-%m-%d")
    nxt = (start + timedelta(days=32)).replace(day=1)
    hours = int((nxt - start).total_seconds() // 3600) if days is None else days * 24
    gpu_rows, slice_rows = [], []
    for node, base, tenant, model in fleet(copies):
        cluster = next(t[2] for t in TENANTS if t[0] == tenant)
        mem_total = MODELS[model]
        for h in range(hours):
            if node == GAP_NODE and h in GAP_HOURS:
                continue
            hour = start + timedelta(hours=h)
            # the last hour of the data is only half metered (the current, open hour)
            metered = 1800.0 if h == hours - 1 else 3600.0
            for g in (0, 1):
                uuid = gpu_uuid(node, g)
                sm_sum = mem_sum = 0.0
                for s in (x for x in SLICES[base] if x.gpu == g):
                    u = usage(s, h)
                    sm = min(1.0, u)
                    mem_used = min(1.0, 0.6 * s.mem_share + 0.4 * u * s.mem_share) if s.pattern != "idle" else 0.02 * s.mem_share
                    usage_share = max(sm, mem_used)
                    sm_sum += sm
                    mem_sum += mem_used
                    alloc_mem = s.mem_share
                    dominant = max(alloc_mem, s.cores)
                    kernel_age = kernel_age_s(s, h, u)
                    slice_rows.append(dict(
                        hour=hour, cluster=cluster, node=node, gpu_uuid=uuid,
                        namespace=s.namespace, pod=s.pod, pod_uid=f"uid-{node}-{s.pod}",
                        container=s.container, whole_gpu=s.whole, metered_s=metered,
                        sample_count=int(metered // 10),
                        alloc_memory_bytes=int(alloc_mem * mem_total), alloc_cores_ratio=s.cores,
                        alloc_mem_share_s=alloc_mem * metered, alloc_cores_share_s=s.cores * metered,
                        alloc_dominant_share_s=dominant * metered,
                        used_mem_share_s=mem_used * metered, used_sm_share_s=sm * metered,
                        usage_share_s=usage_share * metered,
                        memory_used_byte_s=mem_used * mem_total * metered,
                        memory_used_max_bytes=int(mem_used * mem_total * 1.1),
                        sm_util_max=min(1.0, sm * 1.2), hami_nvml_disagree_s=0.0,
                        last_kernel_age_s=kernel_age,
                        latest_ts_ms=int((hour + timedelta(seconds=metered - 10)).timestamp() * 1000),
                    ))
                sm_gpu = min(1.0, sm_sum)
                power_w = 60.0 + 340.0 * sm_gpu if "A100" in model else 20.0 + 52.0 * sm_gpu
                gpu_rows.append(dict(
                    hour=hour, cluster=cluster, node=node, gpu_uuid=uuid, model=model,
                    memory_total_bytes=mem_total, metered_s=metered, sample_count=int(metered // 10),
                    sm_util_s=sm_gpu * metered, memory_used_byte_s=min(1.0, mem_sum) * mem_total * metered,
                    energy_joules=power_w * metered,
                ))
    tenants = pd.DataFrame(
        [dict(tenant=t, display_name=d, tcp_namespace=f"tenant-{t}", tcp_name=t, api_server=a, cost_center=c)
         for t, d, a, c in TENANTS]
    )
    return pd.DataFrame(gpu_rows), pd.DataFrame(slice_rows), tenants


def build_fleet_db(path: str | Path, month: str = "2026-11", days: int | None = None,
                   earlier: tuple[tuple[str, int], ...] = (), copies: int = 1) -> Path:
    """Write the generated month into a new DuckDB file at `path` (schema via slicemeter.store).

    `earlier`: extra (month, days) of history, e.g. (("2026-10", 3),).
    """
    path = Path(path)
    con = connect(path)
    try:
        fill(con, month, days, earlier, copies)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return path


def fill(con, month: str = "2026-11", days: int | None = None, earlier: tuple[tuple[str, int], ...] = (),
         copies: int = 1) -> None:
    """Insert the generated month into the store `con` is connected to (a file or a lake)."""
    gpu, slices, tenants = build_rows(month, days, copies)
    for m, d in earlier:
        g2, s2, _ = build_rows(m, d, copies)
        gpu, slices = pd.concat([g2, gpu], ignore_index=True), pd.concat([s2, slices], ignore_index=True)
    for table, df in (("gpu_hour", gpu), ("slice_hour", slices), ("tenants", tenants)):
        cols = ", ".join(df.columns)
        with registered(con, df_in=df):
            con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM df_in")


# GPUs that add_health_events marks: a critical Xid on two, throttling on a third
XID_GPUS = (gpu_uuid("gpu-node-2", 1), gpu_uuid("gpu-node-4", 0))
THROTTLED_GPU = gpu_uuid("gpu-node-1", 0)


def add_health_events(path: str | Path) -> Path:
    """Health events and unchecked usage in a built fleet's November, as ingest would roll
    them up: Xid 79 (fallen off the bus, critical) in two hours on XID_GPUS, throttling for
    40 minutes of an hour on THROTTLED_GPU (degraded at the default 25 %), and 30 minutes an
    hour of rerank-0's usage NVML could not check on its first two days."""
    con = connect(path)
    try:
        mark_health(con)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return Path(path)


def mark_health(con) -> None:
    """add_health_events' changes on the store `con` is connected to (a file or a lake)."""
    con.execute("""UPDATE gpu_hour SET xid_events = 1, xid_critical_count = 1, xid_critical_code = 79
                   WHERE gpu_uuid IN (?, ?) AND hour IN (TIMESTAMP '2026-11-12 03:00', TIMESTAMP '2026-11-12 04:00')""",
                list(XID_GPUS))
    con.execute("UPDATE gpu_hour SET throttled_s = 2400 WHERE gpu_uuid = ? AND hour = TIMESTAMP '2026-11-20 10:00'",
                [THROTTLED_GPU])
    con.execute("""UPDATE slice_hour SET usage_unverified_s = 1800 WHERE pod = 'rerank-0'
                   AND hour >= TIMESTAMP '2026-11-01' AND hour < TIMESTAMP '2026-11-03'""")
