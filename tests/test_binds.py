"""Every listener binds loopback unless told otherwise: the exporter's and ingest's /metrics
and the dashboard. The deploy manifests and compose pass 0.0.0.0 where Prometheus scrapes
(tests/test_deploy.py, tests/test_compose.py)."""
from __future__ import annotations

import socket
import urllib.request

import pytest

from slicemeter.exporter.cli import serve_metrics
from slicemeter.exporter.serve.collector import ExporterStats
from slicemeter.ingest.metrics import IngestMetrics
from slicemeter.broker import free_port
from test_compose import parse_cli


@pytest.mark.parametrize("argv,option", [
    (["exporter", "--kafka", "k:9092"], "listen"),
    (["ingest", "--kafka", "k:9092", "--db", "x.duckdb", "--metrics-port", "9401"], "metrics_listen"),
    (["dashboard", "--db", "x.duckdb"], "address"),
])
def test_bind_options_default_to_loopback(argv, option):
    assert getattr(parse_cli(argv), option) == "127.0.0.1"
    assert getattr(parse_cli([*argv, f"--{option.replace('_', '-')}", "0.0.0.0"]), option) == "0.0.0.0"


def _reachable_only_on_loopback(port: int) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
    for other in _non_loopback_addresses():
        with pytest.raises(OSError):
            socket.create_connection((other, port), timeout=2).close()


def _non_loopback_addresses() -> list[str]:
    """This machine's address on its default route, if it has one (UDP connect: no packet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))   # TEST-NET-1: routing only
        except OSError:
            return []
        addr = s.getsockname()[0]
    return [] if addr.startswith("127.") or addr == "0.0.0.0" else [addr]


def test_exporter_metrics_server_binds_loopback_by_default():
    server = serve_metrics(ExporterStats(tenant="acme"), 0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        _reachable_only_on_loopback(server.server_address[1])
    finally:
        server.shutdown()


def test_ingest_metrics_server_binds_loopback_by_default():
    port = free_port()
    server, _thread = IngestMetrics().serve(port)
    try:
        assert server.server_address[0] == "127.0.0.1"
        _reachable_only_on_loopback(port)
    finally:
        server.shutdown()
