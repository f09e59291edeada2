"""Hand-made rollup rows for chargeback tests: insert gpu_hour / slice_hour rows directly
into a real DuckDB store, the way ingest would have written them."""
from __future__ import annotations

import contextlib
from pathlib import Path

from slicemeter.store import connect

A100 = "NVIDIA A100-SXM4-80GB"
A100_BYTES = 81920 * 1048576
ACME = "https://acme.tenants.example:6443"
GLOBEX = "https://globex.tenants.example:6443"


def add_tenants(con) -> None:
    con.execute("INSERT INTO tenants VALUES ('acme', 'ACME Research', 'tenant-acme', 'acme', ?, 'CC-1001')", [ACME])
    con.execute("INSERT INTO tenants VALUES ('globex', 'Globex', 'tenant-globex', 'globex', ?, 'CC-1002')", [GLOBEX])


@contextlib.contextmanager
def open_store(path, fill=add_tenants):
    """A store at `path` with `fill(con)` written into it, open for the block."""
    con = connect(path)
    try:
        fill(con)
        yield con
    finally:
        con.close()


def store_file(path, fill=add_tenants) -> Path:
    """A closed store file at `path` with `fill(con)` written into it."""
    with open_store(path, fill):
        return Path(path)


def add_gpu(con, hour="2026-11-01 00:00:00", gpu="GPU-1", node="gpu-node-1", cluster=ACME, model=A100,
            metered_s=3600.0, energy_j=720000.0) -> None:
    con.execute("INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, metered_s,"
                " sample_count, sm_util_s, memory_used_byte_s, energy_joules) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?)",
                [hour, cluster, node, gpu, model, A100_BYTES, metered_s, int(metered_s // 10), energy_j])


def add_slice(con, pod, alloc, used=None, hour="2026-11-01 00:00:00", gpu="GPU-1", node="gpu-node-1",
              cluster=ACME, namespace="ml", metered_s=3600.0, whole=False, mem=None, cores=None,
              disagree_s=0.0, claimed_mem_byte_s=None) -> None:
    """alloc / used: average shares over the slice's metered seconds (fractions of the GPU)."""
    used = alloc if used is None else used
    mem = alloc if mem is None else mem
    cores = alloc if cores is None else cores
    con.execute(
        """INSERT INTO slice_hour (hour, cluster, node, gpu_uuid, namespace, pod, pod_uid, container, whole_gpu,
               metered_s, sample_count, alloc_memory_bytes, alloc_cores_ratio, alloc_mem_share_s,
               alloc_cores_share_s, alloc_dominant_share_s, used_mem_share_s, used_sm_share_s, usage_share_s,
               memory_used_byte_s, hami_nvml_disagree_s)
           VALUES (?, ?, ?, ?, ?, ?, ?, 'main', ?, ?, 360, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [hour, cluster, node, gpu, namespace, pod, f"uid-{pod}", whole, metered_s, int(mem * A100_BYTES), cores,
         mem * metered_s, cores * metered_s, alloc * metered_s, used * metered_s, used * metered_s,
         used * metered_s, claimed_mem_byte_s if claimed_mem_byte_s is not None else used * A100_BYTES * metered_s,
         disagree_s])
