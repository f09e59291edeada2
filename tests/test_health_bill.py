"""GPU health in the store and the bill: an hour of Xid 79 on one GPU goes through the real
broker and `slicemeter ingest`, shows in the health timeline with the tenants it touched,
and with the credit policy on becomes Credit rows in the invoice and FOCUS that reconcile
(docs/health.md, In the bill). ECC and throttling edge cases run through ingest's writer."""
from __future__ import annotations

import csv
import os
import subprocess
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from slicemeter import store, tick
from slicemeter.chargeback.bill import check_credit_basis, credit_lines, InvariantError
from slicemeter.ingest.strings import StringIds
from slicemeter.ingest.writer import Batch, write_batch
from slicemeter.testkit import health_ticks as ht
from slicemeter.testkit.ingest_helpers import SLICEMETER, create_topic, produce_raw

REPO = Path(__file__).resolve().parent.parent
NOW = {"SLICEMETER_NOW": "2026-12-01T09:00Z"}
MONTH = "2026-11"
XID_79 = {"xid_events": 1, "xid_last_code": 79, "xid_critical_code": 79}
PRICES = """currency: USD
gpu_hour: {"NVIDIA A100-SXM4-80GB": "2.40"}
"""


def slicemeter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SLICEMETER, *args], cwd=REPO, capture_output=True, text=True, timeout=180,
                          env=os.environ | NOW)


def rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def fault_db(tmp_path_factory):
    """Three hours from 09:00 on 2026-11-02: GPU-A (acme's train, half the GPU) throws Xid 79
    on every Tick of the 10:00 hour; GPU-A2 (acme's nb, a quarter) and GPU-B (globex's serve,
    half) stay healthy. Produced to Tansu, stored by `slicemeter ingest --until-idle`."""
    from slicemeter.broker import TansuBroker

    tmp = tmp_path_factory.mktemp("fault")
    with TansuBroker(log_path=tmp / "tansu.log") as broker:
        create_topic(broker.bootstrap, partitions=2)
        produce_raw(broker.bootstrap, ht.messages(ht.Plan(faults={("GPU-A", 1): XID_79})))
        tenants, db = tmp / "tenants.yaml", tmp / "live.duckdb"
        tenants.write_text(ht.TENANTS_YAML)
        ing = slicemeter("ingest", "--kafka", broker.bootstrap, "--db", str(db), "--tenants", str(tenants),
                         "--group", "", "--until-idle", "3")
        assert ing.returncode == 0, ing.stderr
    return db


def test_the_health_timeline_shows_the_xid_hour_on_that_gpu_only(fault_db):
    con = store.connect(fault_db, read_only=True)
    try:
        events = con.execute("SELECT hour::VARCHAR, gpu_uuid, what, degraded FROM gpu_health_events(?, ?, 0.25)",
                             ["2026-11-01", "2026-12-01"]).fetchall()
        timeline = con.execute("SELECT gpu_uuid, count(*), sum(xid_events), sum(xid_critical_count) "
                               "FROM gpu_health('2026-11-01', '2026-12-01') GROUP BY ALL ORDER BY 1").fetchall()
    finally:
        con.close()
    assert events == [("2026-11-02 10:00:00", "GPU-A", "Xid 79 (critical); 60 Xid events", True)]
    assert timeline == [("GPU-A", 3, 60, 60), ("GPU-A2", 3, 0, 0), ("GPU-B", 3, 0, 0)]


def test_only_the_tenant_on_the_faulty_gpu_has_degraded_hours(fault_db):
    con = store.connect(fault_db, read_only=True)
    try:
        degraded = con.execute("SELECT tenant, degraded_gpu_hours, degraded_gpu_hours_touched "
                               "FROM tenant_degraded_hours('2026-11-01', '2026-12-01', 0.25)").fetchall()
        on_it = con.execute("SELECT pod, hour::VARCHAR FROM slice_hour_health('2026-11-01', '2026-12-01', 0.25) "
                            "WHERE gpu_degraded").fetchall()
    finally:
        con.close()
    assert degraded == [("acme", 0.5, 1)]       # train's half of GPU-A for the hour; globex none
    assert on_it == [("train", "2026-11-02 10:00:00")]


def _export(db: Path, out: Path, prices: str, idle: str) -> subprocess.CompletedProcess:
    catalog = out.parent / f"{out.name}.yaml"
    catalog.write_text(prices)
    return slicemeter("export", "--db", str(db), "--month", MONTH, "--out", str(out), "--prices", str(catalog),
                      "--idle", idle)


@pytest.mark.parametrize("idle", ["platform", "shared"])
@pytest.mark.parametrize("fraction, credit", [("1.0", "1.20"), ("0.5", "0.60")])
def test_credits_are_credit_rows_that_reconcile(fault_db, tmp_path, idle, fraction, credit):
    out = tmp_path / "credits"
    ex = _export(fault_db, out, PRICES + f'credits: {{degraded_hour: "{fraction}"}}\n', idle)
    assert ex.returncode == 0, ex.stderr
    # 3 GPUs x 3 hours x 2.40; train's hour on GPU-A was 0.5 x 2.40 = 1.20, credited x fraction
    total = Decimal("21.60") - Decimal(credit)
    assert f"total {total} USD, GPU cost 21.60, credits {credit}" in ex.stderr
    invoice = rows(out / f"invoice-{MONTH}.csv")
    credits = [r for r in invoice if r["line"] == "credit"]
    assert [(r["tenant"], r["namespace"], r["cost"], r["charge"]) for r in credits] == \
        [("acme", "ml", f"-{credit}", f"-{credit}")]
    by_line = {(r["line"], r["tenant"]): Decimal(r["cost"]) for r in invoice}
    charges = {(r["line"], r["tenant"]): Decimal(r["charge"]) for r in invoice}
    assert charges[("usage", "acme")] == Decimal("5.40") and charges[("usage", "globex")] == Decimal("3.60")
    # the credits are the platform's: charges + idle = GPU cost and the bill is that less the
    # credits, to the cent
    idle_total = sum(Decimal(r["idle_share"]) for r in invoice) + by_line[("idle", "platform")]
    assert charges[("usage", "acme")] + charges[("usage", "globex")] + idle_total == Decimal("21.60")
    assert sum(Decimal(r["cost"]) for r in invoice) == total
    focus = rows(out / f"focus-{MONTH}.csv")
    fc = [r for r in focus if r["ChargeCategory"] == "Credit"]
    assert [(r["BillingAccountId"], r["x_GpuUuid"], r["x_Pod"], r["BilledCost"], r["EffectiveCost"],
             r["ConsumedQuantity"]) for r in fc] == [("acme", "GPU-A", "train", f"-{credit}", f"-{credit}", "")]
    assert sum(Decimal(r["BilledCost"]) for r in focus) == total
    detail = pq.read_table(out / f"detail-{MONTH}.parquet").to_pylist()
    per_gpu: dict[str, Decimal] = {}
    for r in detail:
        if r["kind"] != "credit":
            per_gpu[r["gpu_uuid"]] = per_gpu.get(r["gpu_uuid"], Decimal(0)) + r["charge"]
    if idle == "platform":     # each GPU: its slices' charges + its idle = 3 h x 2.40
        assert per_gpu == {"GPU-A": Decimal("7.20"), "GPU-A2": Decimal("7.20"), "GPU-B": Decimal("7.20")}


def test_credits_off_exports_are_byte_identical_and_have_no_credit_rows(fault_db, tmp_path):
    files = {}
    for name, prices in (("off", PRICES), ("zero", PRICES + 'credits: {degraded_hour: "0"}\n')):
        ex = _export(fault_db, tmp_path / name, prices, "platform")
        assert ex.returncode == 0, ex.stderr
        assert "credits" not in ex.stderr
        files[name] = {p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir())}
    assert files["off"] == files["zero"]
    assert b"credit" not in files["off"][f"invoice-{MONTH}.csv"]
    assert b"Credit" not in files["off"][f"focus-{MONTH}.csv"]


def test_a_closed_month_keeps_its_credits(fault_db, tmp_path):
    import shutil

    db = tmp_path / "closed.duckdb"
    shutil.copy(fault_db, db)
    catalog = tmp_path / "c.yaml"
    catalog.write_text(PRICES + 'credits: {degraded_hour: "1.0"}\n')
    closed = slicemeter("close", "--db", str(db), "--month", MONTH, "--prices", str(catalog))
    assert closed.returncode == 0, closed.stderr
    con = store.connect(db)
    con.execute("DELETE FROM gpu_hour")        # the live rollups cannot say what happened
    con.close()
    ex = slicemeter("export", "--db", str(db), "--month", MONTH, "--out", str(tmp_path / "o"))
    assert ex.returncode == 0, ex.stderr
    assert [r["cost"] for r in rows(tmp_path / "o" / f"invoice-{MONTH}.csv") if r["line"] == "credit"] == ["-1.20"]


# ---------------------------------------------------------------- through ingest's writer

def _store(tmp_path, plan: ht.Plan, batches: int = 3):
    """`plan`'s messages stored by ingest's writer in `batches` batches (deltas folded at the end)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    con = store.connect(tmp_path / "h.duckdb")
    ids = StringIds(con)
    msgs = ht.messages(plan, ticks_per_message=10)
    step = -(-len(msgs) // batches)
    for i in range(0, len(msgs), step):
        b = Batch(next_offsets={("t", 0): i})
        for _, payload in msgs[i:i + step]:
            b.add_tables(tick.decode(payload))
        write_batch(con, b, ids, fold=False)
    store.fold_pending_rollups(con)
    return con


def _health(con, gpu: str = "GPU-A") -> list[tuple]:
    return con.execute("SELECT ecc_uncorrected_increase, throttled_s, degraded FROM "
                       "gpu_health_degraded('2026-11-01', '2026-12-01', 0.25) WHERE gpu_uuid = ? ORDER BY hour",
                       [gpu]).fetchall()


def _counter(values_by_minute):
    """per_tick giving GPU-A's uncorrectable ECC counters from minute -> (aggregate, volatile)."""
    def per_tick(gpu, ts):
        if gpu != "GPU-A":
            return {}
        agg, vol = values_by_minute((ts - ht.Plan().start_ms) // 60_000)
        return {"ecc_uncorrected_aggregate": agg, "ecc_uncorrected_volatile": vol}
    return per_tick


def test_ecc_increase_within_an_hour_and_across_the_boundary(tmp_path):
    # aggregate: 0 until 09:30, 2 from then, 3 from exactly 11:00 (the increase falls between
    # the last sample of 10:00 and the first of 11:00)
    con = _store(tmp_path, ht.Plan(per_tick=_counter(lambda m: (0 if m < 30 else 2 if m < 120 else 3, 0))))
    assert _health(con) == [(2, 0.0, True), (0, 0.0, False), (1, 0.0, True)]


def test_a_volatile_reset_is_no_error_and_the_aggregate_counter_wins(tmp_path):
    # the driver reloads at 10:20: volatile 4 -> 0, aggregate (survives) stays at 4
    con = _store(tmp_path, ht.Plan(per_tick=_counter(lambda m: (4, 4 if m < 80 else 0))))
    assert _health(con) == [(0, 0.0, False)] * 3
    # a board without the aggregate counter: the reset is not an error, growth after it is
    con = _store(tmp_path / "v", ht.Plan(per_tick=_counter(lambda m: (None, 4 if m < 80 else 0 if m < 150 else 1))))
    assert _health(con) == [(0, 0.0, False), (0, 0.0, False), (1, 0.0, True)]


THERMAL, POWER_CAP = 0x40, 0x4


@pytest.mark.parametrize("minutes, reasons, degraded", [
    (15, THERMAL, False),             # exactly a quarter of the hour: not more than the share
    (16, THERMAL, True),
    (16, 0x8 | 0x1, True),            # HW_SLOWDOWN beside GPU_IDLE
    (60, POWER_CAP, False),           # a software power cap is no fault
    (60, 0x1, False),                 # idle
])
def test_throttled_share_threshold(tmp_path, minutes, reasons, degraded):
    def per_tick(gpu, ts):
        m = (ts - ht.Plan().start_ms) // 60_000
        return {"clock_event_reasons": reasons} if gpu == "GPU-A" and 60 <= m < 60 + minutes else {}
    con = _store(tmp_path, ht.Plan(per_tick=per_tick))
    throttled = minutes * 60.0 if reasons & 0xE8 else 0.0
    assert _health(con)[1] == (0, throttled, degraded)


def test_the_catalog_sets_the_throttled_share(tmp_path):
    from slicemeter.chargeback.prices import parse_prices_text

    catalog = parse_prices_text(PRICES + 'degraded: {throttled_share: "0.1"}\n')
    def per_tick(gpu, ts):
        m = (ts - ht.Plan().start_ms) // 60_000
        return {"clock_event_reasons": 0x20} if gpu == "GPU-A" and 60 <= m < 70 else {}
    con = _store(tmp_path, ht.Plan(per_tick=per_tick))
    share = float(catalog.throttled_share)
    got = con.execute("SELECT degraded FROM gpu_health_degraded('2026-11-01', '2026-12-01', ?) "
                      "WHERE gpu_uuid = 'GPU-A' ORDER BY hour", [share]).fetchall()
    assert got == [(False,), (True,), (False,)]


def test_a_lost_gpu_hour_is_degraded(tmp_path):
    con = _store(tmp_path, ht.Plan(faults={("GPU-B", 2): {"gpu_lost": True}}))
    assert _health(con, "GPU-B") == [(0, 0.0, False), (0, 0.0, False), (0, 0.0, True)]


# ---------------------------------------------------------------- pure money steps

def _degraded(**kw) -> dict:
    return {"tenant": "acme", "namespace": "ml", "pod": "p", "pod_uid": "u", "container": "c", "cluster": "k",
            "node": "n", "gpu_uuid": "G", "model": "M", "price_micro": 2_400_000} | kw


def test_credit_lines_are_the_fraction_of_the_degraded_charge_floored_to_raw_units():
    [line] = credit_lines([_degraded(degraded_u=1_800_000_000)], Decimal("0.333333"))
    assert line["kind"] == "credit" and line["cost_raw"] == line["charge_raw"]
    assert line["cost_raw"] == -(2_400_000 * 1_800_000_000 * 333_333 // 1_000_000)
    assert credit_lines([_degraded(degraded_u=1_800_000_000)], Decimal("0")) == []


def test_the_credit_basis_check_names_a_gpu_whose_sides_differ():
    check_credit_basis([_degraded(degraded_u=5)], [_degraded(degraded_u=5)])
    with pytest.raises(InvariantError, match="G on k / n: slices 5, GPU-hours 7"):
        check_credit_basis([_degraded(degraded_u=5)], [_degraded(degraded_u=7)])


# ---------------------------------------------------------------- dashboard

def _frame_with(at, column: str):
    frames = [d.value for d in at.dataframe if column in d.value.columns]
    assert frames, f"no table with column {column!r}"
    return frames[0]


def test_the_gpus_page_shows_the_xid_hour_with_the_tenants_on_that_gpu(fault_db, monkeypatch):
    from slicemeter.testkit.dashboard_app import run_app

    at = run_app(fault_db, monkeypatch, "gpus")
    events = _frame_with(at, "what")
    assert [(str(r.hour), r.gpu_uuid, r.what, bool(r.degraded), r.tenants) for r in events.itertuples()] == \
        [("2026-11-02 10:00:00", "GPU-A", "Xid 79 (critical); 60 Xid events", True, "acme")]


@pytest.mark.parametrize("credits", [False, True])
def test_the_tenants_page_shows_degraded_gpu_hours_and_credits(fault_db, monkeypatch, tmp_path, credits):
    import slicemeter.chargeback.bill as bill_module
    import slicemeter.chargeback.prices as prices_module
    from slicemeter.testkit.dashboard_app import run_app

    catalog = tmp_path / "prices.yaml"
    catalog.write_text(PRICES + ('credits: {degraded_hour: "1.0"}\n' if credits else ""))
    monkeypatch.setattr(prices_module, "DEFAULT_PRICES", catalog)
    monkeypatch.setattr(bill_module, "DEFAULT_PRICES", catalog)
    import streamlit as st
    st.cache_data.clear()
    at = run_app(fault_db, monkeypatch, "tenants")
    table = _frame_with(at, "degraded_gpu_hours").set_index("tenant")
    assert table["degraded_gpu_hours"].to_dict() == {"acme": 0.5, "globex": 0.0}
    assert table["degraded_gpu_hours_touched"].to_dict() == {"acme": 1, "globex": 0}
    if credits:
        assert table["credits"].to_dict() == {"acme": "$1.20", "globex": "$0.00"}
    else:
        assert "credits" not in table.columns


def test_the_report_names_each_tenants_degraded_gpu_hours(fault_db, tmp_path):
    rep = slicemeter("report", "--db", str(fault_db), "--month", MONTH, "--out", str(tmp_path / "r.md"))
    assert rep.returncode == 0, rep.stderr
    line = ("Degraded GPUs (a critical Xid, an uncorrectable ECC error, lost, or throttled past the catalog's "
            "share of the hour): acme 0.50 GPU-h on 1 degraded GPU-hours.")
    assert line in rep.stdout
    assert f"- {line}" in (tmp_path / "r.md").read_text()
