"""A small synthetic Tick-table generator for ingest tests and the ingest bench.

Columnar (numpy), deterministic per seed, in slicemeter.tick's GPU_SCHEMA / SLICE_SCHEMA.
It stands in for slicemeter.simulator.timetravel.generate where the tests need exact control
(late Ticks, a known sample count) and no scenario file.
"""
from __future__ import annotations

import time
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from slicemeter.tick import GPU_SCHEMA, SLICE_SCHEMA, table_with_nulls
from slicemeter.common import GiB

MODELS = [("NVIDIA A100-SXM4-80GB", 81920), ("NVIDIA L4", 23034)]


def recent_midnight_ms(days_ago: int = 3) -> int:
    """A UTC midnight a few days back: ingest refuses samples far from its own clock."""
    return (time.time_ns() // 1_000_000 // 86_400_000 - days_ago) * 86_400_000


def recent_start_ms(ticks: int, interval_ms: int = 10_000) -> int:
    """A whole minute early enough that `ticks` Ticks end an hour before now."""
    return (time.time_ns() // 1_000_000 - ticks * interval_ms - 3_600_000) // 60_000 * 60_000


@dataclass(frozen=True)
class SynthNode:
    node: str
    cluster: str
    gpus: int = 4
    slices_per_gpu: int = 4
    model_index: int = 0

    @property
    def samples_per_tick(self) -> int:
        return self.gpus * (1 + self.slices_per_gpu)

    def gpu_uuid(self, g: int) -> str:
        return f"GPU-{zlib.crc32(f'{self.node}/{g}'.encode()):08x}-{self.node}-{g}"


def _dict(values: list[str], indices: np.ndarray) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices.astype(np.int32)), pa.array(values, pa.string()))


def node_tables(node: SynthNode, ts_ms: np.ndarray, interval_ms: int = 10_000, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    """GPU and slice rows of `node` at every timestamp in ts_ms (one Tick per timestamp)."""
    rng = np.random.default_rng(seed)
    ts_ms = np.asarray(ts_ms, dtype=np.int64)
    t, g, s = len(ts_ms), node.gpus, node.slices_per_gpu
    model, mem_mib = MODELS[node.model_index % len(MODELS)]
    mem_total = mem_mib * (1 << 20)
    uuids = [node.gpu_uuid(i) for i in range(g)]

    n = t * g
    gpu_idx = np.tile(np.arange(g), t)
    gts = np.repeat(ts_ms, g)
    energy = gts / 1000.0 * 150.0 + gpu_idx * 1e6  # 150 W since the epoch: a monotone counter
    gpus = table_with_nulls(
        GPU_SCHEMA,
        {
            "ts_ms": pa.array(gts),
            "interval_ms": pa.array(np.full(n, interval_ms, np.int32)),
            "node": _dict([node.node], np.zeros(n)),
            "cluster": _dict([node.cluster], np.zeros(n)),
            "gpu_uuid": _dict(uuids, gpu_idx),
            "gpu_index": pa.array(gpu_idx.astype(np.int16)),
            "model": _dict([model], np.zeros(n)),
            "memory_total_bytes": pa.array(np.full(n, mem_total, np.int64)),
            "memory_used_bytes": pa.array(rng.integers(0, mem_total, n, dtype=np.int64)),
            "sm_util_ratio": pa.array(rng.random(n, dtype=np.float32)),
            "mem_util_ratio": pa.array(rng.random(n, dtype=np.float32)),
            "power_watts": pa.array(np.full(n, 150.0, np.float32)),
            "energy_joules": pa.array(energy),
            "slice_count": pa.array(np.full(n, s, np.int16)),
        },
        n,
    )

    m = t * g * s
    slot = np.tile(np.arange(g * s), t)  # slice slot = gpu * s + k
    sgpu = slot // s
    pods = [f"pod-{node.node}-{i}" for i in range(g * s)]
    uids = [f"uid-{node.node}-{i:04d}" for i in range(g * s)]
    namespaces = ["team-a", "team-b", "shared-tools"]
    whole = (slot % s == 0) & (s == 1)
    alloc_mem = np.where(whole, mem_total, mem_total // (s + 1)).astype(np.int64)
    hami_used = (alloc_mem * rng.random(m) * 0.9).astype(np.int64)
    # every 7th sample HAMi under-reports: NVML's figure must win there
    nvml_used = np.where(rng.integers(0, 7, m) == 0, hami_used + 4 * GiB, hami_used).astype(np.int64)
    slices = table_with_nulls(
        SLICE_SCHEMA,
        {
            "ts_ms": pa.array(np.repeat(ts_ms, g * s)),
            "interval_ms": pa.array(np.full(m, interval_ms, np.int32)),
            "node": _dict([node.node], np.zeros(m)),
            "cluster": _dict([node.cluster], np.zeros(m)),
            "pod_uid": _dict(uids, slot),
            "pod": _dict(pods, slot),
            "namespace": _dict(namespaces, slot % 3),
            "container": _dict(["main"], np.zeros(m)),
            "gpu_uuid": _dict(uuids, sgpu),
            "vdevice_index": pa.array(np.zeros(m, np.int16)),
            "hami_memory_limit_bytes": pa.array(alloc_mem),
            "hami_memory_used_bytes": pa.array(hami_used),
            "hami_context_bytes": pa.array(np.full(m, 300 << 20, np.int64)),
            "hami_module_bytes": pa.array(np.full(m, 100 << 20, np.int64)),
            "hami_buffer_bytes": pa.array(np.maximum(hami_used - (400 << 20), 0)),
            "sm_limit_ratio": pa.array(np.full(m, 1.0 / (s + 1), np.float32)),
            "sm_util_ratio": pa.array((rng.random(m) / (s + 1)).astype(np.float32)),
            "last_kernel_age_s": pa.array(rng.random(m).astype(np.float32) * 5),
            "process_count": pa.array(np.ones(m, np.int16)),
            "nvml_memory_used_bytes": pa.array(nvml_used),
            "alloc_memory_bytes": pa.array(alloc_mem),
            "alloc_cores_ratio": pa.array(np.full(m, 1.0 / (s + 1), np.float32)),
            "whole_gpu": pa.array(whole),
            "source": _dict(["hami"], np.zeros(m)),
            "usage_verified": pa.array(slot % 11 != 0),   # some slices' usage went unchecked
        },
        m,
    )
    return gpus, slices


def fleet(n_nodes: int, clusters: list[str], gpus: int = 4, slices_per_gpu: int = 4) -> list[SynthNode]:
    return [
        SynthNode(node=f"gpu-node-{i}", cluster=clusters[i % len(clusters)], gpus=gpus,
                  slices_per_gpu=slices_per_gpu, model_index=i)
        for i in range(n_nodes)
    ]


def messages(nodes: list[SynthNode], start_ms: int, ticks: int, ticks_per_message: int,
             interval_ms: int = 10_000, seed: int = 0):
    """Yield (node_name, gpu_table, slice_table) chunks, node by node, time-ordered per node."""
    for k, node in enumerate(nodes):
        for first in range(0, ticks, ticks_per_message):
            count = min(ticks_per_message, ticks - first)
            ts = start_ms + (first + np.arange(count)) * interval_ms
            yield node.node, *node_tables(node, ts, interval_ms, seed=seed * 1_000_003 + k * 7919 + first)
