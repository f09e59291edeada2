"""With the real broker (Tansu): stop it while the exporter runs, keep ticking, start a new
one on the same port: every Tick arrives exactly once, in order. Plus the spool's bounds."""
from __future__ import annotations

import time
import urllib.request

import pytest
from kafka import KafkaConsumer, TopicPartition

from slicemeter.exporter.cli import Exporter, serve_metrics
from slicemeter.exporter.serve.collector import ExporterStats
from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.exporter.sources.pods import PodCache
from slicemeter.exporter.ship.publisher import Publisher, Spool, kafka_producer
from slicemeter.exporter.assemble.tick_builder import TickBuilder
from slicemeter.simulator.node import SimulatedNode
from slicemeter.simulator.scenario import load_scenario
from slicemeter.broker import TansuBroker
from slicemeter.tick import batch_to_ticks, decode

T0 = 1_795_000_000_000
TOPIC = "slicemeter.ticks"
SCENARIO = """
tenants:
  - {name: acme, display_name: ACME, kamaji: {namespace: t-acme, name: acme}, api_server: "https://acme.example:6443", cost_center: C1}
nodes:
  - name: node-a
    tenant: acme
    gpus: [{model: "NVIDIA L4", count: 1}]
    pods:
      - name: web
        namespace: serving
        containers:
          - name: server
            resources: {nvidia.com/gpumem: 4096, nvidia.com/gpucores: 30}
            workload: {pattern: steady-training, level: 0.5}
"""


def wait_for(cond, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def consume(bootstrap: str, n: int) -> list[tuple[bytes, int]]:
    """Read the topic from the start until n messages; return (key, ts_ms) and check nothing follows."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      consumer_timeout_ms=1000)
    try:
        wait_for(lambda: c.partitions_for_topic(TOPIC), 30, "topic metadata")
        tps = [TopicPartition(TOPIC, p) for p in sorted(c.partitions_for_topic(TOPIC))]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[tuple[bytes, int]] = []
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500).values():
                for r in records:
                    for t in batch_to_ticks(decode(r.value)):
                        out.append((r.key, t.ts_ms))
        c.poll(timeout_ms=200)
        assert sum(c.highwater(tp) or 0 for tp in tps) == n, "extra messages on the topic"
        return out
    finally:
        c.close()


@pytest.mark.broker
def test_broker_outage_every_tick_once_in_order(broker, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(SCENARIO)
    sim = SimulatedNode(load_scenario(str(scen)), "node-a", tmp_path / "hami")
    sim.nvml.nvmlInit()
    pods = PodCache(sim.pods)
    stats = ExporterStats(tenant="acme")
    publisher = Publisher(Spool(str(tmp_path / "spool"), 10 << 20), TOPIC, "node-a",
                          lambda: kafka_producer(broker.bootstrap), on_error=lambda e: stats.count_error("kafka"))
    stats.spool_stats = publisher.stats
    builder = TickBuilder("node-a", sim.cluster, NvmlReader(sim.nvml, initialised=True), str(tmp_path / "hami"), pods,
                          proc_root=None)
    exporter = Exporter(builder, stats, pods, publisher, 10.0, before_tick=sim.advance, sync_pods=True)
    server = serve_metrics(stats, 0, "127.0.0.1")
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    stamps = [T0 + 10_000 * i for i in range(9)]
    publisher.start()
    second = None
    try:
        for ts in stamps[:3]:
            exporter.tick_once(ts)
        wait_for(lambda: publisher.published == 3, what="3 Ticks acknowledged")
        first = consume(broker.bootstrap, 3)
        port = broker.port
        broker.stop()                                    # Kafka goes away; the exporter keeps ticking
        for ts in stamps[3:6]:
            t0 = time.monotonic()
            exporter.tick_once(ts)
            assert time.monotonic() - t0 < 2.0           # spooling never waits for the broker
        text = urllib.request.urlopen(url, timeout=5).read().decode()   # /metrics still served
        assert "slicemeter_spool_ticks 3\n" in text and 'pod="web"' in text
        assert publisher.published == 3
        # the outage lasts until the exporter has noticed it (a failed send, counted in /metrics)
        wait_for(lambda: stats.source_errors["kafka"] >= 1, 30, "a failed send")
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        assert 'slicemeter_source_errors_total{source="kafka"}' in text and "slicemeter_published_ticks_total 3\n" in text
        second = TansuBroker(port=port, log_path=tmp_path / "tansu2.log").start()   # a new broker, same port
        for ts in stamps[6:]:
            exporter.tick_once(ts)
        wait_for(lambda: publisher.published == 9, 90, "all 9 Ticks acknowledged")
        rest = consume(second.bootstrap, 6)
        assert [ts for _, ts in first + rest] == stamps  # exactly once, in order
        assert {k for k, _ in first + rest} == {b"node-a"}
        assert len(publisher.spool) == 0 and publisher.spool.dropped == 0
    finally:
        publisher.stop()
        server.shutdown()
        if second:
            second.stop()


def test_spool_bounded_oldest_dropped_and_replayed_in_order(tmp_path):
    spool = Spool(str(tmp_path / "s"), max_bytes=1000)
    for i in range(8):
        spool.append(bytes([i]) * 300)
    assert len(spool) == 3 and spool.dropped == 5 and spool.bytes == 900
    assert spool.oldest()[1][0] == 5
    reopened = Spool(str(tmp_path / "s"), max_bytes=1000)   # survives an exporter restart
    got = []
    while (item := reopened.oldest()) is not None:
        got.append(item[1][0])
        reopened.remove(item[0])
    assert got == [5, 6, 7] and reopened.bytes == 0
    reopened.append(b"x")
    assert reopened.oldest()[0] == 8                         # sequence continues, never reused
    with pytest.raises(ValueError):
        Spool(str(tmp_path / "t"), max_bytes=0)


@pytest.mark.broker
def test_cli_runs_serves_metrics_and_publishes(broker, tmp_path):
    """The real command: `slicemeter exporter --simulate ...` as a process, scraped and consumed."""
    import os
    import signal
    import subprocess
    import sys

    from slicemeter.broker import free_port

    scen = tmp_path / "s.yaml"
    scen.write_text(SCENARIO)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "slicemeter.cli", "exporter", "--simulate", str(scen), "--node", "node-a",
         "--hami-dir", str(tmp_path / "hami"), "--kafka", broker.bootstrap, "--port", str(port), "--listen", "127.0.0.1",
         "--interval", "0.3", "--spool-dir", str(tmp_path / "spool")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ | {"PYTHONWARNINGS": "ignore"},
    )
    try:
        def scrape():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                return ""

        wait_for(lambda: 'pod="web"' in scrape(), 30, "/metrics with the simulated pod")
        text = scrape()
        assert 'slicemeter_slice_memory_limit_bytes{claim="",cluster="https://acme.example:6443",container="server",driver=""' in text
        assert 'tenant="https://acme.example:6443"' in text
        wait_for(lambda: _value(scrape(), "slicemeter_published_ticks_total") >= 2, 30, "2 Ticks published")
        got = consume_at_least(broker.bootstrap, 2)
        assert got == sorted(got) and len(set(got)) == len(got)
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=20)[0].decode()
    assert proc.returncode == 0, out[-2000:]


def _value(text: str, name: str) -> float:
    return next((float(line.split()[1]) for line in text.splitlines() if line.startswith(name + " ")), -1.0)


def consume_at_least(bootstrap: str, n: int) -> list[int]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        wait_for(lambda: c.partitions_for_topic(TOPIC), 30, "topic metadata")
        tps = [TopicPartition(TOPIC, p) for p in sorted(c.partitions_for_topic(TOPIC))]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[int] = []
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500).values():
                out += [t.ts_ms for r in records for t in batch_to_ticks(decode(r.value))]
        assert len(out) >= n
        return out
    finally:
        c.close()
