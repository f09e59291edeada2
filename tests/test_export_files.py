"""Monthly exports through the real CLI: determinism, --tenant, close and corrections, FOCUS."""
import csv
import io
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cb_rows import ACME, GLOBEX, add_gpu, add_slice, add_tenants
from ingest.chargeback import compute_bill
from ingest.chargeback_synth import synthesize_month
from ingest.store import connect
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
    assert "gpu_hour['NVIDIA L4']" in capsys.readouterr().err


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


# ---------------------------------------------------------------- FOCUS validator

def test_focus_files_pass_the_focus_validator(tmp_path):
    """CSV and Parquet, with Regular, idle and Correction rows, under the shared idle policy."""
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
    assert export(db, out, "2026-11", "--idle", "shared") == 0
    assert any(r["ChargeClass"] == "Correction" for r in read_csv(out / "focus-2026-11.csv"))
    for name in ("focus-2026-11.csv", "focus-2026-11.parquet"):
        proc = subprocess.run([sys.executable, str(FOCUS_VALIDATE), str(out / name)], capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert " 0 failed" in proc.stdout


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
