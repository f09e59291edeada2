"""The kept-money property's fleet (tests/test_kept_money_property.py, and on a lake
tests/lake/test_lake_kept_money.py): three nodes' Ticks from 22:00 on Oct 31 to 03:00 on
Nov 1 UTC in 20-minute chunks per node, cores grants unlike the memory grants, NVML down
for some chunks, and a node whose GPUs move to another tenant's cluster."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

from slicemeter.chargeback.prices import parse_prices_text
from slicemeter.ingest.writer import Batch
from slicemeter.testkit.cb_rows import ACME, GLOBEX
from slicemeter.testkit.synth_ticks import SynthNode, node_tables

OCT_LAST_HOURS_MS = 1_793_484_000_000     # 2026-10-31 22:00 UTC
SEGMENT_MS = 1_200_000                    # Ticks arrive in 20-minute chunks per node
INTERVAL_MS = 120_000
SEGMENTS = 15                             # 22:00 on Oct 31 to 03:00 on Nov 1
OCTOBER_SEGMENTS = 6                      # the chunks before Nov 1 00:00
PRICES = parse_prices_text('currency: EUR\ngpu_hour: {"NVIDIA A100-SXM4-80GB": "2.410003", "NVIDIA L4": "0.77"}\n'
                           'overrides: [{node: gpu-node-1, gpu_hour: "1.333333"}]\n')
PRICES_FILE_TEXT = PRICES.source_text
# cores grants unlike the memory grants (1/(slices+1) each): the share kinds differ, no grant
# (0) bills by memory, and three slices of 0.9 oversubscribe their GPU
CORES = [0.05, 0.9, 0.5, 0.0, 0.9, 0.3]


def _cores_granted(slices: pa.Table, seed: int) -> pa.Table:
    slot = slices["pod_uid"].combine_chunks().indices.to_numpy(zero_copy_only=False)
    grants = np.array(CORES, np.float32)[(slot + seed) % len(CORES)]
    i = slices.schema.get_field_index("alloc_cores_ratio")
    return slices.set_column(i, slices.schema.field(i), pa.array(grants, slices.schema.field(i).type))


def kept_case_chunks(case: dict) -> list[tuple[int, pa.Table, pa.Table]]:
    """(segment, GPU rows, slice rows) per node and 20 minutes. `case`: seed, nvml_down (the
    chunks, node x SEGMENTS + segment, sent without GPU rows), move_at (the segment from
    which gpu-node-1 is in globex's cluster)."""
    nodes = [SynthNode("gpu-node-0", ACME, gpus=2, slices_per_gpu=3),
             SynthNode("gpu-node-1", ACME, gpus=2, slices_per_gpu=2, model_index=1),
             SynthNode("gpu-node-2", GLOBEX, gpus=1, slices_per_gpu=1)]
    out = []
    for k, node in enumerate(nodes):
        for q in range(SEGMENTS):
            if node.node == "gpu-node-1" and q >= case["move_at"]:
                node = SynthNode(node.node, GLOBEX, node.gpus, node.slices_per_gpu, node.model_index)
            ts = OCT_LAST_HOURS_MS + q * SEGMENT_MS + np.arange(0, SEGMENT_MS, INTERVAL_MS)
            gpus, slices = node_tables(node, ts, INTERVAL_MS, seed=case["seed"] % 1000 + k * 100 + q)
            slices = _cores_granted(slices, case["seed"])
            if k * SEGMENTS + q in case["nvml_down"]:
                gpus = gpus.slice(0, 0)
            out.append((q, gpus, slices))
    return out


def arrival_phases(case: dict) -> tuple[list, list, list]:
    """The chunks in a random order (`case["seed"]`) cut into those on time, late
    (`late_before_close`, a share of them) and after October's close (`late_after_close`,
    at least one of October's chunks among them: a correction)."""
    chunks = kept_case_chunks(case)
    random.Random(case["seed"]).shuffle(chunks)
    first_october = next(i for i, c in enumerate(chunks) if c[0] < OCTOBER_SEGMENTS)
    chunks.append(chunks.pop(first_october))
    n_after = max(1, int(len(chunks) * case["late_after_close"]))
    n_late = int(len(chunks) * case["late_before_close"])
    cut_late, cut_after = len(chunks) - n_late - n_after, len(chunks) - n_after
    return chunks[:cut_late], chunks[cut_late:cut_after], chunks[cut_after:]


def chunks_batch(chunks, partition: int, offset: int) -> Batch:
    """One consumer batch of `chunks` (segment, GPU rows, slice rows), read from `partition`
    up to `offset`."""
    batch = Batch(next_offsets={("t", partition): offset})
    for _, gpus, slices in chunks:
        batch.gpus.append(gpus)
        batch.slices.append(slices)
        batch.samples += gpus.num_rows + slices.num_rows
    return batch


def write_arrivals(con, write, case: dict, per_batch: int) -> None:
    """The case's chunks handed to `write` (one consumer batch at a time, `per_batch` chunks
    each) in their arrival order: on time, late, then after October is closed."""
    from slicemeter.chargeback.close import close_month

    on_time, late, after_close = arrival_phases(case)
    offset = 0
    for phase, chunks in enumerate((on_time, late, after_close)):
        if phase == 2:
            close_month(con, "2026-10", PRICES)
        for i in range(0, len(chunks), per_batch):
            write(chunks_batch(chunks[i:i + per_batch], 0, offset))
            offset += 1
