"""Property: over random fleets (GPUs that move between nodes and tenant clusters, hours
with NVML down, gaps, partly metered hours, oversubscription) and random prices, under
every basis, idle policy and share kind, the bill adds up to Σ price x metered time and
every view of a tenant (detail, invoice, FOCUS, --tenant) agrees to the cent."""
import tempfile
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from slicemeter.testkit.cb_rows import A100, ACME, GLOBEX, add_gpu, add_slice, add_tenants
from slicemeter.chargeback.bill import BASES, IDLE_POLICIES, SHARES, compute_bill
from slicemeter.chargeback.exports import focus_rows
from slicemeter.chargeback.prices import parse_prices_text
from slicemeter.store import connect

L4 = "NVIDIA L4"
PLACES = [(ACME, "gpu-node-1"), (ACME, "gpu-node-2"), (GLOBEX, "gpu-node-3"), ("https://stranger:6443", "gpu-node-4")]
SHARE_VALUES = [0.01, 0.05, 0.1, 0.125, 0.25, 1 / 3, 0.5, 0.75, 1.0]

slice_st = st.tuples(st.sampled_from(SHARE_VALUES), st.sampled_from(SHARE_VALUES), st.integers(1, 3600))
hour_st = st.tuples(
    st.sampled_from(["gpu", "gpu", "nvml_down", "none"]),   # what reported in the hour
    st.integers(0, len(PLACES) - 1),                        # where the GPU was (moves)
    st.sampled_from([3600, 3600, 1800, 1, 2999]),           # NVML's metered seconds
    st.lists(slice_st, max_size=4),
)
fleet_st = st.lists(st.lists(hour_st, min_size=1, max_size=4), min_size=1, max_size=3)
price_st = st.integers(0, 9_999_999).map(lambda micro: Decimal(micro) / 10**6)


def build(con, fleet) -> list[tuple]:
    """Insert the fleet; returns the GPU-hours as (model, cluster, node, metered seconds)."""
    add_tenants(con)
    hours = []
    for g, gpu_hours in enumerate(fleet):
        gpu, model = f"GPU-{g}", (A100, L4)[g % 2]
        add_gpu(con, hour="2026-10-31 23:00:00", gpu=gpu, model=model)   # its model is known
        for h, (what, place, gpu_s, slices) in enumerate(gpu_hours):
            if what == "none":
                continue
            cluster, node = PLACES[place]
            ts = f"2026-11-01 {h:02d}:00:00"
            if what == "gpu":
                add_gpu(con, hour=ts, gpu=gpu, node=node, cluster=cluster, model=model, metered_s=float(gpu_s))
            for i, (alloc, used, secs) in enumerate(slices):
                add_slice(con, f"p{g}-{i}", alloc=alloc, used=used, hour=ts, gpu=gpu, node=node, cluster=cluster,
                          namespace=f"ns{i % 2}", metered_s=float(secs), mem=alloc / 2, cores=alloc)
            seen = max([gpu_s if what == "gpu" else 0] + [s for _, _, s in slices])
            if seen:
                hours.append((model, cluster, node, seen))
    return hours


@settings(max_examples=20, deadline=None)
@given(fleet=fleet_st, a100=price_st, l4=price_st, node2=price_st, basis=st.sampled_from(BASES),
       idle=st.sampled_from(IDLE_POLICIES), share=st.sampled_from(SHARES))
def test_invariant_and_tenant_agreement_over_random_fleets(fleet, a100, l4, node2, basis, idle, share):
    catalog = parse_prices_text(f'currency: EUR\ngpu_hour: {{"{A100}": "{a100}", "{L4}": "{l4}"}}\n'
                                f'overrides: [{{node: gpu-node-2, gpu_hour: "{node2}"}}]\n')
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(Path(tmp) / "p.duckdb")
        try:
            hours = build(con, fleet)
            bill = compute_bill(con, "2026-11", basis, idle, share, catalog)
            per_tenant_bills = {t: compute_bill(con, "2026-11", basis, idle, share, catalog, tenant=t)
                                for t in set(bill.detail["tenant"])} if len(bill.detail) else {}
        finally:
            con.close()
    expected = sum((catalog.price(m, n, c) * s / 3600 for m, c, n, s in hours), Decimal(0))
    expected = expected.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    d, inv = bill.detail, bill.invoice
    assert bill.gpu_cost == bill.total == expected
    assert sum(d["cost"], Decimal(0)) == sum(inv["cost"], Decimal(0)) == expected
    focus = focus_rows(bill, {})
    for r in bill.detail.to_dict("records") + bill.invoice.to_dict("records"):
        assert r["charge"] >= 0 and r["idle_share"] >= 0 and r["charge"] + r["idle_share"] == r["cost"], r
    for f in focus:
        assert abs(f["ListUnitPrice"] * f["PricingQuantity"] - f["ListCost"]) <= Decimal("1e-9"), f
    for t, tb in per_tenant_bills.items():
        want = sum(d[d["tenant"] == t]["cost"], Decimal(0))
        assert sum(inv[inv["tenant"] == t]["cost"], Decimal(0)) == want
        assert sum((f["BilledCost"] for f in focus if f["BillingAccountId"] == t), Decimal(0)) == want
        assert sum(tb.detail["cost"], Decimal(0)) == sum(tb.invoice["cost"], Decimal(0)) == want
        assert tb.detail.drop(columns=["cost_raw"]).equals(
            d[d["tenant"] == t].reset_index(drop=True).drop(columns=["cost_raw"]))
    if idle == "platform":
        assert (d[d["kind"] == "usage"]["idle_share"] == 0).all()
