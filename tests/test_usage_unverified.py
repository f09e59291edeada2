"""Usage that could not be checked against NVML is flagged, from the node to the invoice.

The reported case: an exporter without the host's PID namespace (a DaemonSet without
`hostPID`, which docs/deploy.md allows) sees NVML's pids but not their /proc entries, so no
cgroup can place their memory; a HAMi region that claims 0 bytes while NVML shows 19.9 GB
used on its GPU was billed $0.00 on the usage basis with nothing saying the figure went
unchecked. The node is the simulator's fake NVML with HAMi-core's byte-exact region files.
"""
from __future__ import annotations

import csv
import os
import re
import subprocess
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from slicemeter import store
from slicemeter.chargeback.bill import diff_lines
from slicemeter.exporter.cli import Exporter, serve_metrics
from slicemeter.exporter.ship.publisher import Publisher, Spool, kafka_producer
from slicemeter.testkit.dashboard_app import run_app
from slicemeter.testkit.fleet_fixture import build_fleet_db
from slicemeter.testkit.ingest_helpers import SLICEMETER

from slicemeter.exporter.assemble.attribution import Tolerance
from slicemeter.exporter.serve.collector import ExporterStats
from slicemeter.exporter.assemble import tick_builder
from slicemeter.simulator.nvml import ProcNow
from slicemeter.testkit.hami_bytes import Proc
from slicemeter.testkit.static_node import (A100_TOTAL, GiB, StaticNode, builder, gpu, pod, slice_metrics, write_cgroup,
                                            write_region)

GPU0 = "GPU-3f0c1a2b-4d5e-6f70-8192-a3b4c5d6e7f8"
NOV_2 = 1_793_577_600_000          # 2026-11-02 00:00 UTC
UID = "7a1e0c55-0b1d-4c3e-9f00-1e2d3c4b5a69"
PID = 4242
USED = 19_900_000_000               # what NVML shows: 19.9 GB
TOLERANCE = Tolerance(256 << 20, 0.10)
REPO = Path(__file__).resolve().parent.parent


def tenant_pod() -> dict:
    return pod(UID, "llm", "team-x", ["main"], allocated=f"{GPU0},NVIDIA,20480,25:;")


def region_claiming_nothing(hami, hostpid: int = 0) -> None:
    """One slot: no bytes (a slot naming a host pid holds its 1 MiB context, or HAMi-core
    does not count it on the device)."""
    write_region(hami, UID, "main", devices=[(GPU0, 20 * GiB, 25)],
                 procs=[Proc(pid=1, hostpid=hostpid, mem=[(1 << 20 if hostpid else 0, 0, 0)], sm_util=[0])])


def node(*procs: ProcNow, used: int = USED) -> StaticNode:
    return StaticNode(gpus=[gpu(GPU0, used=used, sm=0)], procs={0: list(procs)}, ts_ms=NOV_2)


def verified_gauge(res) -> dict[str, float]:
    """pod -> slicemeter_slice_usage_verified as GET /metrics renders it."""
    return {p: v for (family, p), v in slice_metrics(res).items() if family == "slicemeter_slice_usage_verified"}


def build(tmp_path, n: StaticNode, host_pids: bool, region_hostpid: int = 0):
    hami, proc = tmp_path / "hami", tmp_path / "proc"
    proc.mkdir(exist_ok=True)    # the exporter's own /proc: NVML's host pids are not in it
    item = tenant_pod()
    region_claiming_nothing(hami, region_hostpid)
    if host_pids:
        write_cgroup(proc, PID, item, "main")
    return builder(n, hami, [item], proc_root=proc).build(n.ts_ms)


def test_no_host_pids_visible_flags_the_region_that_claims_nothing(tmp_path):
    res = build(tmp_path, node(ProcNow(pid=PID, used_bytes=USED, sm_pct=60, mem_util_pct=20)), host_pids=False)
    (s,) = res.tick.slices
    assert s.source == "hami" and s.hami_memory_used_bytes == 0 and s.nvml_memory_used_bytes is None
    assert s.usage_verified is False
    assert verified_gauge(res) == {"llm": 0.0}


def test_with_host_pids_the_same_slice_is_verified(tmp_path):
    res = build(tmp_path, node(ProcNow(pid=PID, used_bytes=USED, sm_pct=60, mem_util_pct=20)), host_pids=True)
    (s,) = res.tick.slices
    assert s.nvml_memory_used_bytes == USED and s.usage_verified is True
    assert verified_gauge(res) == {"llm": 1.0}


def test_a_region_naming_its_host_pid_is_verified_without_host_pids(tmp_path):
    """The region's own slot names the pid NVML lists: NVML's figure bounds the slice."""
    res = build(tmp_path, node(ProcNow(pid=PID, used_bytes=USED, sm_pct=60, mem_util_pct=20)), host_pids=False,
                region_hostpid=PID)
    (s,) = res.tick.slices
    assert s.nvml_memory_used_bytes == USED and s.usage_verified is True


def test_gpu_memory_far_above_its_slices_with_no_process_listed_is_unverified(tmp_path):
    """NVML in a container without the host's PID namespace may list no process at all."""
    res = build(tmp_path, node(), host_pids=False)
    (s,) = res.tick.slices
    assert s.usage_verified is False
    assert verified_gauge(res) == {"llm": 0.0}


def test_an_idle_gpu_with_no_process_listed_is_verified(tmp_path):
    res = build(tmp_path, node(used=300 << 20), host_pids=False)
    assert [s.usage_verified for s in res.tick.slices] == [True]


@pytest.mark.parametrize("listed, hidden, attributed, used, claimed, expected", [
    (False, 0, False, 0, 0, False),                          # NVML's process list unavailable
    (True, 1, True, USED, USED, False),                       # a pid no cgroup or slot places
    (True, 0, True, USED, 0, True),                           # every pid placed
    (True, 0, False, USED, 0, False),                         # memory used far above, nothing attributed
    (True, 0, False, USED, USED - (1 << 30), True),           # the slices claim about what is used
    (True, 0, False, 8 * GiB - 1, 0, True),                   # within 10 % of an 80 GiB GPU
    (True, 0, False, None, 0, True),                          # no device figure to compare
])
def test_usage_checkable(listed, hidden, attributed, used, claimed, expected):
    assert tick_builder.usage_checkable(listed, hidden, attributed, used, claimed, A100_TOTAL, TOLERANCE) is expected


# ---- end to end: exporter /metrics -> Kafka (Tansu) -> `slicemeter ingest` -> `slicemeter export`

TENANTS = """
tenants:
  - {name: acme, display_name: ACME, kamaji: {namespace: t-acme, name: acme}, api_server: "https://acme.example:6443", cost_center: C1}
"""


def slicemeter(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*SLICEMETER, *args], cwd=REPO, capture_output=True, text=True, timeout=180,
                          env=os.environ | (env or {}))


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


GPU1 = "GPU-8b7c6d5e-4f30-4a21-9b12-c3d4e5f60718"
TWIN_UID = "0c9d8e7f-6a5b-4c3d-8e2f-1a0b9c8d7e6f"
TWIN_PID = 5151


def honest_twin(hami) -> dict:
    """The same grant on the next GPU, its region naming its host pid and the bytes NVML
    shows: verified without host PIDs."""
    write_region(hami, TWIN_UID, "main", devices=[(GPU1, 20 * GiB, 25)],
                 procs=[Proc(pid=1, hostpid=TWIN_PID, mem=[(1 << 20, 0, USED - (1 << 20))], sm_util=[0])])
    return pod(TWIN_UID, "llm-twin", "team-y", ["main"], allocated=f"{GPU1},NVIDIA,20480,25:;")


def publish_an_hour(tmp_path, bootstrap: str, twin: bool = False) -> str:
    """An exporter without host pids ticks an hour of the reported case into Kafka (`twin`:
    beside its honest twin on a second GPU); returns its /metrics text."""
    hami, proc = tmp_path / "hami", tmp_path / "proc"
    proc.mkdir()
    item = tenant_pod()
    region_claiming_nothing(hami)
    n = node(ProcNow(pid=PID, used_bytes=USED, sm_pct=60, mem_util_pct=20))
    items = [item]
    if twin:
        items.append(honest_twin(hami))
        n.gpus.append(gpu(GPU1, used=USED, sm=0))
        n.procs[1] = [ProcNow(pid=TWIN_PID, used_bytes=USED, sm_pct=60, mem_util_pct=20)]
    b = builder(n, hami, items, proc_root=proc)
    stats = ExporterStats(tenant="acme")
    publisher = Publisher(Spool(str(tmp_path / "spool"), 10 << 20), "slicemeter.ticks", b.node,
                          lambda: kafka_producer(bootstrap), on_error=lambda e: stats.count_error("kafka"))
    exporter = Exporter(b, stats, b.pods, publisher, 600.0)
    server = serve_metrics(stats, 0, "127.0.0.1")
    publisher.start()
    try:
        for k in range(6):
            n.ts_ms = NOV_2 + k * 600_000
            exporter.tick_once(n.ts_ms)
        wait_for(lambda: publisher.published == 6, 60, "6 Ticks acknowledged")
        return urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=5).read().decode()
    finally:
        publisher.stop()
        server.shutdown()


@pytest.mark.broker
def test_the_reported_case_is_flagged_from_metrics_to_invoice(broker, tmp_path):
    metrics = publish_an_hour(tmp_path, broker.bootstrap)
    assert re.search(r'^slicemeter_slice_usage_verified\{[^}]*pod="llm"[^}]*\} 0$', metrics, re.M), metrics

    tenants, db = tmp_path / "tenants.yaml", tmp_path / "live.duckdb"
    tenants.write_text(TENANTS)
    now = {"SLICEMETER_NOW": "2026-12-01T09:00Z"}
    ing = slicemeter("ingest", "--kafka", broker.bootstrap, "--db", str(db), "--tenants", str(tenants),
                     "--group", "", "--until-idle", "3", env=now)
    assert ing.returncode == 0, ing.stderr
    con = store.connect(db, read_only=True)
    assert con.execute("SELECT list(DISTINCT usage_verified), count(*) FROM raw_slice").fetchone() == ([False], 6)
    assert con.execute("SELECT pod, usage_unverified_s FROM slice_hour").fetchall() == [("llm", 3600.0)]
    con.close()

    invoices = {}
    rounds = (("usage", "1.0000", False), ("max", "1.0000", False), ("allocation", "0.0000", False),
              ("usage", "1.0000", True))   # the last: the month closed, billed from its frozen copy
    for basis, hours, close in rounds:
        if close:
            closed = slicemeter("close", "--db", str(db), "--month", "2026-11", env=now)
            assert closed.returncode == 0, closed.stderr
        out = tmp_path / f"{basis}-{close}"
        ex = slicemeter("export", "--db", str(db), "--month", "2026-11", "--out", str(out), "--basis", basis, env=now)
        assert ex.returncode == 0, ex.stderr
        invoice_bytes = (out / "invoice-2026-11.csv").read_bytes()
        assert invoices.setdefault(basis, invoice_bytes) == invoice_bytes   # closing changes nothing
        invoice = {r["namespace"]: r for r in csv.DictReader((out / "invoice-2026-11.csv").open())}
        assert invoice["team-x"]["usage_unverified_hours"] == hours, basis
        detail = {r["pod"]: r for r in pq.read_table(out / "detail-2026-11.parquet").to_pylist()}
        assert detail["llm"]["usage_unverified_hours"] == Decimal(hours), basis
        focus = {r["x_Pod"]: r for r in csv.DictReader((out / "focus-2026-11.csv").open())}
        assert focus["llm"]["x_UsageUnverifiedHours"] == hours, basis
        assert focus[""]["x_UsageUnverifiedHours"] == ""   # the GPU's idle line rests on no slice's usage


def export(tmp_path, db, basis: str, prices: Path) -> tuple[dict, dict, dict]:
    """`slicemeter export` of November: invoice rows by namespace, detail and FOCUS rows by pod
    (FOCUS's idle rows by GPU)."""
    out = tmp_path / f"{basis}-{prices.stem}"
    ex = slicemeter("export", "--db", str(db), "--month", "2026-11", "--out", str(out), "--basis", basis,
                    "--prices", str(prices), env={"SLICEMETER_NOW": "2026-12-01T09:00Z"})
    assert ex.returncode == 0, ex.stderr
    invoice = {r["namespace"]: r for r in csv.DictReader((out / "invoice-2026-11.csv").open())}
    detail = {r["pod"]: r for r in pq.read_table(out / "detail-2026-11.parquet").to_pylist()}
    focus = {r["x_Pod"] or r["x_GpuUuid"]: r for r in csv.DictReader((out / "focus-2026-11.csv").open())}
    return invoice, detail, focus


@pytest.mark.broker
def test_unverified_usage_is_billed_at_its_allocation_share_unless_the_catalog_says_usage(broker, tmp_path):
    """From the exporter's own Ticks (no host PIDs) through Kafka and ingest to the files: on
    the usage basis the region claiming nothing pays its allocation share by default, what
    it paid before under `unverified_usage: usage`; its honest twin pays the same either way."""
    publish_an_hour(tmp_path, broker.bootstrap, twin=True)
    tenants, db = tmp_path / "tenants.yaml", tmp_path / "live.duckdb"
    tenants.write_text(TENANTS)
    ing = slicemeter("ingest", "--kafka", broker.bootstrap, "--db", str(db), "--tenants", str(tenants),
                     "--group", "", "--until-idle", "3", env={"SLICEMETER_NOW": "2026-12-01T09:00Z"})
    assert ing.returncode == 0, ing.stderr
    con = store.connect(db, read_only=True)
    assert con.execute("SELECT pod, usage_unverified_s FROM slice_hour ORDER BY pod").fetchall() == [
        ("llm", 3600.0), ("llm-twin", 0.0)]
    con.close()
    catalog = (REPO / "examples/prices.yaml").read_text()
    default, as_reported = tmp_path / "default.yaml", tmp_path / "as-reported.yaml"
    default.write_text(catalog)
    as_reported.write_text(catalog + "unverified_usage: usage\n")

    inv, detail, focus = export(tmp_path, db, "usage", default)
    inv_old, detail_old, focus_old = export(tmp_path, db, "usage", as_reported)
    inv_alloc, detail_alloc, _ = export(tmp_path, db, "allocation", default)

    # the hidden slice: $0.60 (a quarter of a $2.40 GPU-hour, its grant) instead of $0.00
    assert detail_old["llm"]["cost"] == Decimal("0.00") and inv_old["team-x"]["cost"] == "0.00"
    assert detail["llm"]["cost"] == detail_alloc["llm"]["cost"] == Decimal("0.60")
    assert inv["team-x"]["cost"] == "0.60" and inv["team-x"]["gpu_hours_billed"] == "0.2500"
    assert detail["llm"]["gpu_hours_used"] == detail_old["llm"]["gpu_hours_used"]   # usage stays as reported
    # the files say which hours were billed so
    assert inv["team-x"]["usage_unverified_hours"] == inv_old["team-x"]["usage_unverified_hours"] == "1.0000"
    assert inv["team-x"]["unverified_at_allocation_hours"] == "1.0000"
    assert inv_old["team-x"]["unverified_at_allocation_hours"] == "0.0000"
    assert inv_alloc["team-x"]["unverified_at_allocation_hours"] == "0.0000"
    assert focus["llm"]["x_UnverifiedAtAllocationHours"] == "1.0000"
    assert '"slicemeter/unverified-usage":"allocation"' in focus["llm"]["Tags"]
    assert focus_old["llm"]["x_UnverifiedAtAllocationHours"] == "0.0000"
    assert "unverified-usage" not in focus_old["llm"]["Tags"]
    # the honest twin: untouched to the cent, on every file
    assert detail["llm-twin"] == detail_old["llm-twin"] and detail["llm-twin"]["cost"] > Decimal("0.50")
    assert inv["team-y"] == inv_old["team-y"] and focus["llm-twin"] == focus_old["llm-twin"]
    # what the hidden slice now pays comes off its GPU's idle: the month still adds up to two GPU-hours
    assert Decimal(focus[GPU0]["BilledCost"]) == Decimal(focus_old[GPU0]["BilledCost"]) - Decimal("0.60")
    assert focus[GPU1] == focus_old[GPU1]
    for rows in (focus, focus_old):
        assert sum(Decimal(r["BilledCost"]) for r in rows.values()) == Decimal("4.80")


# ---- dashboard: the Tenants page says when usage-basis money rests on unverified usage

def test_the_tenants_page_says_which_usage_basis_cost_is_unverified(tmp_path, monkeypatch):
    db = build_fleet_db(tmp_path / "fleet.duckdb", "2026-11")
    con = duckdb.connect(str(db))
    namespace, tenant = con.execute(
        "SELECT s.namespace, t.tenant FROM slice_hour s JOIN tenants t ON t.api_server = s.cluster "
        "ORDER BY s.namespace LIMIT 1").fetchone()
    con.execute("UPDATE slice_hour SET usage_unverified_s = metered_s / 2 WHERE namespace = ?", [namespace])
    hours = con.execute("SELECT sum(metered_s / 2) / 3600 FROM slice_hour WHERE namespace = ? "
                        "AND hour >= TIMESTAMP '2026-11-01' AND hour < TIMESTAMP '2026-12-01'", [namespace]).fetchone()[0]
    con.close()
    at = run_app(db, monkeypatch, "tenants")
    assert not [w for w in at.warning if "could not be checked" in w.body]   # the allocation basis
    by_ns = next(d.value for d in at.dataframe if "unverified_h" in d.value.columns)
    shown = dict(zip(by_ns["namespace"], by_ns["unverified_h"]))
    assert shown.pop(namespace) == pytest.approx(hours) and hours > 0 and not any(shown.values())
    for basis in ("usage", "max"):
        at.radio(key="basis").set_value(basis)
        at.run()
        assert not at.exception, at.exception
        (warning,) = [w.body for w in at.warning if "could not be checked" in w.body]
        assert f"{basis}-basis" in warning and f"{tenant} {hours:,.1f} h" in warning


def test_a_correction_carries_the_unverified_hours_late_data_brought():
    """Late data of a closed month whose only news is that usage went unchecked still makes a
    Correction line (the money may not move: a region claiming nothing bills nothing)."""
    line = {"kind": "usage", "tenant": "acme", "namespace": "team-x", "pod": "llm", "pod_uid": UID,
            "container": "main", "cluster": "https://acme.example:6443", "node": "gpu-node-1", "gpu_uuid": GPU0,
            "model": "NVIDIA A100-SXM4-80GB", "price_micro": 2_400_000, "cost_raw": 0, "charge_raw": 0,
            "waste_raw": 0, "alloc_u": 0, "used_u": 0, "billed_u": 0, "idle_u": 0, "energy_mj": 0, "unverified_u": 0}
    (correction,) = diff_lines([dict(line, unverified_u=1_800_000_000)], [line])
    assert correction["unverified_u"] == 1_800_000_000 and correction["cost_raw"] == 0
