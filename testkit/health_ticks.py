"""Ticks of a small fleet with one GPU fault, for the health tests: GPU rows carry the Tick
1.2 health columns as an exporter sends them; `fault` (GPU, hour) -> GpuReading fields set
on that GPU's Ticks in that hour."""
from __future__ import annotations

from dataclasses import dataclass, field

from slicemeter.tick import GpuReading, SliceReading, Tick, encode_ticks

A100 = "NVIDIA A100-SXM4-80GB"
A100_BYTES = 80 << 30
ACME = "https://acme.health.example:6443"
GLOBEX = "https://globex.health.example:6443"
NOV_2 = 1_793_577_600_000          # 2026-11-02 00:00 UTC
HOUR_MS = 3_600_000
TENANTS_YAML = f"""
tenants:
  - {{name: acme, display_name: ACME, kamaji: {{namespace: t-acme, name: acme}}, api_server: "{ACME}"}}
  - {{name: globex, display_name: Globex, kamaji: {{namespace: t-globex, name: globex}}, api_server: "{GLOBEX}"}}
"""


@dataclass(frozen=True)
class Slot:
    """A slice: its pod on a GPU, granted `share` of its memory and cores."""
    pod: str
    namespace: str
    gpu: str
    share: float


@dataclass(frozen=True)
class Node:
    name: str
    cluster: str
    gpus: tuple[str, ...]
    slots: tuple[Slot, ...] = ()


FLEET = (
    Node("gpu-node-1", ACME, ("GPU-A", "GPU-A2"), (Slot("train", "ml", "GPU-A", 0.5), Slot("nb", "ml", "GPU-A2", 0.25))),
    Node("gpu-node-2", GLOBEX, ("GPU-B",), (Slot("serve", "web", "GPU-B", 0.5),)),
)


@dataclass
class Plan:
    """Ticks every `interval_ms` over `hours` hours from `start_ms`; `faults[(gpu, hour)]`
    (hour: index from the start) and `per_tick(gpu, ts_ms) -> dict` set health fields."""
    hours: int = 3
    start_ms: int = NOV_2 + 9 * HOUR_MS
    interval_ms: int = 60_000
    faults: dict[tuple[str, int], dict] = field(default_factory=dict)
    per_tick: object = None
    fleet: tuple[Node, ...] = FLEET


def healthy(ts_ms: int) -> dict:
    """What a healthy A100 reports: warm, no errors, not throttled."""
    return {"temperature_celsius": 55.0, "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0,
            "clock_event_reasons": 0, "xid_events": 0, "gpu_lost": False}


def ticks(plan: Plan) -> list[Tick]:
    out = []
    steps = plan.hours * HOUR_MS // plan.interval_ms
    for node in plan.fleet:
        for k in range(steps):
            ts = plan.start_ms + k * plan.interval_ms
            hour = (ts - plan.start_ms) // HOUR_MS
            t = Tick(node=node.name, cluster=node.cluster, ts_ms=ts, interval_ms=plan.interval_ms)
            for i, g in enumerate(node.gpus):
                health = healthy(ts) | plan.faults.get((g, hour), {})
                if plan.per_tick is not None:
                    health |= plan.per_tick(g, ts)
                t.gpus.append(GpuReading(gpu_uuid=g, gpu_index=i, model=A100, memory_total_bytes=A100_BYTES,
                                         memory_used_bytes=A100_BYTES // 4, sm_util_ratio=0.3, power_watts=200.0,
                                         slice_count=sum(s.gpu == g for s in node.slots), **health))
            for s in node.slots:
                t.slices.append(SliceReading(pod_uid=f"uid-{s.pod}", container="main", gpu_uuid=s.gpu, pod=s.pod,
                                             namespace=s.namespace, alloc_memory_bytes=int(A100_BYTES * s.share),
                                             alloc_cores_ratio=s.share, whole_gpu=False, sm_util_ratio=0.2,
                                             hami_memory_used_bytes=A100_BYTES // 10,
                                             nvml_memory_used_bytes=A100_BYTES // 10, source="hami"))
            out.append(t)
    return out


def messages(plan: Plan, ticks_per_message: int = 30) -> list[tuple[bytes, bytes]]:
    """(key, payload) Kafka records: each node's Ticks, `ticks_per_message` to a message."""
    by_node: dict[str, list[Tick]] = {}
    for t in ticks(plan):
        by_node.setdefault(t.node, []).append(t)
    out = []
    for node, ts in by_node.items():
        for i in range(0, len(ts), ticks_per_message):
            out.append((node.encode(), encode_ticks(ts[i:i + ticks_per_message])))
    return out
