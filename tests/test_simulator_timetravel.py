"""Time travel yields the Ticks the live simulator would give for the same instant."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from slicemeter.testkit.hami_reader import read_region
from slicemeter.simulator.node import SimulatedNode
from slicemeter.common import MiB
from slicemeter.simulator.scenario import load_scenario, parse_scenario
from slicemeter.simulator.timetravel import generate
from slicemeter.tick import GPU_SCHEMA, SLICE_SCHEMA, decode, encode_tables

REPO = Path(__file__).resolve().parent.parent
TS = 1_793_973_600_000          # 2026-11-06T14:00:00Z


@pytest.fixture(scope="module")
def demo():
    # on this clock the onboarding tenant's node (joins 16 days before now) has joined by TS
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLICEMETER_NOW", "2026-11-20T00:00:00Z")
        return load_scenario(REPO / "examples/demo.yaml")


def _at(demo, ts, seed):
    return {n: (g, s) for n, g, s in generate(demo, ts, ts + 1, interval_s=10, seed=seed)}


@pytest.mark.parametrize("offset_h", [0, 3, 20])
def test_timetravel_matches_simulated_node_at_the_same_instant(demo, tmp_path, offset_h):
    ts = TS + offset_h * 3_600_000
    tables = _at(demo, ts, seed=4)
    assert set(tables) == {n.name for n in demo.nodes}
    slices_checked = 0
    # the device plugin's nodes (the DRA node: test_dra_history_matches_the_claims_the_node_serves)
    for spec in (n for n in demo.nodes if not any(g.dra for g in n.gpus)):
        node = SimulatedNode(demo, spec.name, tmp_path / spec.name, seed=4)
        node.advance(ts)
        nv = node.nvml
        nv.nvmlInit()
        g, s = tables[spec.name]
        assert g.schema.equals(GPU_SCHEMA) and s.schema.equals(SLICE_SCHEMA)
        gpus = g.to_pylist()
        assert len(gpus) == len(spec.gpus)
        for row in gpus:
            assert row["ts_ms"] == ts and row["interval_ms"] == 10_000
            assert row["node"] == spec.name and row["cluster"] == spec.cluster
            h = nv.nvmlDeviceGetHandleByIndex(row["gpu_index"])
            assert row["gpu_uuid"] == nv.nvmlDeviceGetUUID(h) and row["model"] == nv.nvmlDeviceGetName(h)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            assert (row["memory_total_bytes"], row["memory_used_bytes"]) == (mem.total, mem.used)
            util = nv.nvmlDeviceGetUtilizationRates(h)
            assert row["sm_util_ratio"] == pytest.approx(util.gpu / 100)
            assert row["mem_util_ratio"] == pytest.approx(util.memory / 100)
            assert row["power_watts"] == pytest.approx(nv.nvmlDeviceGetPowerUsage(h) / 1000)
            assert row["energy_joules"] == pytest.approx(nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000)
        # slices: read what the exporter would read (region files, NVML, pod annotation)
        pods = {p["metadata"]["uid"]: p for p in node.pods()["items"]}
        nvml_mem, nvml_sm = {}, {}
        for i in range(len(spec.gpus)):
            for p in nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(i)):
                nvml_mem[(i, p.pid)] = p.usedGpuMemory
            try:
                samples = nv.nvmlDeviceGetProcessUtilization(nv.nvmlDeviceGetHandleByIndex(i), 0)
            except nv.NVMLError_NotFound:   # no process on this GPU
                samples = []
            for p in samples:
                nvml_sm[(i, p.pid)] = p.smUtil
        expected = {}
        for d in (tmp_path / spec.name / "containers").iterdir():
            uid, ctr = d.name.split("_", 1)
            r = read_region(next(d.glob("*.cache")).read_bytes())
            pod = pods[uid]
            alloc = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(";")[:-1]
            ci = [c["name"] for c in pod["spec"]["containers"]].index(ctr)
            inits = pod["spec"].get("initContainers", [])
            devs = [x.split(",") for x in alloc[ci + (len(inits) if len(alloc) > ci + len(inits) else 0)].split(":") if x]
            for v, uuid in enumerate(r["uuids"]):
                gi = [x.uuid for x in spec.gpus].index(uuid)
                # a slot left odd by a killed writer is not read
                procs = [p for p in r["procs"] if p["used"][v]["total"] and not (p["seqlock"] or 0) % 2]
                expected[(uid, ctr, uuid)] = {
                    "pod": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"], "vdevice_index": v,
                    "hami_memory_limit_bytes": r["limit"][v],
                    "hami_memory_used_bytes": sum(p["used"][v]["total"] for p in procs),
                    "hami_context_bytes": sum(p["used"][v]["context"] for p in procs),
                    "hami_module_bytes": sum(p["used"][v]["module"] for p in procs),
                    "hami_buffer_bytes": sum(p["used"][v]["data"] for p in procs),
                    "sm_limit_ratio": r["sm_limit"][v] / 100 if 0 < r["sm_limit"][v] < 100 else None,
                    # NVML's per-process sample (the region's may be zeroed by HAMi-core's watcher)
                    "sm_util_ratio": min(100, sum(nvml_sm[(gi, p["hostpid"])] for p in procs)) / 100,
                    "last_kernel_age_s": (ts / 1000 - r["last_kernel_time"]) if r["last_kernel_time"] else None,
                    "process_count": len(procs),
                    "nvml_memory_used_bytes": sum(nvml_mem[(gi, p["hostpid"])] for p in procs),
                    "alloc_memory_bytes": int(devs[v][2]) * MiB, "alloc_cores_ratio": int(devs[v][3]) / 100,
                    "whole_gpu": "nvidia.com/gpumem" not in pod["spec"]["containers"][ci]["resources"]["limits"]
                    and "nvidia.com/gpucores" not in pod["spec"]["containers"][ci]["resources"]["limits"]
                    and "nvidia.com/gpumem-percentage" not in pod["spec"]["containers"][ci]["resources"]["limits"],
                    "source": "hami",
                }
        rows = s.to_pylist()
        assert len(rows) == len(expected)
        for row in rows:
            want = expected[(row["pod_uid"], row["container"], row["gpu_uuid"])]
            for k, v in want.items():
                assert row[k] == (pytest.approx(v, abs=1e-3) if isinstance(v, float) else v), (spec.name, k)
            slices_checked += 1
        live = {r["gpu_uuid"]: 0 for r in gpus}
        for row in rows:
            live[row["gpu_uuid"]] += 1
        assert [live[r["gpu_uuid"]] for r in gpus] == [r["slice_count"] for r in gpus]
    assert slices_checked >= 15


def test_chunking_does_not_change_values_and_tables_survive_the_wire(demo):
    start, end = TS, TS + 2 * 3_600_000
    a = [(n, g, s) for n, g, s in generate(demo, start, end, 60, seed=9, chunk_s=3600)]
    b = [(n, g, s) for n, g, s in generate(demo, start, end, 60, seed=9, chunk_s=7 * 3600)]
    assert len(a) == 2 * len(b) == 2 * len(demo.nodes)
    for node in (n.name for n in demo.nodes):
        ga = pa.concat_tables([g for n, g, _ in a if n == node]).to_pylist()
        gb = pa.concat_tables([g for n, g, _ in b if n == node]).to_pylist()
        sa = pa.concat_tables([s for n, _, s in a if n == node]).to_pylist()
        sb = pa.concat_tables([s for n, _, s in b if n == node]).to_pylist()
        assert ga == gb and sa == sb and len(ga) == 120 * len(demo.node(node).gpus)
    n, g, s = b[0]
    batch = decode(encode_tables(g, s))
    assert batch.gpus.num_rows == g.num_rows and batch.slices.num_rows == s.num_rows


def test_week_of_history_shape(demo):
    start = TS - 3 * 86_400_000
    gpu_rows, slice_rows, energy, uids, age_null = [], [], {}, {}, {}
    for n, g, s in generate(demo, start, start + 7 * 86_400_000, 300, seed=0, chunk_s=86400):
        gpu_rows.append(g.select(["gpu_uuid", "sm_util_ratio", "energy_joules", "ts_ms"]).to_pandas())
        sp = s.select(["pod", "pod_uid", "last_kernel_age_s"]).to_pandas()
        sp["node"] = n
        slice_rows.append(sp)
    gdf, sdf = pd.concat(gpu_rows), pd.concat(slice_rows)
    # energy counters only grow; a device NVML does not read (the DRA node's NPU) reports none
    unread = gdf["gpu_uuid"].isin([g.uuid for n in demo.nodes for g in n.gpus if not g.nvml])
    assert unread.any() and gdf[unread][["sm_util_ratio", "energy_joules"]].isna().all().all()
    for _, grp in gdf[~unread].sort_values("ts_ms").groupby("gpu_uuid"):
        assert (np.diff(grp["energy_joules"].to_numpy()) > 0).all()
    # fleet utilisation in the enterprise band the demo promises
    assert 0.20 <= gdf["sm_util_ratio"].mean() <= 0.35
    # batch jobs are new pods each run, with their own UIDs
    runs = sdf[sdf["pod"].str.startswith("nightly-etl-")]
    assert runs["pod"].nunique() >= 20 and runs.groupby("pod")["pod_uid"].nunique().max() == 1
    # the v0 node has no last_kernel_time; v1 slices that ran a kernel do
    assert sdf[sdf["node"] == "gpu-node-2"]["last_kernel_age_s"].isna().all()
    assert sdf[sdf["node"] == "gpu-node-1"]["last_kernel_age_s"].notna().mean() > 0.5


def test_an_under_reporting_region_disagrees_with_nvml():
    text = (REPO / "examples/demo.yaml").read_text().replace(
        "            workload: {pattern: steady-training, level: 0.8}\n",
        "            workload: {pattern: steady-training, level: 0.8}\n            hami_underreport: 0.5\n", 1)
    s = parse_scenario(text)
    _, _, t = next(generate(s, TS, TS + 1, nodes=["gpu-node-1"]))
    rows = {r["pod"]: r for r in t.to_pylist()}
    liar, honest = rows["llm-finetune"], rows["chat-api"]
    assert honest["hami_memory_used_bytes"] == honest["nvml_memory_used_bytes"]
    assert liar["hami_memory_used_bytes"] < 0.6 * liar["nvml_memory_used_bytes"]
    assert liar["hami_buffer_bytes"] == pytest.approx(
        0.5 * (liar["nvml_memory_used_bytes"] - liar["hami_context_bytes"] - liar["hami_module_bytes"]), rel=1e-3)
