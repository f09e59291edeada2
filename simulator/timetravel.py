"""Time travel: any span of a scenario as Tick tables, columnar and fast.

    for node, gpus, slices in generate(scenario, start_ms, end_ms, interval_s=10, seed=0):
        ...   # Arrow tables in slicemeter.tick.GPU_SCHEMA / SLICE_SCHEMA, many Ticks each

The values are those SimulatedNode produces for the same scenario, seed and instant
(same workload model, see simulator/workload.py): what the exporter would have read from
NVML and the HAMi regions, plus the pod annotation's allocation. Nodes are evaluated in
groups as (ticks x slices) numpy arrays; one yield is one node over one time chunk
(`chunk_s`, default an hour), chunks in time order, so a backfill can publish in order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from slicemeter.simulator import dra_objects
from slicemeter.simulator import workload as wl
from slicemeter.simulator.faults import health
from slicemeter.common import MiB
from slicemeter.simulator.scenario import Node, Scenario
from slicemeter.tick import GPU_SCHEMA, SLICE_SCHEMA, table_with_nulls

_CELLS_PER_GROUP = 600_000        # ticks x slices evaluated at once (bounds memory)


def _dict_col(indices: np.ndarray, values: list[str] | pa.Array) -> pa.DictionaryArray:
    if not isinstance(values, pa.Array):
        values = pa.array(values, pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), values)


def _codes(values: list[str]) -> tuple[np.ndarray, list[str]]:
    uniq: dict[str, int] = {}
    codes = np.array([uniq.setdefault(v, len(uniq)) for v in values], dtype=np.int32)
    return codes, list(uniq)


@dataclass
class _NodeCols:
    """Per-node constants, computed once per generate() call."""

    node: Node
    s0: int
    s1: int
    g0: int
    g1: int
    # slices
    pod_codes: np.ndarray
    pod_names: list[str]
    uid_codes: np.ndarray
    uids: list[str]
    ns_codes: np.ndarray
    namespaces: list[str]
    ctr_codes: np.ndarray
    ctrs: list[str]
    sgpu_codes: np.ndarray
    vdev: np.ndarray
    limit_bytes: np.ndarray
    sm_limit: np.ndarray
    alloc_cores: np.ndarray
    whole: np.ndarray
    nproc: np.ndarray
    batch_cols: list[int]         # slice columns (node-local) of batch pods
    # DRA (docs/dra.md): claims per slice (-1: the device plugin's), the driver, the shares
    claim_codes: np.ndarray
    claims: list[str]
    claim_uids: list[str]
    driver_codes: np.ndarray      # per slice, -1: the device plugin's
    drivers: list[str]
    mem_share: np.ndarray         # NaN: the device plugin's
    cores_share: np.ndarray
    hami_region: np.ndarray       # per slice: HAMi-core writes its region (device plugin or HAMi's DRA driver)
    nvml_usage: np.ndarray        # per slice: NVML reads its device (an NPU's usage is unknown)
    # gpus
    gpu_uuids: list[str]
    models_codes: np.ndarray
    models: list[str]
    mem_total: np.ndarray
    gpu_nvml: np.ndarray
    gpu_index: np.ndarray         # NVML's index, -1 for a device NVML does not list
    gpu_driver_codes: np.ndarray  # into `drivers`, -1: the device plugin's

    def __post_init__(self) -> None:
        # Arrow dictionaries built once per node, reused by every chunk
        self.d_node = pa.array([self.node.name], pa.string())
        self.d_cluster = pa.array([self.node.cluster], pa.string())
        self.d_ns = pa.array(self.namespaces, pa.string())
        self.d_ctr = pa.array(self.ctrs, pa.string())
        self.d_gpu = pa.array(self.gpu_uuids, pa.string())
        self.d_model = pa.array(self.models, pa.string())
        self.d_driver = pa.array(self.drivers, pa.string())


_D_DRA = pa.array(["hami", "dra"], pa.string())
_D_ANNOTATION_DRA = pa.array(["annotation", "dra"], pa.string())


def _node_cols(model: wl.FleetModel, ni: int, node: Node) -> _NodeCols:
    # slices are sorted by GPU and a node's GPUs are contiguous, so its slices are too
    s0 = int(model.g_start[model.gpu_offset[ni]]) if len(node.gpus) else 0
    s1 = int(model.g_end[model.gpu_offset[ni + 1] - 1]) if len(node.gpus) else 0
    sl = model.slices[s0:s1]
    pod_codes, pod_names = _codes([s.pod.name for s in sl])
    uid_codes, uids = _codes([s.pod.uid for s in sl])
    ns_codes, namespaces = _codes([s.pod.namespace for s in sl])
    ctr_codes, ctrs = _codes([s.container.name for s in sl])
    gpu_uuids = [g.uuid for g in node.gpus]
    models_codes, models = _codes([g.model for g in node.gpus])
    drivers = sorted({g.driver for g in node.gpus if g.driver})
    claim_codes, claim_of = np.full(len(sl), -1, dtype=np.int32), {}
    shares = np.full((len(sl), 2), np.nan)
    for i, s in enumerate(sl):
        if s.container.dra is not None:
            ref = _claim_ref(node, s, s.pod.name, s.pod.uid)
            claim_codes[i] = claim_of.setdefault((ref.claim, ref.uid), len(claim_of))   # a shared claim once
            shares[i] = s.container.dra.shares(node.gpus[s.container.devices[s.vdev]].memory_mib)
    claims, claim_uids = [c for c, _ in claim_of], [u for _, u in claim_of]
    return _NodeCols(
        node=node, s0=s0, s1=s1, g0=int(model.gpu_offset[ni]), g1=int(model.gpu_offset[ni + 1]),
        pod_codes=pod_codes, pod_names=pod_names, uid_codes=uid_codes, uids=uids,
        ns_codes=ns_codes, namespaces=namespaces, ctr_codes=ctr_codes, ctrs=ctrs,
        sgpu_codes=np.array([s.container.devices[s.vdev] for s in sl], dtype=np.int32),
        vdev=np.array([s.vdev for s in sl], dtype=np.int16),
        limit_bytes=np.array([s.container.mem_mib[s.vdev] * MiB for s in sl], dtype=np.int64),
        # the exporter's sm_limit_ratio: a real limit only (HAMi-core writes 100 for none), else null
        sm_limit=np.array([s.container.cores / 100 if 0 < s.container.cores < 100 else np.nan for s in sl],
                          dtype=np.float32),
        alloc_cores=np.array([s.container.cores / 100 for s in sl], dtype=np.float32),
        whole=np.array([s.container.whole_gpu for s in sl], dtype=bool),
        nproc=np.array([len(s.procs) for s in sl], dtype=np.int16),
        batch_cols=[i for i, s in enumerate(sl) if s.pod.batch],
        claim_codes=claim_codes, claims=claims, claim_uids=claim_uids,
        driver_codes=np.array([drivers.index(s.container.dra.driver) if s.container.dra else -1 for s in sl],
                              dtype=np.int32),
        drivers=drivers, mem_share=shares[:, 0], cores_share=shares[:, 1],
        hami_region=np.array([s.container.dra is None or s.container.dra.kind == "hami-core" for s in sl], dtype=bool),
        nvml_usage=np.array([node.gpus[s.container.devices[s.vdev]].nvml for s in sl], dtype=bool),
        gpu_uuids=gpu_uuids, models_codes=models_codes, models=models,
        mem_total=np.array([g.memory_bytes for g in node.gpus], dtype=np.int64),
        gpu_nvml=np.array([g.nvml for g in node.gpus], dtype=bool),
        gpu_index=np.array([g.index if g.nvml else -1 for g in node.gpus], dtype=np.int16),
        gpu_driver_codes=np.array([drivers.index(g.driver) if g.driver else -1 for g in node.gpus], dtype=np.int32),
    )


def _claim_ref(node: Node, s: wl.SliceRef, pod_name: str, pod_uid: str) -> dra_objects.ClaimRef:
    return dra_objects.claim_ref(node.cluster, s.pod.namespace, pod_name, pod_uid, s.container,
                                 s.pod.containers.index(s.container))


def _dict_or_null(codes: np.ndarray, values: pa.Array) -> pa.DictionaryArray:
    """A dictionary column whose code -1 is null (a device-plugin slice has no claim or driver)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=codes < 0), values)


def _groups(nodes: list[Node], ticks: int) -> list[list[Node]]:
    budget = max(1, _CELLS_PER_GROUP // max(ticks, 1))
    groups, cur, cells = [], [], 0
    for n in nodes:
        k = max(1, sum(len(c.devices) for p in n.pods for c in p.containers) + len(n.gpus))
        if cur and cells + k > budget:
            groups.append(cur)
            cur, cells = [], 0
        cur.append(n)
        cells += k
    if cur:
        groups.append(cur)
    return groups


def _gpu_table(nc: _NodeCols, st: wl.FleetState, interval_ms: int) -> pa.Table:
    T, G = len(st.t_ms), nc.g1 - nc.g0
    n = T * G
    cols = slice(nc.g0, nc.g1)
    zeros = np.zeros(n, dtype=np.int32)
    unread = ~np.tile(nc.gpu_nvml, T)     # a device NVML does not list: its identity only

    def reading(values: np.ndarray) -> pa.Array:
        return pa.array(values, mask=unread) if unread.any() else pa.array(values)

    arrays = {
        "ts_ms": pa.array(np.repeat(st.t_ms, G), pa.int64()),
        "interval_ms": pa.array(np.full(n, interval_ms, dtype=np.int32)),
        "node": _dict_col(zeros, nc.d_node),
        "cluster": _dict_col(zeros, nc.d_cluster),
        "gpu_uuid": _dict_col(np.tile(np.arange(G, dtype=np.int32), T), nc.d_gpu),
        "gpu_index": pa.array(np.tile(nc.gpu_index, T)),
        "model": _dict_col(np.tile(nc.models_codes, T), nc.d_model),
        "memory_total_bytes": pa.array(np.tile(nc.mem_total, T)),
        "memory_used_bytes": reading(st.gpu_mem_used_bytes[:, cols].ravel()),
        "sm_util_ratio": reading((st.gpu_sm_pct[:, cols] / 100).astype(np.float32).ravel()),
        "mem_util_ratio": reading((st.gpu_mem_util_pct[:, cols] / 100).astype(np.float32).ravel()),
        "power_watts": reading((st.gpu_power_mw[:, cols] / 1000).astype(np.float32).ravel()),
        "energy_joules": reading(st.gpu_energy_mj[:, cols].ravel() / 1000),
        "slice_count": reading(st.gpu_slices[:, cols].astype(np.int16).ravel()),
    }
    if nc.drivers:
        arrays["driver"] = _dict_or_null(np.tile(nc.gpu_driver_codes, T), nc.d_driver)
    return table_with_nulls(GPU_SCHEMA, {**arrays, **_health_cols(nc, st, interval_ms, unread)}, n)


def _health_cols(nc: _NodeCols, st: wl.FleetState, interval_ms: int, unread: np.ndarray) -> dict[str, pa.Array]:
    """The health columns of a node's GPUs over the chunk (simulator/faults.py), tick-major as
    the GPU table; a lost GPU's rows carry only `gpu_lost` and its Xids, its readings null too;
    a device NVML does not list (`unread`) has no health at all."""
    per_gpu = [health(tuple(f for f in nc.node.faults if f.gpu == k), g.tdp_watts, st.t_ms,
                      st.gpu_power_mw[:, nc.g0 + k], st.gpu_sm_pct[:, nc.g0 + k], interval_ms)
               for k, g in enumerate(nc.node.gpus)]

    def col(name: str) -> np.ndarray:               # (T, G) -> rows, tick-major
        return np.stack([getattr(h, name) for h in per_gpu], axis=1).ravel()

    lost = col("lost")
    ecc_c, ecc_u = col("ecc_corrected"), col("ecc_uncorrected")
    xid_events = col("xid_events")

    def read(values: np.ndarray, kind: pa.DataType) -> pa.Array:
        return pa.array(values, kind, mask=lost | unread)

    cols = {
        "temperature_celsius": read(col("temperature_c"), pa.float32()),
        "memory_temperature_celsius": read(col("memory_temperature_c"), pa.float32()),
        "fan_speed_ratio": read(col("fan_pct") / 100, pa.float32()),
        "ecc_corrected_volatile": read(ecc_c, pa.int64()), "ecc_uncorrected_volatile": read(ecc_u, pa.int64()),
        "ecc_corrected_aggregate": read(ecc_c, pa.int64()), "ecc_uncorrected_aggregate": read(ecc_u, pa.int64()),
        "retired_pages_pending": read(col("retired_pages_pending"), pa.bool_()),
        "remapped_rows_pending": read(col("remapped_pending"), pa.bool_()),
        "remapped_rows_failed": read(np.zeros(len(lost), bool), pa.bool_()),
        "pcie_replay_total": read(np.zeros(len(lost), np.int64), pa.int64()),
        "clock_event_reasons": read(col("clock_event_reasons"), pa.int64()),
        "power_violation_seconds_total": read(np.zeros(len(lost)), pa.float64()),
        "thermal_violation_seconds_total": read(col("thermal_violation_ns") / 1e9, pa.float64()),
        "xid_events": pa.array(xid_events, pa.int32(), mask=unread),
        "xid_last_code": pa.array(col("xid_last"), pa.int32(), mask=(xid_events == 0) | unread),
        "xid_critical_code": pa.array(col("xid_critical"), pa.int32(), mask=(col("xid_critical") == 0) | unread),
        "gpu_lost": pa.array(lost, pa.bool_(), mask=unread),
    }
    if lost.any():
        T, G = len(st.t_ms), nc.g1 - nc.g0
        for name, arr in (("memory_used_bytes", st.gpu_mem_used_bytes), ("sm_util_ratio", st.gpu_sm_pct / 100),
                          ("mem_util_ratio", st.gpu_mem_util_pct / 100), ("power_watts", st.gpu_power_mw / 1000),
                          ("energy_joules", st.gpu_energy_mj / 1000)):
            kind = GPU_SCHEMA.field(name).type
            cols[name] = pa.array(arr[:, nc.g0:nc.g1].reshape(T * G).astype(kind.to_pandas_dtype()), kind, mask=lost | unread)
    return cols


def _slice_table(nc: _NodeCols, model: wl.FleetModel, st: wl.FleetState, interval_ms: int) -> pa.Table:
    T, S = len(st.t_ms), nc.s1 - nc.s0
    cols = slice(nc.s0, nc.s1)
    present = st.present[:, cols]
    mask = present.ravel()
    n = int(mask.sum())

    def flat(x: np.ndarray) -> np.ndarray:      # (T, S) -> present rows, tick-major
        return x.ravel()[mask]

    def per_slice(x: np.ndarray) -> np.ndarray:  # (S,) constants -> present rows
        return np.broadcast_to(x, (T, S)).ravel()[mask]

    uid_idx = np.broadcast_to(nc.uid_codes, (T, S)).copy()
    pod_idx = np.broadcast_to(nc.pod_codes, (T, S)).copy()
    claim_idx = np.broadcast_to(nc.claim_codes, (T, S)).copy()
    uids, pods = list(nc.uids), list(nc.pod_names)
    claims, claim_uids = list(nc.claims), list(nc.claim_uids)
    for j in nc.batch_cols:                     # each batch run is its own pod (with its own claims)
        ref = model.slices[nc.s0 + j]
        at = present[:, j]
        runs, inverse = np.unique(st.containers.run[at, ref.ci], return_inverse=True)
        uid_idx[at, j] = len(uids) + inverse
        pod_idx[at, j] = len(pods) + inverse
        names = [wl.batch_run_name(ref.pod, int(run)) for run in runs]
        run_uids = [wl.stable_uuid("pod", nc.node.cluster, ref.pod.namespace, name) for name in names]
        if ref.container.dra is not None:
            claim_idx[at, j] = len(claims) + inverse
            for c_ref in (_claim_ref(nc.node, ref, name, uid) for name, uid in zip(names, run_uids)):
                claims.append(c_ref.claim)
                claim_uids.append(c_ref.uid)
        pods.extend(names)
        uids.extend(run_uids)
    ts = np.repeat(st.t_ms, S)[mask]
    ctx, mod, data = st.ctx_mib[:, cols], st.mod_mib[:, cols], st.data_mib[:, cols]
    # what the exporter reads; a node whose HAMi-core layout it refuses reports grants, use unknown
    readable = nc.node.layout in ("v0", "v1")
    region = per_slice(nc.hami_region) & readable      # HAMi-core's region of the slice is read
    usage = per_slice(nc.nvml_usage) & readable        # NVML reads the slice's processes
    if nc.node.layout == "v1":
        last = st.containers.last_kernel_s[:, [model.slices[i].ci for i in range(nc.s0, nc.s1)]]
        age = flat((st.t_ms[:, None] / 1000 - last).astype(np.float32))
        age_arr = pa.array(age, pa.float32(), mask=flat(last == 0) | ~region)
    else:                                       # v0 regions carry no last_kernel_time
        age_arr = pa.nulls(n, pa.float32())
    zeros = np.zeros(n, dtype=np.int32)
    sm_limit = per_slice(nc.sm_limit)
    dra = per_slice(nc.driver_codes) >= 0

    def known(values: np.ndarray, kind: pa.DataType, where: np.ndarray) -> pa.Array:
        return pa.array(values, kind, mask=~where)

    arrays = {
        "ts_ms": pa.array(ts, pa.int64()),
        "interval_ms": pa.array(np.full(n, interval_ms, dtype=np.int32)),
        "node": _dict_col(zeros, nc.d_node),
        "cluster": _dict_col(zeros, nc.d_cluster),
        "pod_uid": _dict_col(flat(uid_idx), uids),
        "pod": _dict_col(flat(pod_idx), pods),
        "namespace": _dict_col(per_slice(nc.ns_codes), nc.d_ns),
        "container": _dict_col(per_slice(nc.ctr_codes), nc.d_ctr),
        "gpu_uuid": _dict_col(per_slice(nc.sgpu_codes), nc.d_gpu),
        "vdevice_index": pa.array(per_slice(nc.vdev)),
        "hami_memory_limit_bytes": known(per_slice(nc.limit_bytes), pa.int64(), per_slice(nc.hami_region)),
        "hami_memory_used_bytes": known(flat(ctx + mod + data) * MiB, pa.int64(), region),
        "hami_context_bytes": known(flat(ctx) * MiB, pa.int64(), region),
        "hami_module_bytes": known(flat(mod) * MiB, pa.int64(), region),
        "hami_buffer_bytes": known(flat(data) * MiB, pa.int64(), region),
        "sm_limit_ratio": pa.array(sm_limit, pa.float32(), mask=np.isnan(sm_limit) | ~per_slice(nc.hami_region)),
        "sm_util_ratio": known(flat(st.sm_pct[:, cols] / 100).astype(np.float32), pa.float32(), usage),
        "last_kernel_age_s": age_arr if readable else pa.nulls(n, pa.float32()),
        "process_count": known(per_slice(nc.nproc), pa.int16(), usage),
        "nvml_memory_used_bytes": known(flat(st.used_mib[:, cols]) * MiB, pa.int64(), usage),
        "alloc_memory_bytes": pa.array(per_slice(nc.limit_bytes)),
        "alloc_cores_ratio": pa.array(np.where(dra, per_slice(nc.cores_share), per_slice(nc.alloc_cores)), pa.float32()),
        "whole_gpu": pa.array(per_slice(nc.whole)),
        "source": _dict_col(dra.astype(np.int32), _D_DRA if readable else _D_ANNOTATION_DRA),
        # the simulated regions name every process's host pid, so NVML's figures check them
        # (a DRA slice's processes are NVML's own); a device NVML does not read has no usage
        "usage_verified": known(np.full(n, True), pa.bool_(), usage),
    }
    if nc.drivers:
        claim_codes = flat(claim_idx)
        arrays.update({
            "claim": _dict_or_null(claim_codes, pa.array(claims, pa.string())),
            "claim_uid": _dict_or_null(claim_codes, pa.array(claim_uids, pa.string())),
            "driver": _dict_or_null(per_slice(nc.driver_codes), nc.d_driver),
            "alloc_mem_share_ratio": known(per_slice(nc.mem_share), pa.float64(), dra),
            "alloc_cores_share_ratio": known(per_slice(nc.cores_share), pa.float64(), dra),
        })
    return table_with_nulls(SLICE_SCHEMA, arrays, n)


def _since(table: pa.Table, joins_ms: int) -> pa.Table:
    """A joining node's rows from the instant it joins (a tenant onboarding)."""
    return table.filter(pa.array(table.column("ts_ms").to_numpy() >= joins_ms))


def generate(scenario: Scenario, start_ms: int, end_ms: int, interval_s: float = 10, seed: int = 0,
             chunk_s: float = 3600, nodes: list[str] | None = None) -> Iterator[tuple[str, pa.Table, pa.Table]]:
    """Yield (node, gpu_table, slice_table) per node and time chunk for ticks in [start_ms, end_ms)."""
    interval_ms = int(round(interval_s * 1000))
    if interval_ms <= 0:
        raise ValueError("interval_s must be positive")
    if end_ms <= start_ms:
        return
    chosen = [scenario.node(n) for n in nodes] if nodes else scenario.nodes
    per_chunk = max(1, int(chunk_s * 1000 // interval_ms))
    models = []
    for group in _groups(chosen, per_chunk):
        model = wl.FleetModel(group, seed)
        models.append((model, [_node_cols(model, i, n) for i, n in enumerate(group)]))
    t = int(start_ms)
    while t < end_ms:
        ticks = np.arange(t, min(end_ms, t + per_chunk * interval_ms), interval_ms, dtype=np.int64)
        for model, ncs in models:
            st = model.state(ticks)
            for nc in ncs:
                gpus, slices = _gpu_table(nc, st, interval_ms), _slice_table(nc, model, st, interval_ms)
                if nc.node.joins_ms is not None and ticks[0] < nc.node.joins_ms:
                    gpus, slices = _since(gpus, nc.node.joins_ms), _since(slices, nc.node.joins_ms)
                yield nc.node.name, gpus, slices
        t = int(ticks[-1]) + interval_ms

