"""HAMi-WebUI's NVIDIA backend against a real Prometheus (Debian's) scraping slicemeter's
exporter with `--dcgm-metrics`, and no dcgm-exporter anywhere.

Two simulated nodes of examples/demo.yaml (an A100 node with a shared, a single-container and
an idle GPU; an L4 node with a whole-GPU pod), Prometheus-only (no --kafka), ticking once
(--interval 3600) so /metrics stays fixed while Prometheus' answers are compared with it.
Every query of tests/data/hami-webui/nvidia-queries.yaml (HAMi-WebUI's exporter.go at
8f42445d) is sent as HAMi-WebUI sends it, its %s filled for each GPU and for each HAMi
container on it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slicemeter.broker import free_port
from slicemeter.common import MiB
from test_prometheus_live import PromAPI, poll, samples_of, start, stop, wait_for_metrics

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "examples" / "demo.yaml"
QUERIES = yaml.safe_load((REPO / "tests" / "data" / "hami-webui" / "nvidia-queries.yaml").read_text())
NODES = ("gpu-node-1", "gpu-node-2")
NOW = "2026-11-10T10:00:00Z"   # the exporters and the one-Tick reads see the same simulated hour
# HAMi-WebUI's device queries that read a health figure: the Tick's reading they need
HEALTH_READING = {"gpuTemperature": "temperature_celsius", "memoryTemperature": "memory_temperature_celsius",
                  "fanSpeed": "fan_speed_ratio", "gpuHardwareHealth": "xid_events"}


def query_of(entry: dict, values: dict[str, str]) -> str:
    args = tuple(values[a] for a in entry["args"])
    if "inner" in entry:
        inner = entry["inner"] % args
        return entry["format"] % ((inner,) * entry["format"].count("%s"))
    return entry["format"] % args


def one_tick(node: str, tmp: Path) -> dict:
    """The node's Tick as `slicemeter exporter --once` prints it: the readings NVML gave."""
    out = subprocess.run([sys.executable, "-m", "slicemeter.cli", "exporter", "--simulate", str(SCENARIO),
                          "--node", node, "--hami-dir", str(tmp / f"once-{node}"), "--once"],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "SLICEMETER_NOW": NOW})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def exporters(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dcgm-live")
    procs, out = [], {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLICEMETER_NOW", NOW)
        try:
            for node in NODES:
                port = free_port()
                proc, log = start(tmp, f"exporter-{node}", [
                    "exporter", "--simulate", str(SCENARIO), "--node", node, "--hami-dir", str(tmp / node / "hami"),
                    "--port", str(port), "--listen", "127.0.0.1", "--interval", "3600", "--dcgm-metrics"])
                procs.append(proc)
                text = wait_for_metrics(proc, log, port, lambda t: "DCGM_FI_DEV_FB_USED{" in t, f"exporter {node}")
                out[node] = {"port": port, "text": text, "tick": one_tick(node, tmp)}
            yield out
        finally:
            for proc in procs:
                stop(proc)


@pytest.fixture(scope="module")
def prom(tmp_path_factory, exporters):
    tmp = tmp_path_factory.mktemp("dcgm-prometheus")
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        # as dcgm-exporter's ServiceMonitor scrapes it: the exporter's pod/namespace/container labels win
        "scrape_configs": [{"job_name": "gpu-metrics", "honor_labels": True, "static_configs": [
            {"targets": [f"127.0.0.1:{e['port']}" for e in exporters.values()]}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = open(tmp / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus", f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    api = PromAPI(f"http://127.0.0.1:{port}")
    try:
        poll(lambda: len(api.query("count_over_time(up[1m]) >= 3 and up == 1")) == len(exporters),
             "three scrapes of every exporter")
        yield api
    finally:
        stop(proc)
        log.close()


def gpus(exporters) -> dict[str, dict]:
    """uuid -> {node, index, total (NVML's bytes), reading (the Tick's GPU row)}, from slicemeter's own families."""
    out = {}
    for node, e in exporters.items():
        readings = {g["gpu_uuid"]: g for g in e["tick"]["gpus"]}
        for labels, total in samples_of(e["text"], "slicemeter_gpu_memory_total_bytes"):
            if labels["gpu_index"] == "-1":
                continue   # a device NVML does not read (DRA, other vendors): not in dcgm-exporter's view
            out[labels["gpu_uuid"]] = {"node": node, "index": labels["gpu_index"], "total": total,
                                       "reading": readings[labels["gpu_uuid"]]}
    return out


HAMI_SOURCES = ("hami", "annotation")   # slices HAMi granted: the containers HAMi-WebUI lists


def containers(exporters) -> list[dict[str, str]]:
    """Every HAMi container granted on a GPU of these nodes, as the exporter's slice series name them."""
    out = []
    for e in exporters.values():
        hami = {(s["namespace"], s["pod"], s["container"], s["gpu_uuid"]) for s in e["tick"]["slices"]
                if s["source"] in HAMI_SOURCES}
        out += [{"uuid": l["gpu_uuid"], "namespace": l["namespace"], "pod": l["pod"], "container": l["container"]}
                for l, _ in samples_of(e["text"], "slicemeter_slice_allocation_ratio")
                if (l["namespace"], l["pod"], l["container"], l["gpu_uuid"]) in hami]
    return out


def value(prom, q: str) -> float:
    result = prom.query(q)
    assert len(result) == 1, f"{q}: {result}"
    return float(result[0]["value"][1])


def test_only_slicemeter_is_scraped(prom, exporters):
    assert {s["metric"]["job"] for s in prom.query("up")} == {"gpu-metrics"}
    assert not prom.query('{__name__=~"DCGM_FI_.+", job!="gpu-metrics"}')


def test_every_nvidia_query_of_hami_webui_returns_a_value_for_every_gpu(prom, exporters):
    fleet = gpus(exporters)
    assert set(fleet) == {g["gpu_uuid"] for e in exporters.values() for g in e["tick"]["gpus"] if g["gpu_index"] >= 0}
    assert len(fleet) >= 6
    for uuid, g in fleet.items():
        for entry in QUERIES["device"]:
            q = query_of(entry, {"uuid": uuid})
            result = prom.query(q)
            health = HEALTH_READING.get(entry["function"])
            if health is not None:   # a figure the board or NVML gives: a series exactly where the reading has one
                assert bool(result) == (g["reading"].get(health) is not None), f"{entry['function']}: {q}: {result}"
                continue
            assert result, f"{entry['function']} for {uuid}: {q} returns nothing"
            if entry["reads"] != "value":   # the driver version and device number, from the labels
                labels = result[0]["metric"]
                assert labels["DCGM_FI_DRIVER_VERSION"] and labels["device"] == f"nvidia{g['index']}", labels


def test_every_hami_container_query_returns_a_value(prom, exporters):
    ctrs = containers(exporters)
    assert len(ctrs) >= 8 and len({c["uuid"] for c in ctrs}) >= 3
    for c in ctrs:
        for entry in QUERIES["container"]:
            q = query_of(entry, c)
            assert prom.query(q), f"{entry['function']} for {c}: {q} returns nothing"


def test_device_memory_is_in_mib_within_1_percent_of_nvmls_total(prom, exporters):
    for uuid, g in gpus(exporters).items():
        total_mib = g["total"] / MiB
        (mem_total,) = [e for e in QUERIES["device"] if e["function"] == "deviceMemTotal"]
        assert value(prom, query_of(mem_total, {"uuid": uuid})) == pytest.approx(total_mib, rel=0.01)
        used = value(prom, f'avg(DCGM_FI_DEV_FB_USED{{UUID="{uuid}"}})')
        assert used == pytest.approx(value(prom, f'slicemeter_gpu_memory_used_bytes{{gpu_uuid="{uuid}"}}') / MiB,
                                     rel=0.01, abs=1)
        assert 0 <= used <= total_mib


def test_utilization_is_a_percent_and_power_within_10_percent_of_slicemeters(prom, exporters):
    utils = []
    for uuid in gpus(exporters):
        util = value(prom, f'DCGM_FI_DEV_GPU_UTIL{{UUID="{uuid}"}}')
        assert 0 <= util <= 100
        assert util == pytest.approx(100 * value(prom, f'slicemeter_gpu_sm_utilization_ratio{{gpu_uuid="{uuid}"}}'),
                                     abs=0.5)
        utils.append(util)
        power = value(prom, f'avg(DCGM_FI_DEV_POWER_USAGE{{UUID="{uuid}"}})')
        assert power == pytest.approx(value(prom, f'slicemeter_gpu_power_watts{{gpu_uuid="{uuid}"}}'), rel=0.10)
        assert power > 10   # watts, not kW or mW
    assert max(utils) > 1   # percent, not a 0..1 ratio


def test_a_gpu_one_container_holds_carries_its_pod_labels(prom, exporters):
    on: dict[str, list[dict]] = {}
    for c in containers(exporters):
        on.setdefault(c["uuid"], []).append(c)
    held = 0
    for uuid in gpus(exporters):
        (series,) = prom.query(f'DCGM_FI_DEV_FB_USED{{UUID="{uuid}"}}')   # one series per GPU
        labels, mine = series["metric"], on.get(uuid, [])
        if len(mine) == 1:
            held += 1
            assert {k: labels.get(k) for k in ("namespace", "pod", "container")} == {
                k: mine[0][k] for k in ("namespace", "pod", "container")}, labels
        else:
            assert not {"namespace", "pod", "container"} & set(labels), labels   # stored as absent
    assert held >= 2 and len(on) < len(gpus(exporters))   # the demo has held, shared and idle GPUs
