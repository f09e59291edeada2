"""The reconciliation invariant where fleets misbehave: GPUs that move, NVML down while
slices report, half-metered hours, odd prices and many small slices; and the engine's
own check, which stops an export that would not add up (real DuckDB files, the real CLI)."""
import csv
import io
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import slicemeter.chargeback.bill as cb
from slicemeter.testkit.cb_rows import A100, ACME, GLOBEX, add_gpu, add_slice, store_file
from slicemeter.chargeback.bill import compute_bill
from slicemeter.store import connect
from slicemeter.cli import main

MONTH = "2026-11"


@pytest.fixture
def db(tmp_path):
    return store_file(tmp_path / "inv.duckdb")


def rows_of(path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(Path(path).read_text())))


def export(db, out, *extra) -> int:
    return main(["export", "--db", str(db), "--month", MONTH, "--out", str(out), *extra])


def hour(h: int) -> str:
    return f"2026-11-01 {h:02d}:00:00"


def with_con(db, fill) -> None:
    con = connect(db)
    fill(con)
    con.close()


def bill_of(db, **kw):
    con = connect(db)
    try:
        return compute_bill(con, MONTH, **kw)
    finally:
        con.close()


def per_tenant(rows, tenant_col, cost_col) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for r in rows:
        out[r[tenant_col]] = out.get(r[tenant_col], Decimal(0)) + Decimal(r[cost_col])
    return out


# ---------------------------------------------------------------- a GPU that moves

def test_gpu_moving_between_clusters_mid_month_is_billed_on_both_sides(db, tmp_path, capsys):
    def fill(con):
        for h in range(3):      # on acme's node, half used by acme
            add_gpu(con, hour=hour(h), gpu="GPU-M", node="gpu-node-1", cluster=ACME)
            add_slice(con, "a", alloc=0.5, hour=hour(h), gpu="GPU-M", node="gpu-node-1", cluster=ACME)
        for h in range(3, 6):   # re-assigned to globex's cluster on another node, a quarter used
            add_gpu(con, hour=hour(h), gpu="GPU-M", node="gpu-node-9", cluster=GLOBEX)
            add_slice(con, "g", alloc=0.25, hour=hour(h), gpu="GPU-M", node="gpu-node-9", cluster=GLOBEX)
    with_con(db, fill)
    assert export(db, tmp_path / "o") == 0
    assert "total 14.40 USD, GPU cost 14.40" in capsys.readouterr().err
    detail = pq.read_table(tmp_path / "o" / f"detail-{MONTH}.parquet").to_pylist()
    idle = {(r["cluster"], r["node"]): (r["cost"], r["gpu_hours_idle"]) for r in detail if r["kind"] == "idle"}
    assert idle == {(ACME, "gpu-node-1"): (Decimal("3.60"), Decimal("1.5000")),
                    (GLOBEX, "gpu-node-9"): (Decimal("5.40"), Decimal("2.2500"))}
    usage = {r["tenant"]: (r["cluster"], r["node"], r["cost"]) for r in detail if r["kind"] == "usage"}
    assert usage == {"acme": (ACME, "gpu-node-1", Decimal("3.60")), "globex": (GLOBEX, "gpu-node-9", Decimal("1.80"))}
    assert all(r["cost"] >= 0 and r["gpu_hours_idle"] >= 0 for r in detail)
    focus = rows_of(tmp_path / "o" / f"focus-{MONTH}.csv")
    assert sum(Decimal(r["BilledCost"]) for r in focus) == Decimal("14.40")


# ---------------------------------------------------------------- NVML down

def test_nvml_down_for_hours_while_slices_report(db):
    """Hours 2-4 have slice rows only: billed at the GPU's last known model and price,
    flagged in the unmetered report, never dropped. A GPU seen only by its slices all
    month is priced by its model from the month before."""
    def fill(con):
        for h in range(5):
            if h < 2:
                add_gpu(con, hour=hour(h))
            add_slice(con, "a", alloc=0.5, hour=hour(h))
        add_gpu(con, hour="2026-10-31 23:00:00", gpu="GPU-2", node="gpu-node-2")
        add_slice(con, "b", alloc=1.0, whole=True, hour=hour(0), gpu="GPU-2", node="gpu-node-2", metered_s=1800.0)
    with_con(db, fill)
    bill = bill_of(db)
    d = bill.detail
    a = d[(d["pod"] == "a")].iloc[0]
    assert a["gpu_hours_billed"] == Decimal("2.5000") and a["cost"] == Decimal("6.00")
    assert a["model"] == A100 and a["gpu_hour_price"] == Decimal("2.40")
    b = d[(d["pod"] == "b")].iloc[0]
    assert b["cost"] == Decimal("1.20") and b["model"] == A100
    assert bill.gpu_cost == bill.total == Decimal("13.20")       # 5 GPU-hours + half an hour of GPU-2
    un = bill.unmetered_hours
    g1 = un[un["gpu_uuid"] == "GPU-1"]
    flagged = {r["hour"].hour: r["reason"] for r in g1.to_dict("records") if r["hour"].day == 1 and r["hour"].hour < 6}
    assert flagged == {2: "NVML down", 3: "NVML down", 4: "NVML down", 5: "no samples"}
    assert set(g1["reason"]) == {"NVML down", "no samples"} and len(g1) == 30 * 24 - 2
    g2 = un[(un["gpu_uuid"] == "GPU-2") & (un["reason"] != "no samples")].iloc[0]
    assert g2["reason"] == "NVML down, partial" and g2["unmetered_s"] == 1800.0
    summary = bill.unmetered.set_index("gpu_uuid")
    assert summary.loc["GPU-1", "nvml_down_hours"] == 3.0 and summary.loc["GPU-1", "metered_hours"] == 5.0


def test_unmetered_file_lists_hours_and_reasons(db, tmp_path):
    def fill(con):
        add_gpu(con, hour=hour(0))
        add_slice(con, "a", alloc=0.5, hour=hour(1))
        add_gpu(con, hour=hour(2), metered_s=900.0)
    with_con(db, fill)
    assert export(db, tmp_path / "o") == 0
    rows = rows_of(tmp_path / "o" / f"unmetered-{MONTH}.csv")
    assert list(rows[0]) == ["hour", "cluster", "node", "gpu_uuid", "gpu_model", "metered_s", "nvml_metered_s",
                             "unmetered_s", "reason"]
    first = {r["hour"]: (r["reason"], r["metered_s"], r["unmetered_s"]) for r in rows[:3]}
    assert first == {"2026-11-01T01:00:00Z": ("NVML down", "3600.000", "0.000"),
                     "2026-11-01T02:00:00Z": ("partial", "900.000", "2700.000"),
                     "2026-11-01T03:00:00Z": ("no samples", "0.000", "3600.000")}
    assert len(rows) == 30 * 24 - 1 and {r["gpu_model"] for r in rows} == {A100}


# ---------------------------------------------------------------- a half-metered hour

def test_half_metered_hour_is_not_scaled_as_oversubscription(db):
    """NVML saw 1,800 s of the hour, the slices (75 % together) all of it: the GPU was seen
    all hour, so they pay 0.75 GPU-h and a quarter is idle, not 0.5 GPU-h scaled onto them."""
    def fill(con):
        add_gpu(con, hour=hour(0), metered_s=1800.0)
        add_slice(con, "a", alloc=0.5, hour=hour(0), cluster=ACME)
        add_slice(con, "g", alloc=0.25, hour=hour(0), cluster=GLOBEX)
    with_con(db, fill)
    bill = bill_of(db)
    usage = bill.detail[bill.detail["kind"] == "usage"].set_index("tenant")
    assert usage.loc["acme", "gpu_hours_billed"] == Decimal("0.5000")
    assert usage.loc["globex", "gpu_hours_billed"] == Decimal("0.2500")
    idle = bill.detail[bill.detail["kind"] == "idle"].iloc[0]
    assert idle["gpu_hours_idle"] == Decimal("0.2500") and idle["cost"] == Decimal("0.60")
    assert bill.total == bill.gpu_cost == Decimal("2.40")
    assert bill.unmetered_hours.iloc[0]["reason"] == "NVML down"


def test_partly_metered_hour_costs_only_what_was_seen(db):
    def fill(con):
        add_gpu(con, hour=hour(0), metered_s=1800.0)
        add_slice(con, "a", alloc=0.5, hour=hour(0), metered_s=1800.0)
    with_con(db, fill)
    bill = bill_of(db)
    assert bill.total == Decimal("1.20")
    assert bill.detail[bill.detail["kind"] == "usage"].iloc[0]["cost"] == Decimal("0.60")
    assert bill.unmetered_hours.iloc[0]["reason"] == "partial"


# ---------------------------------------------------------------- odd prices, many small slices

ODD_PRICES = """currency: USD
gpu_hour: {"NVIDIA A100-SXM4-80GB": "2.370001", "NVIDIA L4": "0.333333"}
overrides: [{node: gpu-node-3, gpu_hour: "1.999999"}]
electricity: {price_per_kwh: "0.14", carbon_g_per_kwh: 320}
"""


def odd_fleet(con) -> None:
    k = 0
    for h in range(4):
        for gpu, node, model in (("GPU-1", "gpu-node-1", A100), ("GPU-2", "gpu-node-2", "NVIDIA L4"),
                                 ("GPU-3", "gpu-node-3", A100)):
            add_gpu(con, hour=hour(h), gpu=gpu, node=node, model=model, metered_s=3600.0 - 7 * h)
            for i in range(9):          # small slices that arrive mid-hour
                k += 1
                cluster = ACME if (i + h) % 3 else GLOBEX
                add_slice(con, f"p{i}", alloc=0.013 + 0.0073 * ((k * 7) % 11), used=0.002 * (k % 5),
                          hour=hour(h), gpu=gpu, node=node, cluster=cluster, namespace=f"ns{i % 4}",
                          metered_s=float(3600 - (k * 331) % 3000))


@pytest.mark.parametrize("idle", ["platform", "shared"])
@pytest.mark.parametrize("basis", ["allocation", "usage"])
def test_every_view_of_a_tenant_agrees_to_the_cent(db, tmp_path, idle, basis):
    with_con(db, odd_fleet)
    prices = tmp_path / "odd.yaml"
    prices.write_text(ODD_PRICES)
    opts = ["--prices", str(prices), "--idle", idle, "--basis", basis]
    assert export(db, tmp_path / "all", *opts) == 0
    inv = rows_of(tmp_path / "all" / f"invoice-{MONTH}.csv")
    focus = rows_of(tmp_path / "all" / f"focus-{MONTH}.csv")
    detail = pq.read_table(tmp_path / "all" / f"detail-{MONTH}.parquet").to_pylist()
    bill = bill_of(db, idle=idle, basis=basis, prices=str(prices))
    assert sum(Decimal(r["cost"]) for r in inv) == sum(r["cost"] for r in detail) == bill.gpu_cost == bill.total
    by_invoice = per_tenant(inv, "tenant", "cost")
    assert by_invoice == per_tenant(focus, "BillingAccountId", "BilledCost")
    assert by_invoice == per_tenant([{"t": r["tenant"], "c": r["cost"]} for r in detail], "t", "c")
    for t in ("acme", "globex"):
        assert export(db, tmp_path / t, *opts, "--tenant", t) == 0
        t_inv = rows_of(tmp_path / t / f"invoice-{MONTH}-{t}.csv")
        t_focus = rows_of(tmp_path / t / f"focus-{MONTH}-{t}.csv")
        assert sum(Decimal(r["cost"]) for r in t_inv) == by_invoice[t]
        assert sum(Decimal(r["BilledCost"]) for r in t_focus) == by_invoice[t]
        assert t_focus == [r for r in focus if r["BillingAccountId"] == t]
    for r in inv + [{k: str(v) for k, v in r.items()} for r in detail]:
        charge, share, cost = Decimal(r["charge"]), Decimal(r["idle_share"]), Decimal(r["cost"])
        assert charge >= 0 and share >= 0 and charge + share == cost, r


def test_no_negative_charge_under_shared_idle():
    """Rounded lines: a tiny slice's cost and idle share may round apart; its charge and
    idle_share are cut from its cost so neither goes negative (pure rounding step)."""
    lines = [dict(kind="usage", charge_class="Regular", charge_period=MONTH, tenant=f"t{i}", namespace="n",
                  model="m", cluster="c", node="n", gpu_uuid="g", pod=f"p{i}", pod_uid=f"u{i}", container="c",
                  charge_raw=charge, cost_raw=cost)
             for i, (charge, cost) in enumerate([(1, 74 * 10**12 // 2), (10**14, 10**14 + 1), (3 * 10**12, 4 * 10**12)])]
    for ln in lines:
        ln["waste_raw"] = 0
    for r in cb.round_lines(lines):
        assert r["charge"] >= 0 and r["idle_share"] >= 0 and r["charge"] + r["idle_share"] == r["cost"], r


# ---------------------------------------------------------------- the check itself

def test_forced_invariant_violation_stops_the_export(db, tmp_path, capsys, monkeypatch):
    def fill(con):
        for h in range(2):
            add_gpu(con, hour=hour(h), gpu="GPU-7")
            add_slice(con, "a", alloc=0.5, hour=hour(h), gpu="GPU-7")
    with_con(db, fill)
    real = cb._slice_lines

    def one_raw_unit_too_many(con):
        lines = real(con)
        lines[0]["charge_raw"] += 1
        return lines
    monkeypatch.setattr(cb, "_slice_lines", one_raw_unit_too_many)
    out = tmp_path / "o"
    assert export(db, out) == 3
    err = capsys.readouterr().err
    assert "no files written" in err and "GPU-7" in err and "2026-11-01T00:00 to 2026-11-01T01:00" in err
    assert not out.exists()


def test_gpu_hour_violations_name_gpus_and_hours():
    from datetime import datetime
    with pytest.raises(cb.InvariantError, match=r"GPU-3 at 2026-11-01T05:00, 2026-11-01T06:00 \(slices paid"):
        cb.check_gpu_hours([("GPU-3", datetime(2026, 11, 1, 5), "slices paid 9 raw of a GPU-hour costing 8"),
                            ("GPU-3", datetime(2026, 11, 1, 6), "slices paid 9 raw of a GPU-hour costing 8")])
    cb.check_gpu_hours([])


def test_hour_check_finds_overpaid_and_unbilled_gpu_hours(db):
    """cb_hour_overpaid and cb_hour_unbilled on a hand-broken per-hour table: hour 0 paid above its cost,
    hour 1's slice-hours billed nowhere."""
    from datetime import date
    from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices

    def fill(con):
        for h in range(2):
            add_gpu(con, hour=hour(h), gpu="GPU-5")
            add_slice(con, "a", alloc=0.5, hour=hour(h), gpu="GPU-5")
    with_con(db, fill)
    con = connect(db)
    args = [date(2026, 11, 1), date(2026, 12, 1), None]
    cb.fill_hours(con, args)
    cb._register_prices(con, load_prices(DEFAULT_PRICES))
    # hour 0: its slices billed one micro-second above the hour's capacity; hour 1: no GPU-hour
    cap = 3_600_000_000
    con.execute("UPDATE cb_hour_t SET b_tot = ? WHERE hour = ?", [cap + 1, hour(0)])
    con.execute("INSERT INTO cb_hour_charge_t BY NAME SELECT hour, gid, pid, ? AS billed_u, 1 AS slice_rows, true AS overpaid "
                "FROM cb_hour_t WHERE hour = ?", [cap + 1, hour(0)])
    con.execute("DELETE FROM cb_hour_t WHERE hour = ?", [hour(1)])
    found = con.execute("SELECT gpu_uuid, hour::VARCHAR, problem FROM cb_hour_overpaid()").fetchall()
    found += con.execute("SELECT gpu_uuid, hour::VARCHAR, problem FROM cb_hour_unbilled(?, ?, ?)", args).fetchall()
    con.close()
    price = 2_400_000
    assert found == [("GPU-5", hour(0), f"slices paid {price * (cap + 1)} raw of a GPU-hour costing {price * cap}"),
                     ("GPU-5", hour(1), "1 slice-hours without a priced GPU-hour")]
