"""Chargeback semantics on hand-made hours and generated months (real DuckDB files)."""
from decimal import Decimal

import pytest

from slicemeter.chargeback.bill import BASES, IDLE_POLICIES, SHARES, chargeback, compute_bill
from slicemeter.testkit.synth_month import synthesize_month
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.store import connect
from slicemeter.testkit.cb_rows import ACME, GLOBEX, add_gpu, add_slice, open_store

MONTH = "2026-11"


@pytest.fixture
def con(tmp_path):
    with open_store(tmp_path / "cb.duckdb") as c:
        yield c


def usage_rows(inv):
    return inv[inv["kind"] == "usage"]


def idle_rows(inv):
    return inv[inv["kind"] == "idle"]


# ---------------------------------------------------------------- HAMi #3073 cases

def test_four_quarter_pods_for_an_hour_are_one_gpu_hour(con):
    add_gpu(con)
    for i in range(4):
        add_slice(con, f"p{i}", alloc=0.25, used=0.1)
    bill = compute_bill(con, MONTH)
    assert usage_rows(bill.invoice)["gpu_hours_billed"].sum() == Decimal("1.0000")
    assert usage_rows(bill.invoice)["cost"].sum() == Decimal("2.40")
    assert idle_rows(bill.invoice)["cost"].sum() == Decimal("0.00")
    assert list(usage_rows(bill.detail)["cost"]) == [Decimal("0.60")] * 4


def test_one_whole_gpu_pod_for_an_hour_is_one_gpu_hour(con):
    add_gpu(con)
    add_slice(con, "big", alloc=1.0, used=0.3, whole=True)
    bill = compute_bill(con, MONTH)
    assert usage_rows(bill.invoice)["gpu_hours_billed"].sum() == Decimal("1.0000")
    assert bill.total == usage_rows(bill.invoice)["cost"].sum() == Decimal("2.40")


def test_two_of_four_gone_leaves_half_a_gpu_hour_idle(con):
    add_gpu(con)
    for i in range(2):
        add_slice(con, f"p{i}", alloc=0.25)
    bill = compute_bill(con, MONTH)
    idle = idle_rows(bill.invoice)
    assert idle["gpu_hours_idle"].sum() == Decimal("0.5000")
    assert idle["cost"].sum() == Decimal("1.20") and usage_rows(bill.invoice)["cost"].sum() == Decimal("1.20")
    # shared: the idle half goes to the tenants, nothing stays on the platform line
    shared = compute_bill(con, MONTH, idle="shared")
    assert usage_rows(shared.invoice)["cost"].sum() == Decimal("2.40")
    assert usage_rows(shared.invoice)["idle_share"].sum() == Decimal("1.20")
    assert idle_rows(shared.invoice)["cost"].sum() == Decimal("0.00")


def test_shared_idle_in_proportion_to_charges(con):
    add_gpu(con)
    add_slice(con, "a", alloc=0.5, cluster=ACME)          # pays 1.20
    add_slice(con, "g", alloc=0.25, cluster=GLOBEX)       # pays 0.60; idle 0.60 to share 2:1
    inv = compute_bill(con, MONTH, idle="shared").invoice
    by = {r["tenant"]: r for r in usage_rows(inv).to_dict("records")}
    assert by["acme"]["cost"] == Decimal("1.60") and by["globex"]["cost"] == Decimal("0.80")


# ---------------------------------------------------------------- oversubscription

@pytest.mark.parametrize("basis", BASES)
def test_oversubscribed_gpu_never_billed_above_100_percent(con, basis):
    add_gpu(con)
    for i in range(3):
        add_slice(con, f"p{i}", alloc=0.5, used=0.9)       # 150 % allocated, 270 % "used"
    bill = compute_bill(con, MONTH, basis=basis)
    usage = usage_rows(bill.detail)
    assert usage["cost"].sum() == Decimal("2.40")           # exactly the GPU-hour, not 1.5x
    assert usage["gpu_hours_billed"].sum() <= Decimal("1.0000")
    assert usage["gpu_hours_allocated"].sum() <= Decimal("1.0000")
    assert usage["gpu_hours_used"].sum() <= Decimal("1.0000")
    assert sorted(usage["cost"]) == [Decimal("0.80")] * 3  # scaled equally
    assert idle_rows(bill.detail)["cost"].sum() == Decimal("0.00")


# ---------------------------------------------------------------- basis

def test_usage_basis_differs_from_allocation_on_an_idling_workload(con):
    add_gpu(con)
    add_slice(con, "idler", alloc=0.5, used=0.05)
    alloc = compute_bill(con, MONTH, basis="allocation")
    usage = compute_bill(con, MONTH, basis="usage")
    mx = compute_bill(con, MONTH, basis="max")
    a, u = usage_rows(alloc.invoice).iloc[0], usage_rows(usage.invoice).iloc[0]
    assert a["cost"] == Decimal("1.20") and u["cost"] == Decimal("0.12")
    assert a["waste"] == Decimal("1.08")                     # paid for 0.5, used 0.05
    assert usage_rows(mx.invoice).iloc[0]["cost"] == Decimal("1.20")
    # idle absorbs the difference: every basis still adds up to the GPU's cost
    assert alloc.total == usage.total == mx.total == Decimal("2.40")


def test_max_basis_takes_the_larger_share(con):
    add_gpu(con)
    add_slice(con, "burst", alloc=0.25, used=0.6)            # SM bursts above its cores limit
    assert usage_rows(chargeback(con, MONTH, basis="max"))["cost"].iloc[0] == Decimal("1.44")
    assert usage_rows(chargeback(con, MONTH, basis="allocation"))["cost"].iloc[0] == Decimal("0.60")


@pytest.mark.parametrize("share, expected", [("dominant", "1.20"), ("memory", "0.24"), ("cores", "1.20")])
def test_share_kinds(con, share, expected):
    add_gpu(con)
    add_slice(con, "p", alloc=0.5, mem=0.1, cores=0.5)
    assert usage_rows(chargeback(con, MONTH, share=share))["cost"].iloc[0] == Decimal(expected)


def test_usage_basis_reads_only_trusted_columns(con):
    """A tenant cannot lower its bill by writing its own (HAMi) counters. Ingest replaces HAMi's
    memory figure by NVML's per sample where they disagree and counts those seconds in
    hami_nvml_disagree_s; chargeback's usage basis reads usage_share_s only. Two slices with the
    same trusted usage pay the same, whatever the untrusted side claimed."""
    add_gpu(con)
    add_slice(con, "honest", alloc=0.25, used=0.2)
    add_slice(con, "liar", alloc=0.25, used=0.2, disagree_s=3600.0, claimed_mem_byte_s=0.0)
    usage = usage_rows(compute_bill(con, MONTH, basis="usage").detail).set_index("pod")
    assert usage.loc["honest", "cost"] == usage.loc["liar", "cost"] == Decimal("0.48")


# ---------------------------------------------------------------- coverage and energy

def test_unmetered_hours_are_shown(con):
    add_gpu(con, hour="2026-11-01 00:00:00")
    add_gpu(con, hour="2026-11-01 01:00:00", metered_s=1800.0)
    add_slice(con, "p", alloc=1.0, whole=True)
    bill = compute_bill(con, MONTH)
    row = bill.unmetered.iloc[0]
    assert row["metered_hours"] == 1.5 and row["unmetered_hours"] == 30 * 24 - 1.5
    # a partly metered hour costs only its metered part
    assert bill.gpu_cost == Decimal("3.60")
    # the invoice alone (the dashboard's) skips the report; the money is the same
    without = compute_bill(con, MONTH, unmetered=False)
    assert without.unmetered.empty and without.unmetered_hours_table is None
    assert without.invoice.equals(bill.invoice) and without.total == bill.total
    assert chargeback(con, MONTH).equals(bill.invoice)


def test_energy_split_by_usage_then_idle_by_allocation(con):
    add_gpu(con, energy_j=3_600_000.0)                        # 1 kWh in the hour
    add_slice(con, "busy", alloc=0.25, used=0.5)
    add_slice(con, "idle", alloc=0.25, used=0.0)
    d = compute_bill(con, MONTH).detail.set_index("pod")
    # busy: 0.5 of the energy by usage + 0.25 of the idle half; idle: 0.25 of the idle half
    assert d.loc["busy", "kwh"] == Decimal("0.625000") and d.loc["idle", "kwh"] == Decimal("0.125000")
    platform = d[d["kind"] == "idle"]["kwh"].sum()
    assert platform == Decimal("0.250000")
    assert d.loc["busy", "gco2e"] == Decimal("200.0")       # 0.625 kWh x 320 g/kWh
    assert d.loc["busy", "energy_cost"] == Decimal("0.09")   # 0.625 x 0.14


def test_node_price_override(con):
    add_gpu(con, node="gpu-node-7", model="NVIDIA L4")
    add_slice(con, "p", alloc=1.0, whole=True, node="gpu-node-7")
    assert compute_bill(con, MONTH).total == Decimal("0.60")


def test_tenant_filter_and_unassigned(con):
    add_gpu(con)
    add_slice(con, "a", alloc=0.5, cluster=ACME)
    add_slice(con, "x", alloc=0.25, cluster="https://stranger:6443")
    inv = chargeback(con, MONTH, tenant="acme")
    assert set(inv["tenant"]) == {"acme"} and inv["cost"].sum() == Decimal("1.20")
    assert "unassigned" in set(chargeback(con, MONTH)["tenant"])


# ---------------------------------------------------------------- reconciliation

def expected_gpu_cost(con) -> Decimal:
    """Σ price x metered hours, computed independently of the engine (Decimal, per row)."""
    cat = load_prices(DEFAULT_PRICES)
    total = Decimal(0)
    for cluster, node, model, metered in con.execute(
            "SELECT cluster, node, model, metered_s FROM gpu_hour ORDER BY ALL").fetchall():
        total += cat.price(model, node, cluster) * Decimal(repr(min(metered, 3600.0))) / 3600
    return total.quantize(Decimal("0.01"))


@pytest.fixture(scope="module")
def month_db(tmp_path_factory):
    c = connect(tmp_path_factory.mktemp("gen") / "month.duckdb")
    synthesize_month(c, MONTH, gpus=24, tenants=3, seed=7)
    yield c
    c.close()


@pytest.mark.parametrize("basis", BASES)
@pytest.mark.parametrize("idle", IDLE_POLICIES)
def test_reconciliation_on_a_generated_month(month_db, basis, idle):
    con = month_db
    expected = expected_gpu_cost(con)
    assert expected > 0
    bill = compute_bill(con, MONTH, basis=basis, idle=idle)
    inv = bill.invoice
    tenants = usage_rows(inv)["cost"].sum()
    platform = idle_rows(inv)["cost"].sum()
    assert tenants + platform == expected == bill.total == bill.gpu_cost
    assert bill.detail["cost"].sum() == expected               # detail file adds up too
    assert (bill.detail["cost"] >= 0).all()
    if idle == "shared":
        assert platform == 0
    else:
        assert platform > 0 and usage_rows(inv)["idle_share"].sum() == 0
    # unmetered hours exist in the generated month and are reported per GPU
    assert (bill.unmetered["unmetered_hours"] > 0).all() and len(bill.unmetered) == 24


@pytest.mark.parametrize("share", SHARES)
def test_reconciliation_under_every_share_kind(month_db, share):
    bill = compute_bill(month_db, MONTH, share=share)
    assert bill.invoice["cost"].sum() == expected_gpu_cost(month_db) == bill.total


def test_generated_month_has_oversubscribed_hours_capped(month_db):
    # the generator oversubscribes some GPU-hours; per GPU-hour billed shares stay <= metered
    over = month_db.execute(
        "SELECT count(*) FROM (SELECT hour, gpu_uuid, sum(alloc_dominant_share_s) s FROM slice_hour "
        "GROUP BY ALL) x JOIN gpu_hour g USING (hour, gpu_uuid) WHERE x.s > g.metered_s").fetchone()[0]
    assert over > 0
    bill = compute_bill(month_db, MONTH)
    d = bill.detail
    for gpu, rows in d.groupby("gpu_uuid"):
        idle = rows[rows["kind"] == "idle"]
        assert (idle["cost"] >= 0).all(), gpu
