"""GPUs shared through DRA, billed: one node computed by hand, from the Ticks the exporter
sends for the claims of tests/data/dra/ (their shares after the claim's split), through
ingest's writer and `slicemeter export` to the cent; and claims that come and go inside an
hour, billed exactly what the Ticks said (docs/dra.md, "In the bill")."""
from __future__ import annotations

import csv
import io
import subprocess
import sys
from datetime import date
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import slicemeter.chargeback.bill as cb
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.cli import main
from slicemeter.store import connect
from slicemeter.testkit import share_oracle
from slicemeter.testkit.cb_rows import A100, ACME, add_tenants
from slicemeter.testkit.ingest_helpers import store_ticks
from slicemeter.tick import GpuReading, SliceReading, Tick

REPO = Path(__file__).resolve().parent.parent
MONTH = "2026-11"
HOUR_MS = 1_793_613_600_000          # 2026-11-02 10:00 UTC
STEP_MS = 60_000                     # a Tick a minute: 60 Ticks make the hour
GiB = 1 << 30
NODE = "dra-node-1"
ASCEND = "910B3"                     # the productName HAMi's Ascend driver publishes

HAMI_DRV, NV_DRV, ASCEND_DRV = "hami-core-gpu.project-hami.io", "gpu.nvidia.com", "ascend.project-hami.io"
# the devices' UUIDs as tests/data/dra/resourceslices.json publishes them
GPU_HAMI = "GPU-3a1f6c2e-8a41-4d4b-9e38-6f0f3c1b2a10"
GPU_SHARES = "GPU-8c0e4f3a-1b2d-4c5e-8f70-9a1b2c3d4e50"
GPU_TIMESLICED = "GPU-8c0e4f3a-1b2d-4c5e-8f70-9a1b2c3d4e51"
GPU_EXTENDED = "GPU-8c0e4f3a-1b2d-4c5e-8f70-9a1b2c3d4e53"
NPU = "npu-node-1-0"
GPU_PLUGIN = "GPU-5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a80"   # a device-plugin GPU beside them
A100_PRICE, ASCEND_PRICE = Decimal("2.40"), Decimal("1.60")


def claim_uid(n: int) -> str:
    return f"7d1c2b3a-0e9f-4a8b-8c7d-6e5f4a3b2c0{n}"


def dra(pod: str, ns: str, gpu: str, claim: str, uid: str, driver: str, mem: float, cores: float,
        pod_uid: str | None = None, **readings) -> SliceReading:
    """A DRA slice as the exporter sends it: the claim's shares after its split."""
    return SliceReading(pod_uid=pod_uid or f"uid-{pod}", container="main", gpu_uuid=gpu, pod=pod, namespace=ns,
                        claim=claim, claim_uid=uid, driver=driver, alloc_mem_share_ratio=mem,
                        alloc_cores_share_ratio=cores, whole_gpu=False, source="dra", **readings)


def used(mem_bytes: int, sm: float) -> dict:
    return {"hami_memory_used_bytes": mem_bytes, "nvml_memory_used_bytes": mem_bytes, "sm_util_ratio": sm}


def a100(uuid: str, driver: str | None, index: int) -> GpuReading:
    return GpuReading(gpu_uuid=uuid, gpu_index=index, model=A100, memory_total_bytes=80 * GiB,
                      memory_used_bytes=20 * GiB, sm_util_ratio=0.5, power_watts=200.0, driver=driver)


def node_slices() -> list[SliceReading]:
    """The Must-show node's slices, in every Tick of the hour."""
    return [
        # HAMi's driver: memory 20Gi of 80Gi, cores 30 of 100 -> 0.25 and 0.3
        dra("train", "team-a", GPU_HAMI, "train-gpu-x7k2p", claim_uid(1), HAMI_DRV, 0.25, 0.3,
            alloc_memory_bytes=20 * GiB, alloc_cores_ratio=0.3, **used(10 * GiB, 0.25)),
        # NVIDIA's ConsumableShares: memory 10Gi of 80Gi, one share on both axes
        dra("notebook", "team-b", GPU_SHARES, "notebook-share", claim_uid(3), NV_DRV, 0.125, 0.125,
            alloc_memory_bytes=10 * GiB, **used(5 * GiB, 0.125)),
        # one time-sliced whole GPU reserved for two pods: half each
        dra("render-a", "team-b", GPU_TIMESLICED, "render-timesliced", claim_uid(4), NV_DRV, 0.5, 0.5,
            **used(8 * GiB, 0.25)),
        dra("render-b", "team-b", GPU_TIMESLICED, "render-timesliced", claim_uid(4), NV_DRV, 0.5, 0.5,
            **used(8 * GiB, 0.375)),
        # adminAccess on the same GPU: monitoring, no allocation, no reading of its own
        dra("gpu-monitor", "monitoring", GPU_TIMESLICED, "gpu-monitor", claim_uid(6), NV_DRV, 0.0, 0.0),
        # nvidia.com/gpu served by DRA: the whole GPU
        dra("infer", "team-c", GPU_EXTENDED, "infer-extended-resources-r9x4k", claim_uid(5), NV_DRV, 1.0, 1.0,
            **used(40 * GiB, 0.625)),
        # Ascend by allocation: memory 16Gi of 64Gi, cores 40 -> 0.25 and 0.4; no reader
        dra("npu-job", "team-c", NPU, "npu-share", claim_uid(7), ASCEND_DRV, 0.25, 0.4, alloc_memory_bytes=16 * GiB),
        # HAMi's device plugin on another GPU: the pod annotation's grant, 40Gi and 25 cores
        SliceReading(pod_uid="uid-legacy", container="main", gpu_uuid=GPU_PLUGIN, pod="legacy", namespace="team-a",
                     hami_memory_limit_bytes=40 * GiB, sm_limit_ratio=0.25, alloc_memory_bytes=40 * GiB,
                     alloc_cores_ratio=0.25, whole_gpu=False, source="hami", usage_verified=True,
                     **used(20 * GiB, 0.25)),
    ]


def node_gpus() -> list[GpuReading]:
    return [a100(GPU_HAMI, HAMI_DRV, 0), a100(GPU_SHARES, NV_DRV, 1), a100(GPU_TIMESLICED, NV_DRV, 2),
            a100(GPU_EXTENDED, NV_DRV, 3), a100(GPU_PLUGIN, None, 4),
            # a device no NVML reads: identity only
            GpuReading(gpu_uuid=NPU, gpu_index=-1, model=ASCEND, memory_total_bytes=64 * GiB, driver=ASCEND_DRV)]


def hour_of_ticks(gpus, slices_at) -> list[Tick]:
    """60 Ticks of NODE over the hour; slices_at(i): the slices of the i-th."""
    return [Tick(node=NODE, cluster=ACME, ts_ms=HOUR_MS + i * STEP_MS, interval_ms=STEP_MS, gpus=gpus,
                 slices=slices_at(i)) for i in range(60)]


def store_file(path: Path, ticks: list[Tick]) -> Path:
    """A store written by ingest's writer from the Ticks; tenants by cluster (acme), with
    namespace team-b billed to globex."""
    con = connect(path)
    add_tenants(con)
    con.execute("INSERT INTO tenant_namespace_overrides VALUES (?, 'team-b', 'globex')", [ACME])
    store_ticks(con, ticks)
    con.close()
    return path


@pytest.fixture(scope="module")
def node_db(tmp_path_factory) -> Path:
    slices = node_slices()
    return store_file(tmp_path_factory.mktemp("dra") / "node.duckdb", hour_of_ticks(node_gpus(), lambda i: slices))


def export(db: Path, out: Path, *opts: str) -> Path:
    assert main(["export", "--db", str(db), "--month", MONTH, "--out", str(out), *opts]) == 0
    return out


def detail_of(out: Path) -> list[dict]:
    return pq.read_table(out / f"detail-{MONTH}.parquet").to_pylist()


def focus_of(out: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO((out / f"focus-{MONTH}.csv").read_text())))


def cost_by_tenant(detail: list[dict]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for r in detail:
        out[r["tenant"]] = out.get(r["tenant"], Decimal(0)) + r["cost"]
    return out


def usage_lines(detail: list[dict]) -> dict[str, dict]:
    return {r["pod"]: r for r in detail if r["kind"] == "usage"}


# Allocation GPU-hours of each container: the Tick's dominant share x 1 h.
ALLOCATED = {"train": Decimal("0.3"), "notebook": Decimal("0.125"), "render-a": Decimal("0.5"),
             "render-b": Decimal("0.5"), "gpu-monitor": Decimal("0"), "infer": Decimal("1"),
             "npu-job": Decimal("0.4"), "legacy": Decimal("0.5")}
# GPU cost of the hour: five A100s at 2.40 and the Ascend at 1.60
GPU_COST = 5 * A100_PRICE + ASCEND_PRICE                                     # 13.60
# acme (team-a, team-c, monitoring): train 0.3 x 2.40 = 0.72, legacy 0.5 x 2.40 = 1.20,
# infer 1 x 2.40 = 2.40, npu-job 0.4 x 1.60 = 0.64, gpu-monitor 0
ACME_CHARGES = Decimal("0.72") + Decimal("1.20") + Decimal("2.40") + Decimal("0.64")    # 4.96
# globex (team-b): notebook 0.125 x 2.40 = 0.30, render-a and render-b 0.5 x 2.40 = 1.20 each
GLOBEX_CHARGES = Decimal("0.30") + Decimal("1.20") + Decimal("1.20")                    # 2.70
# idle: 0.7 of the HAMi GPU (1.68), 0.875 of the shares GPU (2.10), none of the time-sliced
# and the extended-resource GPUs, 0.5 of the plugin GPU (1.20), 0.6 of the Ascend (0.96)
IDLE = Decimal("1.68") + Decimal("2.10") + Decimal("1.20") + Decimal("0.96")            # 5.94


def test_rollups_keep_claim_driver_and_the_ticks_shares(node_db):
    con = connect(node_db, read_only=True)
    rows = {r[0]: r[1:] for r in con.execute(
        "SELECT pod, claim, driver, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s, usage_unknown_s "
        "FROM slice_hour").fetchall()}
    assert rows["render-a"] == ("render-timesliced", NV_DRV, 1800.0, 1800.0, 1800.0, 0.0)
    assert rows["train"] == ("train-gpu-x7k2p", HAMI_DRV, 900.0, pytest.approx(1080.0), pytest.approx(1080.0), 0.0)
    assert rows["npu-job"] == ("npu-share", ASCEND_DRV, 900.0, pytest.approx(1440.0), pytest.approx(1440.0), 3600.0)
    assert rows["gpu-monitor"] == ("gpu-monitor", NV_DRV, 0.0, 0.0, 0.0, 3600.0)
    assert rows["legacy"] == (None, None, 1800.0, 900.0, 1800.0, 0.0)
    drivers = dict(con.execute("SELECT gpu_uuid, driver FROM gpu_hour").fetchall())
    assert drivers == {GPU_HAMI: HAMI_DRV, GPU_SHARES: NV_DRV, GPU_TIMESLICED: NV_DRV, GPU_EXTENDED: NV_DRV,
                       GPU_PLUGIN: None, NPU: ASCEND_DRV}
    assert con.execute("SELECT model, metered_s, energy_joules FROM gpu_hour WHERE gpu_uuid = ?",
                       [NPU]).fetchone() == (ASCEND, 3600.0, None)
    assert share_oracle.disagreements(con).empty
    con.close()


@pytest.mark.parametrize("idle", ["platform", "shared"])
def test_the_node_by_hand(node_db, tmp_path, idle):
    out = export(node_db, tmp_path / idle, "--idle", idle)
    detail = detail_of(out)
    lines = usage_lines(detail)
    assert {p: r["gpu_hours_allocated"] for p, r in lines.items()} == ALLOCATED
    assert {p: r["gpu_hours_billed"] for p, r in lines.items()} == ALLOCATED
    charges = {t: sum((r["charge"] for r in detail if r["tenant"] == t), Decimal(0)) for t in ("acme", "globex")}
    assert charges == {"acme": ACME_CHARGES, "globex": GLOBEX_CHARGES}
    if idle == "platform":
        assert cost_by_tenant(detail) == {"acme": ACME_CHARGES, "globex": GLOBEX_CHARGES, "platform": IDLE}
    else:
        # the idle 5.94 shared in proportion to the charges: acme 4.96 x 13.60 / 7.66 = 8.8063,
        # globex 2.70 x 13.60 / 7.66 = 4.7937; to the cent by largest remainder
        assert cost_by_tenant(detail) == {"acme": Decimal("8.81"), "globex": Decimal("4.79"), "platform": 0}
    assert sum(r["cost"] for r in detail) == GPU_COST
    # per GPU: what its slices were charged + its idle = price x 1 h, to the cent
    for gpu, price in ((GPU_HAMI, A100_PRICE), (GPU_SHARES, A100_PRICE), (GPU_TIMESLICED, A100_PRICE),
                       (GPU_EXTENDED, A100_PRICE), (GPU_PLUGIN, A100_PRICE), (NPU, ASCEND_PRICE)):
        mine = [r for r in detail if r["gpu_uuid"] == gpu]
        (idle_line,) = [r for r in mine if r["kind"] == "idle"]
        charged = sum(r["charge"] for r in mine if r["kind"] == "usage")
        assert charged + idle_line["gpu_hours_idle"] * price == price, gpu
        if idle == "platform":
            assert charged + idle_line["cost"] == price, gpu
    # the lines name their claim and driver; the device plugin's none, the idle lines their GPU's driver
    assert {p: (r["claim"], r["driver"]) for p, r in lines.items()} == {
        "train": ("train-gpu-x7k2p", HAMI_DRV), "notebook": ("notebook-share", NV_DRV),
        "render-a": ("render-timesliced", NV_DRV), "render-b": ("render-timesliced", NV_DRV),
        "gpu-monitor": ("gpu-monitor", NV_DRV), "infer": ("infer-extended-resources-r9x4k", NV_DRV),
        "npu-job": ("npu-share", ASCEND_DRV), "legacy": ("", "")}
    focus = focus_of(out)
    by_pod = {r["x_Pod"]: r for r in focus}
    assert (by_pod["train"]["x_Claim"], by_pod["train"]["x_Driver"]) == ("train-gpu-x7k2p", HAMI_DRV)
    assert (by_pod["legacy"]["x_Claim"], by_pod["legacy"]["x_Driver"]) == ("", "")
    idle_drivers = {r["x_GpuUuid"]: (r["x_Claim"], r["x_Driver"]) for r in focus if r["ResourceType"] == "GPU"}
    assert idle_drivers[NPU] == ("", ASCEND_DRV) and idle_drivers[GPU_PLUGIN] == ("", "")
    assert sum(Decimal(r["BilledCost"]) for r in focus) == GPU_COST


def test_usage_basis_bills_allocation_where_no_reader_measured_usage(node_db, tmp_path):
    """Measured usage: train max(10/80, 0.25) = 0.25, notebook max(5/80, 0.125) = 0.125,
    render-a max(8/80, 0.25) = 0.25, render-b 0.375, infer 0.625, legacy max(20/80, 0.25) =
    0.25. The Ascend has no reader: its allocation 0.4 stands in, and the line says so; the
    monitor's allocation is 0, so is its bill."""
    detail = detail_of(export(node_db, tmp_path / "u", "--basis", "usage"))
    lines = usage_lines(detail)
    assert {p: r["gpu_hours_billed"] for p, r in lines.items()} == {
        "train": Decimal("0.25"), "notebook": Decimal("0.125"), "render-a": Decimal("0.25"),
        "render-b": Decimal("0.375"), "gpu-monitor": Decimal(0), "infer": Decimal("0.625"),
        "npu-job": Decimal("0.4"), "legacy": Decimal("0.25")}
    assert {p: r["usage_unknown_hours"] for p, r in lines.items() if r["usage_unknown_hours"]} == {
        "npu-job": Decimal(1), "gpu-monitor": Decimal(1)}
    assert lines["npu-job"]["waste"] == 0 and lines["npu-job"]["cost"] == Decimal("0.64")
    # acme: train 0.60 + infer 1.50 + npu-job 0.64 + legacy 0.60; globex: notebook 0.30 +
    # render-a 0.60 + render-b 0.90
    assert cost_by_tenant(detail) == {"acme": Decimal("3.34"), "globex": Decimal("1.80"), "platform": Decimal("8.46")}
    focus = {r["x_Pod"]: r for r in focus_of(tmp_path / "u")}
    assert focus["npu-job"]["x_UsageUnknownHours"] == "1.0000" and focus["train"]["x_UsageUnknownHours"] == "0.0000"


def test_a_closed_month_keeps_claims_drivers_and_unknown_usage(node_db, tmp_path):
    db = tmp_path / "closed.duckdb"
    db.write_bytes(node_db.read_bytes())
    before = detail_of(export(db, tmp_path / "open", "--basis", "usage"))
    assert main(["close", "--db", str(db), "--month", MONTH]) == 0
    assert detail_of(export(db, tmp_path / "closed", "--basis", "usage")) == before


def test_focus_files_with_dra_lines_pass_the_focus_validator(node_db, tmp_path):
    out = export(node_db, tmp_path / "f", "--idle", "shared", "--basis", "usage")
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "focus_validate.py"), str(out / f"focus-{MONTH}.csv")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and " 0 failed" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------- claims that come and go

def lifecycle_slices(i: int) -> list[SliceReading]:
    """Tick i of the hour (0-59) on three GPUs:
    - GPU-L1: claim `job` (0.25) deleted after tick 19, nothing for 5 Ticks, re-created with a
      new UID and 0.5 from tick 25, same pod, container and GPU;
    - GPU-L2: pod `server` restarted on claim `serve` (0.5) with a new pod UID: the old one
      until tick 30, the new one from tick 30, both reserved (half the share each) at tick 30;
    - GPU-L3: time-sliced claim `ts` reserved for `q1` alone (1), then also for `q2` from
      tick 30 (1/2 each)."""
    out = []
    reading = used(GiB, 0.125)
    if i < 20:
        out.append(dra("job", "team-a", "GPU-L1", "job", claim_uid(1), HAMI_DRV, 0.25, 0.25, **reading))
    elif i >= 25:
        out.append(dra("job", "team-a", "GPU-L1", "job", claim_uid(9), HAMI_DRV, 0.5, 0.5, **reading))
    server = 0.25 if i == 30 else 0.5
    if i <= 30:
        out.append(dra("server", "team-a", "GPU-L2", "serve", claim_uid(2), NV_DRV, server, server,
                       pod_uid="uid-server-1", **reading))
    if i >= 30:
        out.append(dra("server", "team-a", "GPU-L2", "serve", claim_uid(2), NV_DRV, server, server,
                       pod_uid="uid-server-2", **reading))
    q = 1.0 if i < 30 else 0.5
    out.append(dra("q1", "team-b", "GPU-L3", "ts", claim_uid(3), NV_DRV, q, q, **reading))
    if i >= 30:
        out.append(dra("q2", "team-b", "GPU-L3", "ts", claim_uid(3), NV_DRV, q, q, **reading))
    return out


def test_claims_deleted_recreated_restarted_and_reshared_bill_the_ticks_exactly(tmp_path):
    ticks = hour_of_ticks([a100(g, NV_DRV, n) for n, g in enumerate(("GPU-L1", "GPU-L2", "GPU-L3"))],
                          lifecycle_slices)
    db = store_file(tmp_path / "life.duckdb", ticks)
    # what the Ticks said, in exact micro-GPU-seconds per container
    sent: dict[str, Fraction] = {}
    for t in ticks:
        for s in t.slices:
            sent[s.pod_uid] = sent.get(s.pod_uid, 0) + Fraction(s.alloc_mem_share_ratio) * t.interval_ms * 1000
    # by hand: job 20 x 60 s x 0.25 + 35 x 60 s x 0.5 = 1350 s; server 30 x 30 s + 15 s = 915 s
    # before the restart, 15 s + 29 x 30 s = 885 s after; q1 30 x 60 s + 30 x 30 s = 2700 s, q2 900 s
    assert sent == {"uid-job": 1_350_000_000, "uid-server-1": 915_000_000, "uid-server-2": 885_000_000,
                    "uid-q1": 2_700_000_000, "uid-q2": 900_000_000}
    con = connect(db, read_only=True)
    try:
        lines, gpus = cb.month_lines(con, date(2026, 11, 1), None, load_prices(DEFAULT_PRICES), "allocation", "platform", "dominant")
    finally:
        con.close()
    billed = {ln["pod_uid"]: ln["billed_u"] for ln in lines if ln["kind"] == "usage"}
    assert billed == sent
    # nothing twice, nothing lost: each GPU's slices and idle fill its hour exactly
    idle = {g["gpu_uuid"]: g["idle_u"] for g in gpus}
    assert idle == {"GPU-L1": 3_600_000_000 - 1_350_000_000, "GPU-L2": 3_600_000_000 - 1_800_000_000, "GPU-L3": 0}
    (job,) = [ln for ln in lines if ln["pod_uid"] == "uid-job"]
    assert (job["claim"], job["driver"]) == ("job", HAMI_DRV)
    detail = detail_of(export(db, tmp_path / "o"))
    # 2.40 per GPU-hour: job 0.375 h = 0.90, server 0.2541667 h = 0.61 and 0.2458333 h = 0.59,
    # q1 0.75 h = 1.80, q2 0.25 h = 0.60
    assert {r["pod_uid"]: r["cost"] for r in detail if r["kind"] == "usage"} == {
        "uid-job": Decimal("0.90"), "uid-server-1": Decimal("0.61"), "uid-server-2": Decimal("0.59"),
        "uid-q1": Decimal("1.80"), "uid-q2": Decimal("0.60")}
    assert sum(r["cost"] for r in detail) == 3 * A100_PRICE
