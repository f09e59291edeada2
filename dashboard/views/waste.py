"""Waste: slices paying for unused capacity, idle reservations, energy and emissions."""
from decimal import Decimal

import altair as alt
import streamlit as st

from slicemeter.dashboard import common, data, fmt, money
from slicemeter.common import ConfigError


def reservation_cost(catalog, row) -> Decimal | None:
    """The reservation's allocated share at its GPU's catalog price; None where unpriced."""
    if catalog is None:
        return None
    try:
        return money.share_cost(catalog.price(row.model, row.node, row.cluster), row.alloc_ms)
    except ConfigError:  # a GPU without a price shows no cost; the row stays
        return None


common.header("Waste", "Paid for, not used: allocated minus used GPU-hours; idle reservations, standing and short-lived; energy")
b = common.bounds()

st.subheader("Slices paying for the most unused capacity")
top = st.slider("How many slices", 5, 50, 10, key="waste_top")
# one read of every slice, cached: the total sums them all, and moving the slider only
# takes another head of it
every = data.query("waste_slices", limit=1_000_000, **b)
waste = every.head(top).copy()
if not common.no_rows(waste, "slices"):
    total = every["unused_gpu_h"].sum()
    w1, w2 = st.columns(2)
    w1.metric("Allocated but unused, all slices", fmt.gpu_hours(total))
    try:  # the money value of that waste, as chargeback prices it (allocation basis)
        bill = data.chargeback(common.month(), "allocation", "platform")
    except (data.ModuleMissing, data.Unavailable):   # the figure goes; the Tenants page says why
        bill = None
    if bill is not None:
        cur = money.currency(bill)
        w2.metric("Paid for, not used (allocation basis)", fmt.money(sum(bill["waste"], Decimal(0)), cur),
                  help="chargeback's waste column: allocated minus used, at the GPU's price.")
    waste["slice"] = waste["namespace"] + "/" + waste["pod"] + "/" + waste["container"]
    common.chart(alt.Chart(waste).mark_bar().encode(
        x=alt.X("unused_gpu_h:Q", title="unused GPU-hours"),
        y=alt.Y("slice:N", sort="-x", title=None, axis=alt.Axis(labelLimit=320)),
        color=alt.Color("tenant:N", legend=alt.Legend(orient="top", title=None)),
        tooltip=["tenant:N", "slice:N", "node:N", alt.Tooltip("unused_gpu_h:Q", format=",.1f"),
                 alt.Tooltip("unused_fraction:Q", format=".0%")],
    ).properties(height=max(140, 26 * len(waste))))
    st.dataframe(common.as_pct(common.blank_missing(waste.drop(columns=["slice"]), "claim"), "unused_fraction"),
                 hide_index=True, width="stretch",
                 column_config={"allocated_gpu_h": common.gpu_h_col("allocated"), "used_gpu_h": common.gpu_h_col("used"),
                                "unused_gpu_h": common.gpu_h_col("unused"), "unused_fraction": common.pct_col("unused share")})

st.subheader("Idle reservations")
min_idle_h = st.slider("No kernel for at least (hours)", 1, 72, 4, key="idle_hours")
idle = data.query("idle_reservations", min_idle_s=min_idle_h * 3600, **b)
if idle.empty:
    st.success(f"No reservation has been idle for {min_idle_h} h or more at the latest metered hour.")
else:
    st.caption(f"{len(idle)} slices still held at the latest metered hour with no kernel for ≥ {min_idle_h} h (or never).")
    st.dataframe(common.as_pct(idle, "allocation"), hide_index=True, width="stretch",
                 column_config={"allocation": common.pct_col("share held"),
                                "never_ran_kernel": st.column_config.CheckboxColumn("never ran a kernel"),
                                "idle_h": common.hours_col("no kernel for"),
                                "reserved_h": common.hours_col("held this month"),
                                "allocated_gpu_h": common.gpu_h_col("allocated")})

st.subheader("Short-lived idle reservations")
MAX_LIFE_H, MIN_IDLE_SHARE = 24, 0.5
short = data.query("short_reservations", max_life_s=MAX_LIFE_H * 3600, min_idle_share=MIN_IDLE_SHARE, **b)
if short.empty:
    st.success(f"No pod that lived under {MAX_LIFE_H} h held a slice mostly idle in {common.month()}.")
else:
    catalog = data.price_catalog()
    cur = catalog.currency if catalog else "USD"
    short["cost"] = [reservation_cost(catalog, r) for r in short.itertuples()]
    known = [c for c in short["cost"] if c is not None]
    s1, s2 = st.columns(2)
    s1.metric("Short-lived idle reservations", f"{len(short)}",
              help=f"pods that lived under {MAX_LIFE_H} h and ran no kernel in at least "
                   f"{MIN_IDLE_SHARE:.0%} of their metered hours")
    s2.metric("Their cost", fmt.money(sum(known, Decimal(0)), cur) if known else "–",
              help="allocated GPU-hours at the catalog's price of the GPU")
    short["cost"] = [fmt.money(c, cur) for c in short["cost"]]
    st.dataframe(short.drop(columns=["cluster", "alloc_ms"]), hide_index=True, width="stretch",
                 column_config={"opened_hour": st.column_config.DatetimeColumn("opened", format="YYYY-MM-DD HH:00"),
                                "lived_h": common.hours_col("lived"),
                                "reserved_h": common.hours_col("hours reserved"),
                                "idle_h": common.hours_col("hours idle"),
                                "allocated_gpu_h": common.gpu_h_col("allocated")})

st.subheader("Energy and emissions by tenant")
carbon = st.number_input("Grid carbon intensity (gCO2e/kWh)", 0.0, 2000.0, data.carbon_intensity(), 10.0, key="carbon")
energy = data.query("energy_by_tenant", carbon_g_per_kwh=carbon, **b)
if not common.no_rows(energy, "energy readings"):
    e1, e2 = st.columns(2)
    e1.metric("Energy", f"{energy['energy_kwh'].sum():,.1f} kWh")
    e2.metric("Emissions", f"{energy['co2e_g'].sum() / 1000:,.1f} kgCO2e")
    energy["co2e_kg"] = energy["co2e_g"] / 1000
    st.dataframe(energy.drop(columns=["co2e_g"]), hide_index=True, width="stretch",
                 column_config={"energy_kwh": common.number_col("energy", "kWh"),
                                "co2e_kg": common.number_col("emissions", "kgCO2e"),
                                "gpu_h": common.gpu_h_col("metered"), "display_name": "tenant name"})
