"""`slicemeter exporter`: the node agent (NVML + HAMi + pods -> /metrics and Kafka).

    slicemeter exporter --hami-dir DIR [--kafka HOST:PORT] --port 9400 [--hami-metrics monitor|full|off]
        [--dcgm-metrics] [--simulate FILE --node NAME] [--pods-url URL | --pods-file F] [--cluster ID | --kubeconfig F]
        [--token-file F] [--kubelet-ca FILE | --kubelet-insecure-skip-verify]
        [--tenant NAME] [--interval 10] [--topic slicemeter.ticks] [--spool-dir DIR] [--once]
        [--kafka-security-protocol SASL_SSL --kafka-username U --kafka-password-file F]
        [--signing-key-file F --signing-key-id ID]
        [--dra-api [URL] [--dra-ca FILE] | --dra-claims-file F --dra-slices-file F] [--dra-split equal|per-pod]

Without --kafka the exporter only serves /metrics (Prometheus-only: nothing is published or
spooled). With --simulate the sources are a simulated node (fake NVML, HAMi files it writes, its pod
list); this module is the only place that wires the simulator in.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import socket
import sys
import threading
import time
from typing import Any, Callable

from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats
from slicemeter.exporter.serve.hami_metrics import HAMI_METRICS_MODES
from slicemeter.exporter.sources.dra import SplitPolicy
from slicemeter.exporter.sources.dra_source import IN_CLUSTER_API, DraCache, api_fetcher, files_fetcher
from slicemeter.exporter.sources.nvml import NvmlReader, NvmlUnavailable, load_pynvml
from slicemeter.exporter.sources.pods import (SA_DIR, PodCache, cluster_from_kubeconfig, file_source, kubelet_url,
                                              url_source)
from slicemeter.exporter.ship.publisher import Publisher, Spool, kafka_producer
from slicemeter.exporter.assemble.tick_builder import BuildResult, TickBuilder
from slicemeter import clock
from slicemeter import kafka_security, signing
from slicemeter.common import YAML_MAX_BYTES, ConfigError, MiB, on_stop_signals
from slicemeter.tick import encode_ticks

log = logging.getLogger("slicemeter.exporter")
DEFAULT_TOPIC = "slicemeter.ticks"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hami-dir", default=os.environ.get("HOOK_PATH", "/usr/local/vgpu"),
                   help="HAMi hook path holding containers/<podUID>_<container>/*.cache (default $HOOK_PATH or /usr/local/vgpu)")
    p.add_argument("--kafka", help="bootstrap HOST:PORT of the Ticks' topic (omit: Prometheus only, nothing published)")
    p.add_argument("--topic", default=DEFAULT_TOPIC)
    p.add_argument("--port", type=int, default=9400, help="/metrics port (0: no HTTP server)")
    p.add_argument("--listen", default="127.0.0.1",
                   help="/metrics bind address (default 127.0.0.1; 0.0.0.0 where Prometheus scrapes the node)")
    p.add_argument("--hami-metrics", choices=HAMI_METRICS_MODES, default="monitor",
                   help="HAMi's families on /metrics: monitor (HAMi vGPUmonitor's, a drop-in), full (also the "
                        "scheduler's per-device families, from this node's grants), off (default: monitor)")
    p.add_argument("--dcgm-metrics", action="store_true",
                   help="also serve dcgm-exporter's DCGM_FI_DEV_* fields HAMi-WebUI reads, for nodes without "
                        "dcgm-exporter (off by default: beside dcgm-exporter every name would be served twice)")
    p.add_argument("--node", default=os.environ.get("NODE_NAME") or socket.gethostname(), help="node name (default $NODE_NAME)")
    p.add_argument("--simulate", metavar="FILE", help="scenario YAML: use a simulated node as the source (no GPU needed)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--pods-url", help="PodList URL (default: the kubelet's https://$NODE_IP:10250/pods)")
    src.add_argument("--pods-file", help="PodList JSON file")
    p.add_argument("--pods-refresh", type=float, default=10.0, help="seconds between pod list refreshes")
    p.add_argument("--token-file", help="bearer token sent to the kubelet, --pods-url and --dra-api "
                                        f"(default: {SA_DIR}/token when present)")
    tls = p.add_mutually_exclusive_group()
    tls.add_argument("--kubelet-ca", metavar="FILE", help="CA bundle that signed the kubelet's (or --pods-url's) "
                                                          f"certificate (default for the kubelet: {SA_DIR}/ca.crt when present)")
    tls.add_argument("--kubelet-insecure-skip-verify", action="store_true",
                     help="do not verify the kubelet's certificate (self-signed serving certs); the token is still sent")
    p.add_argument("--cluster", help="tenant cluster identity (default: server URL in --kubeconfig)")
    p.add_argument("--kubeconfig", default="/var/lib/kubelet/kubeconfig", help="kubelet kubeconfig, read for the cluster identity")
    p.add_argument("--tenant", help="tenant label on metrics (default: the cluster identity)")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between Ticks")
    p.add_argument("--spool-dir", default="/var/lib/slicemeter/spool", help="where Ticks wait while Kafka is unreachable")
    p.add_argument("--spool-max-mb", type=float, default=256.0, help="spool bound; the oldest Ticks are dropped first")
    p.add_argument("--proc-root", default="/proc", help="host /proc, for whole-GPU pods' cgroups")
    p.add_argument("--memory-tolerance-mb", type=float, default=256.0, help="HAMi vs NVML memory disagreement floor")
    p.add_argument("--once", action="store_true", help="print one Tick as JSON and exit")
    kafka_security.add_options(p)
    p.add_argument("--signing-key-file", metavar="FILE",
                   help="this cluster's Tick signing key (a Secret): every message carries its HMAC (docs/security.md)")
    p.add_argument("--signing-key-id", metavar="ID", help="the key's id, as ingest's --publishers file names it")
    dra = p.add_mutually_exclusive_group()
    dra.add_argument("--dra-api", nargs="?", const=IN_CLUSTER_API, metavar="URL",
                     help="read the node's ResourceSlices and the ResourceClaims from this API server (no URL: "
                          f"{IN_CLUSTER_API} with the service account's token and CA); DRA is off without this "
                          "or --dra-claims-file")
    dra.add_argument("--dra-claims-file", metavar="F", help="ResourceClaimList JSON file (with --dra-slices-file)")
    p.add_argument("--dra-slices-file", metavar="F", help="ResourceSliceList JSON file (with --dra-claims-file)")
    p.add_argument("--dra-ca", metavar="FILE", help=f"CA bundle of --dra-api (default: {SA_DIR}/ca.crt when present)")
    p.add_argument("--dra-split", choices=[x.value for x in SplitPolicy], default=SplitPolicy.EQUAL.value,
                   help="how a claim several containers consume is divided: equal (each container) or per-pod "
                        "(each pod, then its containers); default equal")
    p.add_argument("--dra-refresh", type=float, default=10.0, help="seconds between claim and slice refreshes")
    p.add_argument("--kafka-max-request-mb", type=float, default=1.0,
                   help="largest message the producer sends (the broker's message.max.bytes); a larger Tick is "
                        "refused and set aside, not retried")


def _existing(path: str) -> str | None:
    return path if os.path.isfile(path) else None


def _pod_source(args: argparse.Namespace):
    """A pod list file, --pods-url or the node's kubelet (default). Both URLs get the
    service-account token when there is one, and their certificate is checked against
    --kubelet-ca (the kubelet: the service account's CA by default) unless skipped."""
    if args.pods_file:
        return file_source(args.pods_file)
    for key, path in (("--token-file", args.token_file), ("--kubelet-ca", args.kubelet_ca)):
        if path and not os.path.isfile(path):
            raise ConfigError(f"{key}: no such file: {path}")
    token = args.token_file or _existing(os.path.join(SA_DIR, "token"))
    if args.pods_url:
        return url_source(args.pods_url, token, args.kubelet_ca, args.kubelet_insecure_skip_verify)
    ca = args.kubelet_ca or _existing(os.path.join(SA_DIR, "ca.crt"))
    return url_source(kubelet_url(os.environ.get("NODE_IP", "127.0.0.1")), token, ca, args.kubelet_insecure_skip_verify)


def _dra_fetch(args: argparse.Namespace):
    """The claims and slices source: two files, the API server, or None (DRA off)."""
    if bool(args.dra_claims_file) != bool(args.dra_slices_file):
        raise ConfigError("--dra-claims-file and --dra-slices-file go together")
    if args.dra_claims_file:
        return files_fetcher(args.dra_claims_file, args.dra_slices_file)
    if not args.dra_api:
        return None
    for key, path in (("--token-file", args.token_file), ("--dra-ca", args.dra_ca)):
        if path and not os.path.isfile(path):
            raise ConfigError(f"{key}: no such file: {path}")
    token = args.token_file or _existing(os.path.join(SA_DIR, "token"))
    ca = args.dra_ca or _existing(os.path.join(SA_DIR, "ca.crt"))
    return api_fetcher(args.dra_api, args.node, token, ca)


class Exporter:
    """One node's loop: build a Tick, record it for /metrics, hand it to the publisher."""

    def __init__(self, builder: TickBuilder, stats: ExporterStats, pods: PodCache,
                 publisher: Publisher | None = None, interval_s: float = 10.0,
                 before_tick: Callable[[int], None] | None = None, sync_pods: bool = False,
                 dra: DraCache | None = None):
        self.builder, self.stats, self.pods, self.publisher = builder, stats, pods, publisher
        self.dra = dra
        self.interval_s = interval_s
        self.before_tick = before_tick
        self.sync_pods = sync_pods
        self._stop = threading.Event()

    def tick_once(self, ts_ms: int | None = None) -> BuildResult:
        ts_ms = clock.now_ms() if ts_ms is None else ts_ms
        if self.before_tick:
            self.before_tick(ts_ms)
        if self.sync_pods:
            self.pods.refresh()
            if self.dra is not None:
                self.dra.refresh()
        result = self.builder.build(ts_ms, int(self.interval_s * 1000))
        self.stats.record(result)
        if self.publisher is not None:
            self.publisher.submit(encode_ticks([result.tick]))
        return result

    def run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick_once()
            except Exception:   # a bug in one tick must not stop the agent
                log.exception("tick failed")
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()


def _cluster(args: argparse.Namespace, fallback: str | None) -> str:
    if args.cluster:
        return args.cluster
    if fallback:
        return fallback
    try:
        with open(args.kubeconfig, encoding="utf-8") as f:
            return cluster_from_kubeconfig(f.read(YAML_MAX_BYTES + 1))
    except OSError as exc:
        raise ConfigError(f"--cluster not given and --kubeconfig {args.kubeconfig} unreadable: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"--kubeconfig {args.kubeconfig}: {exc}") from None


def build_exporter(args: argparse.Namespace) -> tuple[Exporter, ExporterStats]:
    if args.interval <= 0:
        raise ConfigError("--interval must be > 0")
    if not args.once and not args.kafka and not args.port:
        raise ConfigError("nothing to do: give --kafka HOST:PORT, a /metrics --port, or both")
    before_tick = None
    sim_cluster = None
    if args.simulate:
        from slicemeter.simulator.node import SimulatedNode   # only here: the simulator is handed in as a source
        from slicemeter.simulator.scenario import ScenarioError, load_scenario

        try:
            scenario = load_scenario(args.simulate)
            sim = SimulatedNode(scenario, args.node, args.hami_dir)
        except (ScenarioError, OSError, KeyError, ValueError) as exc:
            raise ConfigError(f"--simulate {args.simulate} --node {args.node}: {exc}") from None
        nvml: Any = sim.nvml
        nvml.nvmlInit()
        pod_source = sim.pods
        # a simulated node that serves ResourceClaims and ResourceSlices offers them as `dra`:
        # a callable returning (ResourceClaimList, ResourceSliceList) JSON, as a DRA fetcher does
        dra_fetch = _dra_fetch(args) or getattr(sim, "dra", None)
        sim_cluster = sim.cluster
        before_tick = sim.advance
        proc_root = None
    else:
        try:
            nvml = load_pynvml()
        except NvmlUnavailable as exc:
            raise ConfigError(f"NVML: {exc}") from None
        pod_source = _pod_source(args)
        dra_fetch = _dra_fetch(args)
        proc_root = args.proc_root
    cluster = _cluster(args, sim_cluster)
    stats = ExporterStats(tenant=args.tenant or cluster)
    pods = PodCache(pod_source, args.pods_refresh)
    if args.dra_refresh <= 0:
        raise ConfigError("--dra-refresh must be > 0")
    dra = DraCache(dra_fetch, args.node, args.dra_refresh) if dra_fetch is not None else None
    builder = TickBuilder(args.node, cluster, NvmlReader(nvml, initialised=True), args.hami_dir, pods,
                          proc_root=proc_root, tolerance_bytes=int(args.memory_tolerance_mb * MiB),
                          pid_alive=(lambda pid: os.path.exists(os.path.join(proc_root, str(pid)))) if proc_root else None,
                          dra=dra, dra_split=SplitPolicy(args.dra_split))
    publisher = None
    if not args.once and args.kafka:
        if args.spool_max_mb <= 0:
            raise ConfigError("--spool-max-mb must be > 0")
        try:
            spool = Spool(args.spool_dir, int(args.spool_max_mb * MiB))
        except OSError as exc:
            raise ConfigError(f"--spool-dir {args.spool_dir}: {exc.strerror}") from None
        kafka, security = args.kafka, kafka_security.settings(args)
        max_request = int(args.kafka_max_request_mb * MiB)
        publisher = Publisher(spool, args.topic, args.node, lambda: kafka_producer(kafka, security, max_request),
                              on_error=lambda exc: stats.count_error("kafka"), signing_key=signing.key_from_options(args.signing_key_file, args.signing_key_id))
        stats.spool_stats = publisher.stats
    # Simulated pods change with the simulated clock: refresh them in step with each tick.
    exporter = Exporter(builder, stats, pods, publisher, args.interval, before_tick, sync_pods=bool(args.simulate),
                        dra=dra)
    return exporter, stats


# A Tick allocates a few thousand short-lived containers, freed by reference counting as the
# next Tick replaces them: with gen0's default of 700 the cyclic collector ran on every Tick.
GC_GEN0_THRESHOLD = 20_000


def settle_heap() -> None:
    """Once start-up is done: what it allocated (modules, pyarrow, the catalogue) lives as long
    as the process, so it leaves the cyclic collector's generations rather than being
    traversed again by every full collection; young ones are collected less often."""
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])


def serve_metrics(stats: ExporterStats, port: int, addr: str = "127.0.0.1", hami_metrics: str = "monitor",
                  dcgm_metrics: bool = False) -> Any:
    """/metrics over HTTP in a background thread: fresh families from the Collector per scrape."""
    from slicemeter.exporter.serve.exposition import serve

    return serve(ExporterCollector(stats, hami_metrics, dcgm_metrics).exposition, port, addr)


def run(args: argparse.Namespace) -> int:
    exporter, stats = build_exporter(args)
    if args.once:
        exporter.pods.refresh()
        if exporter.dra is not None:
            exporter.dra.refresh()
        result = exporter.tick_once()
        json.dump(result.tick.to_json_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    on_stop_signals(lambda *_: exporter.stop())   # in place before /metrics answers
    if not exporter.sync_pods:
        exporter.pods.start()
        if exporter.dra is not None:
            exporter.dra.start()
    server = serve_metrics(stats, args.port, args.listen, args.hami_metrics, args.dcgm_metrics) if args.port else None
    if exporter.publisher is not None:
        exporter.publisher.start()
    settle_heap()
    target = f"{args.kafka} topic {args.topic}" if args.kafka else "nothing (Prometheus only)"
    log.info("exporter for node %s (cluster %s) every %.1f s -> %s, /metrics on :%s (HAMi families: %s)",
             args.node, exporter.builder.cluster, args.interval, target, args.port, args.hami_metrics)
    try:
        exporter.run()
    finally:
        exporter.pods.stop()
        if exporter.dra is not None:
            exporter.dra.stop()
        if exporter.publisher is not None:
            exporter.publisher.stop()
        if server is not None:
            server.shutdown()
    return 0
