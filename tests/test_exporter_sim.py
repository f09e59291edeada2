"""The exporter on simulator output: v0/v1 regions, multi-container and multi-GPU pods,
allocated-but-idle slices, corrupt regions, deleted pods, cgroup attribution, /metrics."""
from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import urllib.request

import pytest

from slicemeter.exporter.cli import serve_metrics
from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats
from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.exporter.sources.pods import PodCache
from slicemeter.exporter.assemble.tick_builder import TickBuilder
from slicemeter.simulator.node import SimulatedNode
from slicemeter.simulator.scenario import load_scenario
from slicemeter.common import MiB

T0 = 1_795_000_000_000   # a fixed instant: runs are reproducible

SCENARIO = """
tenants:
  - name: acme
    display_name: ACME
    kamaji: {namespace: tenant-acme, name: acme}
    api_server: https://acme.tenants.example:6443
    cost_center: CC-1
nodes:
  - name: node-v1
    tenant: acme
    gpus: [{model: "NVIDIA A100-SXM4-80GB", count: 2}]
    pods:
      - name: ddp
        namespace: ml
        containers:
          - name: worker
            resources: {nvidia.com/gpu: 2, nvidia.com/gpumem: 30720, nvidia.com/gpucores: 40}
            workload: {pattern: steady-training, level: 0.75}
            processes: 2
      - name: translate
        namespace: search
        workload: {pattern: steady-training, level: 0.5}
        containers:
          - name: encoder
            resources: {nvidia.com/gpumem: 10240, nvidia.com/gpucores: 15}
          - name: decoder
            resources: {nvidia.com/gpumem: 12288, nvidia.com/gpucores: 20}
          - name: sidecar
      - name: reserved
        namespace: ml
        containers:
          - name: eval
            resources: {nvidia.com/gpumem: 16384, nvidia.com/gpucores: 20}
            workload: idle-reservation
      - name: liar
        namespace: ml
        containers:
          - name: main
            resources: {nvidia.com/gpumem: 20480, nvidia.com/gpucores: 30}
            workload: {pattern: steady-training, level: 0.9}
            hami_underreport: 0.2
  - name: node-v0
    tenant: acme
    hami_layout: v0
    gpus: [{model: "NVIDIA L4", count: 2}]
    pods:
      - name: vision
        namespace: ml
        containers:
          - name: trainer
            resources: {nvidia.com/gpu: 1}
            workload: {pattern: steady-training, level: 0.55}
      - name: notebook
        namespace: nb
        containers:
          - name: nb
            resources: {nvidia.com/gpumem: 8192, nvidia.com/gpucores: 30}
            workload: {pattern: steady-training, level: 0.3}
"""


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    path = tmp_path_factory.mktemp("scn") / "scenario.yaml"
    path.write_text(SCENARIO)
    return load_scenario(str(path))


def make(scenario, node_name, hami_dir, pods_filter=None, proc_root=None):
    sim = SimulatedNode(scenario, node_name, hami_dir)
    sim.nvml.nvmlInit()
    source = (lambda: pods_filter(sim.pods())) if pods_filter else sim.pods
    cache = PodCache(source)
    builder = TickBuilder(node_name, sim.cluster, NvmlReader(sim.nvml, initialised=True), str(hami_dir), cache,
                          proc_root=proc_root)

    def tick(ts_ms):
        sim.advance(ts_ms)
        cache.refresh()
        return builder.build(ts_ms)

    return sim, tick


def without(gone: set[str]):
    """A pod-list filter that drops the pods named in `gone` (deleted while HAMi's directories linger)."""
    return lambda pl: pl | {"items": [p for p in pl["items"] if p["metadata"]["name"] not in gone]}


def by_key(tick):
    return {(s.pod, s.container, s.gpu_uuid): s for s in tick.slices}


def test_v1_node_multi_gpu_multi_container(scenario, tmp_path):
    sim, tick = make(scenario, "node-v1", tmp_path)
    res = tick(T0)
    t = res.tick
    assert t.cluster == "https://acme.tenants.example:6443" and len(t.gpus) == 2
    assert not res.region_errors and all(res.hami_ok.values())
    uuids = [g.gpu_uuid for g in t.gpus]
    pods = {(s.pod, s.container) for s in t.slices}
    assert pods == {("ddp", "worker"), ("translate", "encoder"), ("translate", "decoder"), ("reserved", "eval"), ("liar", "main")}
    ddp = sorted((s for s in t.slices if s.pod == "ddp"), key=lambda s: s.vdevice_index)
    assert [s.vdevice_index for s in ddp] == [0, 1] and {s.gpu_uuid for s in ddp} == set(uuids)
    for s in t.slices:
        assert s.source == "hami" and s.namespace in ("ml", "search")
        assert s.hami_memory_limit_bytes == s.alloc_memory_bytes
        assert 0 <= s.hami_memory_used_bytes <= s.hami_memory_limit_bytes
        assert s.hami_memory_used_bytes == s.hami_context_bytes + s.hami_module_bytes + s.hami_buffer_bytes
        assert 0.0 <= s.sm_util_ratio <= 1.0
    enc = next(s for s in t.slices if s.container == "encoder")
    assert enc.hami_memory_limit_bytes == 10240 * MiB and enc.sm_limit_ratio == pytest.approx(0.15)
    assert ddp[0].hami_memory_limit_bytes == 30720 * MiB and ddp[0].process_count == 1
    # honest containers: HAMi and NVML agree exactly; the under-reporting one is flagged
    for s in t.slices:
        flag = res.disagreement.get((s.pod_uid, s.container, s.gpu_uuid))
        if s.pod == "liar":
            assert flag is True and s.nvml_memory_used_bytes > s.hami_memory_used_bytes
        elif s.process_count:
            assert flag is False and s.nvml_memory_used_bytes == s.hami_memory_used_bytes
    counts = {g.gpu_uuid: g.slice_count for g in t.gpus}
    assert sum(counts.values()) == len(t.slices)


def test_v0_node_and_whole_gpu(scenario, tmp_path):
    sim, tick = make(scenario, "node-v0", tmp_path)
    t = tick(T0).tick
    keys = {(s.pod, s.container): s for s in t.slices}
    assert set(keys) == {("vision", "trainer"), ("notebook", "nb")}
    assert keys[("vision", "trainer")].whole_gpu is True and keys[("notebook", "nb")].whole_gpu is False
    assert keys[("notebook", "nb")].hami_memory_limit_bytes == 8192 * MiB
    assert keys[("vision", "trainer")].last_kernel_age_s is None   # v0 has no last_kernel_time
    assert keys[("vision", "trainer")].hami_memory_used_bytes > 0


def test_allocated_but_not_started_is_reported(scenario, tmp_path):
    sim, tick = make(scenario, "node-v1", tmp_path)
    tick(T0)
    uid = next(p["metadata"]["uid"] for p in sim.pods()["items"] if p["metadata"]["name"] == "reserved")
    # the container has not touched CUDA yet: HAMi has written no region for it
    sim.advance(T0 + 10_000)
    shutil.rmtree(tmp_path / "containers" / f"{uid}_eval")
    res = TickBuilder("node-v1", sim.cluster, NvmlReader(sim.nvml, initialised=True), str(tmp_path),
                      _refreshed(PodCache(sim.pods)), proc_root=None).build(T0 + 10_000)
    s = next(s for s in res.tick.slices if s.pod == "reserved")
    assert s.source == "annotation" and s.alloc_memory_bytes == 16384 * MiB and s.alloc_cores_ratio == pytest.approx(0.2)
    assert s.hami_memory_used_bytes == 0 and s.sm_util_ratio == 0.0 and s.process_count == 0


def _refreshed(cache):
    cache.refresh()
    return cache


def test_corrupt_region_costs_one_container(scenario, tmp_path):
    sim, tick = make(scenario, "node-v1", tmp_path)
    good = tick(T0).tick
    uid = next(s.pod_uid for s in good.slices if s.container == "encoder")
    cache = next((tmp_path / "containers" / f"{uid}_encoder").glob("*.cache"))
    builder = TickBuilder("node-v1", sim.cluster, NvmlReader(sim.nvml, initialised=True), str(tmp_path),
                          _refreshed(PodCache(sim.pods)), proc_root=None)
    with open(cache, "r+b") as f:       # the tenant scribbles a huge proc_num
        f.seek(2_008_896)
        f.write(struct.pack("<i", 99_999))
    res = builder.build(T0)
    assert [(c, e.reason) for _, c, _, e in res.region_errors] == [("encoder", "bad_proc_num")]
    assert res.hami_ok[(uid, "encoder")] is False
    enc = next(s for s in res.tick.slices if s.container == "encoder")
    assert enc.source == "annotation" and enc.hami_memory_used_bytes is None and enc.alloc_memory_bytes == 10240 * MiB
    assert by_key(res.tick).keys() == by_key(good).keys()   # every other slice is still there
    stats = ExporterStats(tenant="acme")
    stats.record(res)
    text = _exposition(stats)
    assert 'slicemeter_hami_region_errors_total{reason="bad_proc_num"} 1\n' in text
    assert 'container="encoder"' in text and "slicemeter_hami_region_ok{" in text


def test_deleted_pod_vanishes_next_tick(scenario, tmp_path):
    gone = set()
    sim, tick = make(scenario, "node-v1", tmp_path, pods_filter=without(gone))
    stats = ExporterStats(tenant="acme")
    stats.record(tick(T0))
    assert 'pod="translate"' in _exposition(stats)
    gone.add("translate")          # the pod is deleted; HAMi's directories linger on disk
    res = tick(T0 + 10_000)
    assert any(p.name.endswith("_encoder") for p in (tmp_path / "containers").iterdir())
    assert all(s.pod != "translate" for s in res.tick.slices) and res.tick.slices
    stats.record(res)
    text = _exposition(stats)
    assert 'pod="translate"' not in text and 'pod="ddp"' in text


def test_one_collector_renders_each_tick_afresh(scenario, tmp_path):
    """The Tick's text is kept between scrapes of that Tick only: the next Tick's scrape
    drops a deleted pod's series, writes the new values, and reads as a new collector's."""
    gone = set()
    sim, tick = make(scenario, "node-v1", tmp_path, pods_filter=without(gone))
    stats = ExporterStats(tenant="acme")
    collector = ExporterCollector(stats)
    stats.record(tick(T0))
    first = collector.exposition().decode()
    assert collector.exposition().decode() == first and 'pod="translate"' in first
    gone.add("translate")
    stats.record(tick(T0 + 600_000))
    text = collector.exposition().decode()
    assert 'pod="translate"' not in text and text == ExporterCollector(stats).exposition().decode()
    ddp = [[line for line in t.splitlines() if 'pod="ddp"' in line] for t in (first, text)]
    assert ddp[0] and ddp[1] and ddp[0] != ddp[1]   # the same series with this Tick's values


def test_cgroup_attribution_for_pods_without_hami(scenario, tmp_path):
    """A whole-GPU pod scheduled without HAMi: NVML pid -> /proc/<pid>/cgroup -> pod."""
    sim = SimulatedNode(scenario, "node-v0", tmp_path / "hami")
    sim.nvml.nvmlInit()
    sim.advance(T0)
    pods = sim.pods()
    vision = next(p for p in pods["items"] if p["metadata"]["name"] == "vision")
    vision["metadata"]["annotations"] = {}     # no HAMi in this pod's path
    uid = vision["metadata"]["uid"]
    cid = vision["status"]["containerStatuses"][0]["containerID"].split("://")[1]
    shutil.rmtree(tmp_path / "hami" / "containers" / f"{uid}_trainer")
    proc = tmp_path / "proc"
    nv = sim.nvml
    hami_pids = _hami_pids(tmp_path / "hami")     # the notebook's processes, seen by HAMi
    vision_gpus = set()
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid in hami_pids:
                continue
            vision_gpus.add(nv.nvmlDeviceGetUUID(h))
            (proc / str(p.pid)).mkdir(parents=True)
            (proc / str(p.pid) / "cgroup").write_text(   # cgroup v2, systemd driver, containerd
                f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n")
    assert len(vision_gpus) == 1
    cache = PodCache(lambda: pods)
    cache.refresh()
    res = TickBuilder("node-v0", sim.cluster, NvmlReader(nv, initialised=True), str(tmp_path / "hami"), cache,
                      proc_root=str(proc)).build(T0)
    s = next(s for s in res.tick.slices if s.pod == "vision")
    assert s.source == "cgroup" and s.whole_gpu and s.container == "trainer" and {s.gpu_uuid} == vision_gpus
    assert s.nvml_memory_used_bytes > 0 and s.alloc_cores_ratio == 1.0
    assert [x.source for x in res.tick.slices if x.pod == "notebook"] == ["hami"]


def _hami_pids(hami_dir):
    from slicemeter.exporter.sources.hami import discover, read_region_file

    files, _ = discover(str(hami_dir))
    out = set()
    for f in files:
        r = read_region_file(f.path, str(hami_dir))
        for p in r.procs:
            out.add(p.hostpid)
    return out


def _exposition(stats) -> str:
    return ExporterCollector(stats).exposition().decode()


def test_fast_rendering_equals_prometheus_client(scenario, tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    sim, tick = make(scenario, "node-v1", tmp_path)
    stats = ExporterStats(tenant="acme")
    stats.record(tick(T0))
    stats.spool_stats = lambda: {"ticks": 1, "bytes": 10, "dropped": 0, "published": 3}
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ExporterCollector(stats))

    def parsed(text):
        return sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                      for fam in text_string_to_metric_families(text) for s in fam.samples
                      if s.name != "slicemeter_scrape_duration_seconds")

    ours, theirs = parsed(_exposition(stats)), parsed(generate_latest(reg).decode())
    assert ours == theirs and len(ours) > 100


def test_a_long_lived_collector_writes_each_tick_as_a_fresh_one_would(scenario, tmp_path):
    """From Tick to Tick most families repeat (limits, grants, the idle reservation), and
    their kept texts and label tuples are reused, while the workloads' values move: each
    Tick still reads exactly as a new collector writes it, also once a pod is deleted."""
    gone = set()
    sim, tick = make(scenario, "node-v1", tmp_path, pods_filter=without(gone))
    stats = ExporterStats(tenant="acme")
    kept = ExporterCollector(stats)
    texts = []
    for i in range(12):
        if i == 6:
            gone.add("translate")
        stats.record(tick(T0 + i * 10_000))
        texts.append(kept.exposition().decode())
        assert texts[-1] == ExporterCollector(stats).exposition().decode(), i
    assert ['pod="translate"' in t for t in texts] == [True] * 6 + [False] * 6
    limits = [{l for l in t.splitlines() if l.startswith("hami_vgpu_memory_limit_bytes{")} for t in texts]
    assert limits[0] == limits[5] and limits[6] < limits[5]   # repeated, then without the deleted pod's
    used = [[l for l in t.splitlines() if l.startswith("slicemeter_slice_sm_utilization_ratio{")] for t in texts]
    assert len({tuple(u) for u in used}) > 6   # values that moved from Tick to Tick


def test_metrics_pass_promtool_and_serve_over_http(scenario, tmp_path):
    sim, tick = make(scenario, "node-v1", tmp_path)
    stats = ExporterStats(tenant="acme")
    stats.record(tick(T0))
    stats.spool_stats = lambda: {"ticks": 2, "bytes": 9000, "dropped": 1, "published": 5}
    server = serve_metrics(stats, 0, "127.0.0.1")
    try:
        port = server.server_address[1]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    for name in ("slicemeter_gpu_memory_total_bytes", "slicemeter_slice_allocation_ratio", "slicemeter_gpu_energy_joules_total",
                 "hami_vgpu_memory_used_bytes", "hami_container_device_utilization_ratio", "hami_host_gpu_utilization_ratio",
                 "slicemeter_spool_ticks 2\n", "slicemeter_published_ticks_total 5\n", "slicemeter_build_info{"):
        assert name in text, name
    alloc = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("slicemeter_gpu_allocated_ratio{")]
    assert len(alloc) == 2 and all(0 < a <= 1 for a in alloc)
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and check.stdout.strip() == "" and check.stderr.strip() == "", check.stdout + check.stderr


def test_once_prints_a_tick(tmp_path, scenario, capsys):
    import json

    from slicemeter.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    assert main(["exporter", "--simulate", str(path), "--node", "node-v0", "--hami-dir", str(tmp_path / "h"), "--once"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["node"] == "node-v0" and len(out["gpus"]) == 2 and {s["pod"] for s in out["slices"]} == {"vision", "notebook"}


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_the_exporter_stops_cleanly_on_a_signal_even_started_with_sigint_ignored(tmp_path, signum):
    """A shell's `&` starts a child with SIGINT ignored; the exporter still stops on it, exit 0."""
    import signal
    import time

    from slicemeter.broker import free_port

    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    port = free_port()
    log = tmp_path / "exporter.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "slicemeter.cli", "exporter", "--simulate", str(path),
                                 "--node", "node-v0", "--hami-dir", str(tmp_path / "h"), "--port", str(port),
                                 "--listen", "127.0.0.1", "--interval", "0.2"],
                                stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 60
        while True:   # serving /metrics: the signal handlers are in place
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            try:
                if 'pod="vision"' in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode():
                    break
            except OSError:
                pass
            time.sleep(0.1)
        proc.send_signal(getattr(signal, signum))
        assert proc.wait(timeout=20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_missing_nvml_is_a_clear_startup_error(tmp_path, capsys):
    from slicemeter.cli import main

    rc = main(["exporter", "--hami-dir", str(tmp_path), "--once", "--cluster", "c"])
    err = capsys.readouterr().err
    assert rc == 2 and "NVML" in err and "--simulate" in err


def test_exited_process_slot_does_not_keep_memory(scenario, tmp_path):
    """HAMi-core leaves an exited process's slot behind; its memory must not be counted."""
    sim, tick = make(scenario, "node-v0", tmp_path)
    before = {s.container: s for s in tick(T0).tick.slices}
    nb = before["nb"]
    from slicemeter.exporter.sources.hami import LAYOUT_V0 as L

    cache = next((tmp_path / "containers" / f"{nb.pod_uid}_nb").glob("*.cache"))
    with open(cache, "r+b") as f:
        f.seek(L.tail_off)
        n = struct.unpack("<i", f.read(4))[0]
        f.seek(L.procs_off)
        slot = bytearray(f.read(L.slot_size))
        struct.pack_into("<i", slot, 4, 999_999)          # a host pid that no longer exists
        f.seek(L.procs_off + n * L.slot_size)
        f.write(slot)
        f.seek(L.tail_off)
        f.write(struct.pack("<i", n + 1))
    builder = TickBuilder("node-v0", sim.cluster, NvmlReader(sim.nvml, initialised=True), str(tmp_path),
                          _refreshed(PodCache(sim.pods)), proc_root=None)
    after = {s.container: s for s in builder.build(T0).tick.slices}["nb"]
    assert after.hami_memory_used_bytes == nb.hami_memory_used_bytes > 0
    assert after.process_count == nb.process_count


def test_failing_nvml_calls_cost_only_their_values(tmp_path):
    """Unsupported NVML calls (as on some GPUs) leave the rest of the Tick intact and are counted."""
    text = SCENARIO.replace("    hami_layout: v0\n", "    hami_layout: v0\n    nvml_unsupported: [nvmlDeviceGetPowerUsage, "
                            "nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetProcessUtilization]\n")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    sim, tick = make(load_scenario(str(path)), "node-v0", tmp_path / "h")
    res = tick(T0)
    assert len(res.tick.gpus) == 2 and res.nvml_errors == 6          # 3 calls x 2 GPUs
    for g in res.tick.gpus:
        assert g.power_watts is None and g.energy_joules is None
        assert g.memory_total_bytes > 0 and g.sm_util_ratio is not None
    assert {s.pod for s in res.tick.slices} == {"vision", "notebook"}
    stats = ExporterStats(tenant="acme")
    stats.record(res)
    assert 'slicemeter_source_errors_total{source="nvml"} 6\n' in _exposition(stats)


def test_settled_heap_freezes_start_up_and_still_collects_young_cycles():
    """The exporter's process once started: start-up's objects frozen out of the collector,
    gen0 collected less often, and reference cycles made by later Ticks still collected
    without anyone calling gc.collect()."""
    code = """
import gc, weakref
from slicemeter.exporter.cli import GC_GEN0_THRESHOLD, settle_heap
settle_heap()
assert gc.get_freeze_count() > 1000, gc.get_freeze_count()
assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD
class Node:
    pass
gone = []
for i in range(3 * GC_GEN0_THRESHOLD):
    a, b = Node(), Node()
    a.other, b.other = b, a
    if i % 1000 == 0:
        weakref.finalize(a, gone.append, i)
print(len(gone))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 30, out.stdout   # of 60 watched cycles, those older than the last gen0 collection


def test_the_exporter_starts_without_a_warning_and_names_missing_calls_once(tmp_path):
    """Started as on a node (a process of its own, warnings as errors): no FutureWarning from
    the NVML binding, and the calls the boards lack on one line, not one per GPU and call."""
    text = SCENARIO.replace("    hami_layout: v0\n", "    hami_layout: v0\n    nvml_unsupported: [nvmlDeviceGetFanSpeed, "
                            "nvmlDeviceGetPcieReplayCounter, nvmlDeviceGetTotalEccErrors]\n")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    run = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-W", "error::DeprecationWarning:pynvml",
                          "-m", "slicemeter.cli", "exporter", "--simulate", str(path), "--node", "node-v0",
                          "--hami-dir", str(tmp_path / "h"), "--once"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Warning" not in run.stderr, run.stderr
    (line,) = [ln for ln in run.stderr.splitlines() if "NVML" in ln]
    ecc = ", ".join(f"nvmlDeviceGetTotalEccErrors/{t}/{c}" for t in ("corrected", "uncorrected")
                    for c in ("volatile", "aggregate"))
    assert line.endswith(f"boards lack (not asked again): GPU 0,1 (NVIDIA L4): nvmlDeviceGetFanSpeed, "
                         f"{ecc}, nvmlDeviceGetPcieReplayCounter"), line
