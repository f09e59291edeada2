"""Exporter cost on a busy node: 8 GPUs, 128 HAMi slices (simulated node, real files).

Prints the median of one Tick build + one /metrics scrape without the simulator's fake NVML
(goal <= 10 ms), wall and CPU, in a node's steady state (every container directory older
than the 2 s within which the exporter lists a directory again each tick), with a host /proc that holds every GPU process's cgroup (as
the DaemonSet runs, hostPID), beside the time to read every region file whole (what a
naive reader does each tick) measured in the same rounds, as a ratio; the /metrics bytes
per slice in each --hami-metrics mode, and the exporter's CPU seconds per hour at a 10 s
interval (build + scrape + Kafka encode + spool). The load average is printed with them:
on a shared machine the wall figures follow it, the CPU figures much less.

    python bench/bench_exporter.py [--rounds 40] [--hami-metrics monitor|full|off] [--no-proc]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


from slicemeter.exporter.cli import settle_heap
from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats
from slicemeter.exporter.sources.hami import Listings, discover
from slicemeter.exporter.serve.hami_metrics import HAMI_METRICS_MODES
from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.exporter.sources.pods import PodCache
from slicemeter.exporter.ship.publisher import Spool
from slicemeter.exporter.assemble.tick_builder import TickBuilder
from slicemeter.simulator.node import SimulatedNode
from slicemeter.simulator.scenario import load_scenario
from slicemeter.tick import encode_ticks

PATTERNS = ["steady-training", "diurnal-inference", "bursty-notebook", "idle-reservation"]


def scenario_yaml(gpus: int = 8, slices: int = 128) -> str:
    lines = [
        "tenants:",
        "  - {name: acme, display_name: ACME, kamaji: {namespace: t-acme, name: acme}, api_server: 'https://acme.example:6443', cost_center: C1}",
        "nodes:",
        "  - name: bench-node",
        "    tenant: acme",
        f"    gpus: [{{model: 'NVIDIA H100 80GB HBM3', count: {gpus}}}]",
        "    pods:",
    ]
    for i in range(slices):
        lines += [
            f"      - name: pod-{i}",
            f"        namespace: ns-{i % 6}",
            "        containers:",
            "          - name: main",
            "            resources: {nvidia.com/gpumem: 4096, nvidia.com/gpucores: 6}",
            f"            workload: {PATTERNS[i % len(PATTERNS)]}",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--hami-metrics", choices=HAMI_METRICS_MODES, default="monitor", help="mode of the timed scrape")
    ap.add_argument("--no-proc", action="store_true", help="no host /proc: no cgroup attribution")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-exporter-"))
    try:
        (work / "s.yaml").write_text(scenario_yaml())
        sim = SimulatedNode(load_scenario(str(work / "s.yaml")), "bench-node", work / "hami")
        sim.nvml.nvmlInit()
        pods = PodCache(sim.pods)
        pods.refresh()
        proc_root = None if args.no_proc else _host_proc(work / "proc", str(work / "hami"), pods)
        builder = TickBuilder("bench-node", sim.cluster, NvmlReader(sim.nvml, initialised=True), str(work / "hami"),
                              pods, proc_root=proc_root)
        stats = ExporterStats(tenant="acme")
        collector = ExporterCollector(stats, args.hami_metrics)
        spool = Spool(str(work / "spool"))
        files, _ = discover(str(work / "hami"))
        ts = sim.ts_ms
        first = builder.build(ts)
        assert len(first.tick.gpus) == 8 and len(first.tick.slices) == 128 and not first.region_errors, \
            (len(first.tick.gpus), len(first.tick.slices), first.region_errors[:3])

        # A node's steady state: the exporter trusts a container directory's listing once its
        # ctime is RACY_NS old (exporter/sources/hami.py Listings) and lists younger ones every tick,
        # so the rounds start once every directory of this just-built node has settled
        young = max(e.stat(follow_symlinks=False).st_ctime_ns for e in os.scandir(work / "hami" / "containers"))
        time.sleep(max(0.0, (young + Listings.RACY_NS - time.time_ns()) / 1e9) + 0.05)
        ts += 10_000
        sim.advance(ts)
        builder.build(ts)                       # the looks taken now are settled
        settle_heap()                           # as the exporter does once started

        t = {k: [] for k in ("wall", "cpu", "cpu_all", "scrape", "nvml", "whole", "whole_cpu")}
        nvml = builder.nvml = _Prefetched(builder.nvml)
        for _ in range(args.rounds):
            ts += 10_000
            sim.advance(ts)                     # the simulator's work is not the exporter's: outside the clock
            n0 = time.perf_counter()
            nvml.prefetch()                     # so is the fake NVML's: the tick reads this snapshot
            t["nvml"].append(time.perf_counter() - n0)
            w0, c0 = time.perf_counter(), time.process_time()
            res = builder.build(ts)
            stats.record(res)
            s0 = time.perf_counter()
            body = collector.exposition()       # what GET /metrics returns
            w1, c1 = time.perf_counter(), time.process_time()
            spool.remove(spool.append(encode_ticks([res.tick])))   # the publishing side of a tick
            t["wall"].append(w1 - w0)
            t["scrape"].append(w1 - s0)
            t["cpu"].append(c1 - c0)
            t["cpu_all"].append(time.process_time() - c0)
            r0, rc0 = time.perf_counter(), time.process_time()   # reference: read every region file whole
            total = 0
            for f in files:
                with open(f.path, "rb") as fh:
                    total += len(fh.read())
            t["whole"].append(time.perf_counter() - r0)
            t["whole_cpu"].append(time.process_time() - rc0)
        m = {k: statistics.median(v) for k, v in t.items()}
        exporter_wall, exporter_cpu = m["wall"], m["cpu"]
        size = sum(os.path.getsize(f.path) for f in files)
        n_slices = len(first.tick.slices)
        print(f"node: 8 GPUs, {n_slices} slices, {len(files)} region files ({size / 1e6:.0f} MB on disk), "
              f"/metrics {len(body) / 1e3:.0f} kB (--hami-metrics {args.hami_metrics}), "
              + ("no host /proc" if proc_root is None else "host /proc with every GPU process's cgroup")
              + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"Tick build + /metrics scrape without the fake NVML, steady state, median of {args.rounds}: "
              f"{exporter_wall * 1e3:.1f} ms wall (goal <= 10 ms), {exporter_cpu * 1e3:.1f} ms CPU; "
              f"of which the scrape {m['scrape'] * 1e3:.1f} ms wall; the fake NVML itself {m['nvml'] * 1e3:.1f} ms wall")
        print(f"reference, every region file read whole (page cache, {total / 1e6:.0f} MB): {m['whole'] * 1e3:.1f} ms wall, "
              f"{m['whole_cpu'] * 1e3:.1f} ms CPU; ratio whole-read / exporter = {m['whole'] / exporter_wall:.2f} wall, "
              f"{m['whole_cpu'] / exporter_cpu:.2f} CPU")
        per_mode = {mode: len(ExporterCollector(stats, mode).exposition()) / n_slices for mode in HAMI_METRICS_MODES}
        print("/metrics bytes per slice by --hami-metrics: " + ", ".join(f"{m} {b / 1e3:.2f} kB" for m, b in per_mode.items()))
        print(f"HAMi bytes read per tick by the exporter: {_bytes_read(builder, files) / 1e3:.0f} kB of {size / 1e6:.0f} MB")
        print(f"exporter CPU at a 10 s interval (build + scrape + encode + spool, without the fake NVML): "
              f"{m['cpu_all'] * 3600 / 10:.1f} CPU-s per hour")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


class _Prefetched:
    """The NVML reader as the Tick sees it, its snapshot read before the clock starts."""

    def __init__(self, reader: NvmlReader):
        self.reader, self.snapshot = reader, None

    @property
    def unsupported(self):
        return self.reader.unsupported

    def prefetch(self) -> None:
        self.snapshot = self.reader.read()

    def read(self):
        return self.snapshot


def _host_proc(root: Path, hami_dir: str, pods: PodCache) -> str:
    """<pid>/cgroup (cgroup v2, systemd driver, containerd) for every host pid in the regions."""
    from slicemeter.exporter.sources.hami import Region, read_region_file

    files, _ = discover(hami_dir)
    for f in files:
        r = read_region_file(f.path, hami_dir)
        info = pods.get().pods[f.pod_uid]
        cid = next(c for c, name in info.container_ids.items() if name == f.container)
        for p in r.procs if isinstance(r, Region) else ():
            (root / str(p.hostpid)).mkdir(parents=True, exist_ok=True)
            (root / str(p.hostpid) / "cgroup").write_text(
                f"0::/kubepods.slice/kubepods-pod{f.pod_uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n")
    return str(root)


def _bytes_read(builder: TickBuilder, files) -> int:
    from slicemeter.exporter.sources.hami import Region, read_region_file

    n = 0
    for f in files:
        r = read_region_file(f.path, builder.hami_dir)
        if isinstance(r, Region):
            n += r.bytes_read
    return n


if __name__ == "__main__":
    sys.exit(main())
