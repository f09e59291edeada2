"""Monthly exports through the real CLI: determinism, --tenant, close and corrections, FOCUS."""
import csv
import importlib.util
import io
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from slicemeter.testkit.cb_rows import ACME, GLOBEX, add_gpu, add_slice, add_tenants
from slicemeter.chargeback.bill import compute_bill
from slicemeter.testkit.synth_month import synthesize_month
from slicemeter.store import connect
from slicemeter.cli import main

REPO = Path(__file__).resolve().parent.parent
FOCUS_VALIDATE = REPO / "tools" / "focus_validate.py"


def export(db, out, *extra) -> int:
    return main(["export", "--db", str(db), "--month", extra[0] if extra else "2026-11", "--out", str(out),
                 *extra[1:]])


def read_csv(path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(Path(path).read_text())))


def files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.fixture
def month_db(tmp_path):
    db = tmp_path / "m.duckdb"
    con = connect(db)
    synthesize_month(con, "2026-11", gpus=10, tenants=2, seed=3)
    con.close()
    return db


def test_export_writes_every_file_and_is_byte_identical(month_db, tmp_path):
    assert export(month_db, tmp_path / "a", "2026-11", "--basis", "max", "--idle", "shared") == 0
    # the second run in a fresh process (different hash seed, fresh DuckDB)
    proc = subprocess.run([sys.executable, "-m", "slicemeter.cli", "export", "--db", str(month_db), "--month",
                           "2026-11", "--out", str(tmp_path / "b"), "--basis", "max", "--idle", "shared"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    a, b = files(tmp_path / "a"), files(tmp_path / "b")
    assert sorted(a) == ["detail-2026-11.parquet", "focus-2026-11.csv", "focus-2026-11.parquet",
                         "invoice-2026-11.csv", "unmetered-2026-11.csv"]
    assert a == b
    # a different option gives a different bill, so the comparison above could fail
    assert export(month_db, tmp_path / "c", "2026-11", "--basis", "usage") == 0
    assert files(tmp_path / "c")["invoice-2026-11.csv"] != a["invoice-2026-11.csv"]


def test_the_files_are_written_with_duckdbs_memory_bound_lowered(month_db, tmp_path, monkeypatch):
    """The bill's working tables are done with before the files: DuckDB is bounded lower
    then, so that its buffers are handed back and do not peak with Python's file building;
    the files' Arrow buffers come from the C library's allocator."""
    from slicemeter.chargeback import export_cli

    import pyarrow as pa

    seen = {}
    real = export_cli.write_exports

    def write_exports(con, *args, **kwargs):
        seen["limit"] = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        seen["arrow"] = pa.default_memory_pool().backend_name
        return real(con, *args, **kwargs)

    monkeypatch.setattr(export_cli, "write_exports", write_exports)
    assert export(month_db, tmp_path / "a") == 0
    def reported(limit: str) -> str:   # the bound as DuckDB writes it back
        scratch = duckdb.connect()
        scratch.execute(f"SET memory_limit = '{limit}'")
        return scratch.execute("SELECT current_setting('memory_limit')").fetchone()[0]

    assert seen["limit"] == reported(export_cli.FILES_MEMORY_LIMIT) != reported(export_cli.MEMORY_LIMIT)
    # and Arrow's buffers come from the C library (slicemeter.common.arrow_on_system_allocator)
    assert seen["arrow"] == "system"


@pytest.mark.parametrize("args", [("2026-09",), ("2026-11", "--tenant", "nosuch")], ids=["month", "tenant"])
def test_a_month_without_charges_is_refused_and_writes_nothing(month_db, tmp_path, capsys, args):
    out = tmp_path / "out"
    assert export(month_db, out, *args) == 4
    assert not out.exists() or not any(out.iterdir())
    assert "has no charge to bill" in capsys.readouterr().err


def test_invoice_csv_columns_and_total(month_db, tmp_path):
    assert export(month_db, tmp_path / "o") == 0
    rows = read_csv(tmp_path / "o" / "invoice-2026-11.csv")
    assert list(rows[0])[:6] == ["charge_class", "charge_period", "line", "tenant", "namespace", "gpu_model"]
    for col in ("gpu_hours_allocated", "gpu_hours_used", "cost", "waste", "kwh", "gco2e"):
        assert col in rows[0]
    con = connect(month_db)
    bill = compute_bill(con, "2026-11")
    con.close()
    assert sum(Decimal(r["cost"]) for r in rows) == bill.total == bill.gpu_cost
    detail = pq.read_table(tmp_path / "o" / "detail-2026-11.parquet")
    assert sum(detail.column("cost").to_pylist()) == bill.total
    assert {r["tenant"] for r in rows} == {"t0", "t1", "platform"}


def test_tenant_export_holds_only_that_tenant(month_db, tmp_path):
    assert export(month_db, tmp_path / "t", "2026-11", "--tenant", "t1") == 0
    out = tmp_path / "t"
    assert sorted(p.name for p in out.iterdir()) == ["detail-2026-11-t1.parquet", "focus-2026-11-t1.csv",
                                                      "focus-2026-11-t1.parquet", "invoice-2026-11-t1.csv"]
    rows = read_csv(out / "invoice-2026-11-t1.csv")
    assert rows and {r["tenant"] for r in rows} == {"t1"}
    assert {r["BillingAccountId"] for r in read_csv(out / "focus-2026-11-t1.csv")} == {"t1"}
    assert set(pq.read_table(out / "detail-2026-11-t1.parquet").column("tenant").to_pylist()) == {"t1"}


@pytest.mark.parametrize("args, key", [
    (["--tenant", "../etc"], "--tenant"),
    (["--basis", "wishful"], "--basis"),
    (["--idle", "nobody"], "--idle"),
])
def test_bad_options_are_config_errors(month_db, tmp_path, capsys, args, key):
    assert export(month_db, tmp_path / "x", "2026-11", *args) == 2
    assert key in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_bad_month_and_prices(month_db, tmp_path, capsys):
    assert export(month_db, tmp_path / "x", "2026-13") == 2
    bad = tmp_path / "p.yaml"
    bad.write_text('currency: USD\ngpu_hour: {"NVIDIA L4": "cheap"}\n')
    assert export(month_db, tmp_path / "x", "2026-11", "--prices", str(bad)) == 2
    assert 'p.yaml:2: gpu_hour."NVIDIA L4": not a decimal' in capsys.readouterr().err


# ---------------------------------------------------------------- close and corrections

def hand_month(db):
    con = connect(db)
    add_tenants(con)
    for h in range(3):
        hour = f"2026-10-31 2{h}:00:00"
        add_gpu(con, hour=hour)
        add_slice(con, "a", alloc=0.5, hour=hour, cluster=ACME)
        add_slice(con, "g", alloc=0.25, hour=hour, cluster=GLOBEX)
    add_gpu(con, hour="2026-11-01 00:00:00")
    add_slice(con, "a", alloc=0.5, hour="2026-11-01 00:00:00", cluster=ACME)
    con.close()


def test_late_data_for_a_closed_month_becomes_a_correction(tmp_path):
    db = tmp_path / "c.duckdb"
    hand_month(db)
    assert main(["close", "--db", str(db), "--month", "2026-10"]) == 0
    assert export(db, tmp_path / "oct1", "2026-10") == 0
    oct_before = files(tmp_path / "oct1")
    nov_rows = read_csv(_export_focus(db, tmp_path / "nov0"))
    assert all(r["ChargeClass"] == "" for r in nov_rows)

    # a late Tick for October: another 25 % slice in its last hour, and more of acme's hour
    con = connect(db)
    add_slice(con, "late", alloc=0.25, hour="2026-10-31 23:00:00", cluster=GLOBEX, gpu="GPU-9")
    add_gpu(con, hour="2026-10-31 23:00:00", gpu="GPU-9")
    con.close()

    # the closed month's files never change
    assert export(db, tmp_path / "oct2", "2026-10") == 0
    assert files(tmp_path / "oct2") == oct_before

    # November carries the difference as Correction rows dated October
    focus = read_csv(_export_focus(db, tmp_path / "nov1"))
    corr = [r for r in focus if r["ChargeClass"] == "Correction"]
    assert corr and {r["ChargePeriodStart"] for r in corr} == {"2026-10-01T00:00:00Z"}
    assert {r["BillingPeriodStart"] for r in corr} == {"2026-11-01T00:00:00Z"}
    # the new GPU-hour is 2.40: 0.60 to globex's late slice, 1.80 idle on the platform
    assert sum(Decimal(r["BilledCost"]) for r in corr) == Decimal("2.40")
    assert sorted(Decimal(r["BilledCost"]) for r in corr) == [Decimal("0.60"), Decimal("1.80")]
    inv = read_csv(tmp_path / "nov1" / "invoice-2026-11.csv")
    assert {r["charge_class"] for r in inv} == {"Regular", "Correction"}
    assert sum(Decimal(r["cost"]) for r in inv) == Decimal("2.40") + Decimal("2.40")

    # closing November freezes the correction too: more late October data goes to December
    assert main(["close", "--db", str(db), "--month", "2026-11"]) == 0
    nov_closed = files(tmp_path / "nov1")
    again = tmp_path / "nov2"
    assert export(db, again, "2026-11") == 0
    assert files(again) == nov_closed
    con = connect(db)
    add_slice(con, "later", alloc=0.5, hour="2026-10-31 23:00:00", cluster=ACME, gpu="GPU-9")
    con.close()
    assert export(db, tmp_path / "nov3", "2026-11") == 0
    assert files(tmp_path / "nov3") == nov_closed
    dec = read_csv(_export_focus(db, tmp_path / "dec", "2026-12"))
    assert [Decimal(r["BilledCost"]) for r in dec if r["ChargeClass"] == "Correction" and r["BillingAccountId"] == "acme"] \
        == [Decimal("1.20")]


def _export_focus(db, out, month="2026-11") -> Path:
    assert export(db, out, month) == 0
    return out / f"focus-{month}.csv"


def test_months_close_in_order_and_once(tmp_path, capsys):
    db = tmp_path / "c.duckdb"
    hand_month(db)
    assert main(["close", "--db", str(db), "--month", "2026-11"]) == 2
    assert "close 2026-10 first" in capsys.readouterr().err
    assert main(["close", "--db", str(db), "--month", "2026-10"]) == 0
    assert main(["close", "--db", str(db), "--month", "2026-10"]) == 2
    assert "already closed" in capsys.readouterr().err


def test_a_month_no_price_applies_to_is_not_closed_until_a_sample_names_the_model(tmp_path, capsys):
    """A GPU-hour only slices reported (its NVML down) and whose model no sample of the month
    named cannot be priced: the close is refused, naming it, and nothing is frozen (a frozen
    copy without a price would fail every later invoice that carries its corrections)."""
    db = tmp_path / "c.duckdb"
    con = connect(db)
    add_tenants(con)
    add_slice(con, "a", alloc=0.25, hour="2026-10-31 23:00:00", gpu="GPU-9")
    con.close()
    assert main(["close", "--db", str(db), "--month", "2026-10"]) == 2
    err = capsys.readouterr().err
    assert "month 2026-10: not closed, GPU model unknown for GPU-9" in err and "2026-10-31T23:00" in err
    con = connect(db)
    assert con.execute("SELECT count(*) FROM closed_months").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM frozen_slice_hour").fetchone()[0] == 0
    add_gpu(con, hour="2026-10-31 22:00:00", gpu="GPU-9")      # an earlier hour names its model
    con.close()
    assert main(["close", "--db", str(db), "--month", "2026-10"]) == 0
    con = connect(db)
    try:
        add_slice(con, "late", alloc=0.5, hour="2026-10-31 23:00:00", gpu="GPU-9")
        bill = compute_bill(con, "2026-11")
        corrected = set(bill.detail.loc[bill.detail["charge_class"] == "Correction", "pod"])
        assert corrected - {""} == {"late"}    # and the idle line the late slice moved
    finally:
        con.close()


# ---------------------------------------------------------------- FOCUS validator

def _load_tool():
    spec = importlib.util.spec_from_file_location("focus_validate", FOCUS_VALIDATE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_focus_files_pass_the_focus_validator(tmp_path):
    """CSV and Parquet, with Regular, idle and Correction rows, under the shared idle policy,
    checked by the repository's own tool (it sets up focus-validator's environment itself)."""
    db = tmp_path / "f.duckdb"
    hand_month(db)
    con = connect(db)
    synthesize_month(con, "2026-11", gpus=4, tenants=2, seed=1)
    con.close()
    assert main(["close", "--db", str(db), "--month", "2026-10"]) == 0
    con = connect(db)
    add_slice(con, "late", alloc=0.25, hour="2026-10-31 22:00:00", cluster=GLOBEX)
    con.close()
    out = tmp_path / "focus"
    prices = tmp_path / "odd.yaml"
    prices.write_text(ODD_PRICES)
    assert export(db, out, "2026-11", "--idle", "shared", "--prices", str(prices)) == 0
    assert any(r["ChargeClass"] == "Correction" for r in read_csv(out / "focus-2026-11.csv"))
    proc = subprocess.run([sys.executable, str(FOCUS_VALIDATE), str(out / "focus-2026-11.csv")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout
    tool = _load_tool()
    status, fails = tool.validate(out / "focus-2026-11.parquet")
    assert fails == []
    # the unit price rules ran (and passed) rather than being skipped
    for rule in ("ListUnitPrice-C-010-C", "ListCost-C-009-C", "ContractedUnitPrice-C-011-C", "ListUnitPrice-C-005-C"):
        assert status[rule] == "pass", rule
    # and they can fail: one Regular row whose ListCost is a cent off its price x quantity
    rows = read_csv(out / "focus-2026-11.csv")
    i = next(i for i, r in enumerate(rows) if r["ChargeClass"] == "" and Decimal(r["ListCost"]) > 0)
    rows[i]["ListCost"] = str(Decimal(rows[i]["ListCost"]) + Decimal("0.01"))
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    assert tool.validate(bad)[1] == ["ListCost-C-009-C", "ListUnitPrice-C-010-C"]


ODD_PRICES = """currency: USD
gpu_hour: {"NVIDIA A100-SXM4-80GB": "2.370001", "NVIDIA L4": "0.333333", "NVIDIA H100 80GB HBM3": "3.999997",
           "Tesla T4": "0.35"}
"""


def test_focus_unit_prices_quantities_and_custom_columns(month_db, tmp_path):
    prices = tmp_path / "odd.yaml"
    prices.write_text(ODD_PRICES)
    assert export(month_db, tmp_path / "o", "2026-11", "--idle", "shared", "--prices", str(prices)) == 0
    text = (tmp_path / "o" / "focus-2026-11.csv").read_text()
    header = text.splitlines()[0].split(",")
    custom = ["x_Cluster", "x_Namespace", "x_Pod", "x_Container", "x_Node", "x_GpuUuid", "x_GpuModel",
              "x_UsageUnverifiedHours", "x_Claim", "x_Driver", "x_UsageUnknownHours", "x_UnverifiedAtAllocationHours"]
    assert header[-len(custom):] == custom and not any(c.startswith("x_") for c in header[:-len(custom)])
    rows = read_csv(tmp_path / "o" / "focus-2026-11.csv")
    parquet = pq.read_table(tmp_path / "o" / "focus-2026-11.parquet").to_pylist()
    detail = pq.read_table(tmp_path / "o" / "detail-2026-11.parquet").to_pylist()
    assert len(rows) == len(parquet) == len(detail)
    for r, p, d in zip(rows, parquet, detail):
        price, qty, cost = Decimal(r["ListUnitPrice"]), Decimal(r["PricingQuantity"]), Decimal(r["ListCost"])
        assert price == Decimal(r["ContractedUnitPrice"]) == d["gpu_hour_price"] > 0
        assert cost == Decimal(r["BilledCost"]) == Decimal(r["ContractedCost"]) == d["cost"]
        assert abs(price * qty - cost) <= Decimal("1e-9") and (price * qty).quantize(Decimal("0.01")) == cost
        assert p["PricingQuantity"] == qty and p["ListUnitPrice"] == price
        assert (r["x_Cluster"], r["x_Node"], r["x_GpuUuid"], r["x_GpuModel"]) == \
            (d["cluster"], d["node"], d["gpu_uuid"], d["model"])
        if d["kind"] == "usage":
            assert (r["x_Namespace"], r["x_Pod"], r["x_Container"]) == (d["namespace"], d["pod"], d["container"])
        else:
            assert (p["x_Namespace"], p["x_Pod"], p["x_Container"]) == (None, None, None)
    # a shared-idle tenant line pays for more GPU-hours than it was billed for, at the list price
    usage = [(Decimal(r["PricingQuantity"]), Decimal(r["ConsumedQuantity"])) for r in rows if r["ResourceType"] == "GPU slice"]
    assert any(q > c for q, c in usage)


def test_catalog_change_after_close_moves_money_by_correction_only(tmp_path):
    db = tmp_path / "c.duckdb"
    hand_month(db)
    assert main(["close", "--db", str(db), "--month", "2026-10"]) == 0
    assert export(db, tmp_path / "oct1", "2026-10") == 0
    con = connect(db)   # acme's namespace "ml" is now billed to globex
    con.execute("INSERT INTO tenant_namespace_overrides VALUES (?, 'ml', 'globex')", [ACME])
    con.close()
    assert export(db, tmp_path / "oct2", "2026-10") == 0
    assert files(tmp_path / "oct2") == files(tmp_path / "oct1")
    inv = read_csv(tmp_path / "nov" / "invoice-2026-11.csv") if export(db, tmp_path / "nov", "2026-11") == 0 else []
    corr = {r["tenant"]: Decimal(r["cost"]) for r in inv if r["charge_class"] == "Correction"}
    assert corr == {"acme": Decimal("-3.60"), "globex": Decimal("3.60")}


def test_tags_cell_is_what_json_dumps_writes():
    """The FOCUS Tags cell is written without json.dumps per row: same text for escapes,
    non-ASCII, nulls and non-string values, keys sorted under the tag prefix."""
    import json
    from slicemeter.chargeback.exports import TAG_PREFIX, tags_json
    tags = {"node": 'gpu-"node"\\1', "gpu-model": "NVIDIA é\u2028\x01", "kwh": None, "basis": "usage",
            "waste": 3, "a-b": "", "Z": "\t"}
    assert tags_json(tags) == json.dumps({TAG_PREFIX + k: v for k, v in tags.items()}, sort_keys=True,
                                         separators=(",", ":"))
