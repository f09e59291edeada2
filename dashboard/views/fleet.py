"""Fleet: the sharing dividend and the month's cost; allocated, used and idle GPU capacity over time;
utilization and its trend; sharing."""
import altair as alt
import streamlit as st

from slicemeter.dashboard import common, data, fmt

common.header("Fleet", "Physical GPU capacity: used by kernels, reserved but idle, unallocated")
b = common.bounds()
# what needs a person, one click away (views/gpus.py and views/problems.py read the URL)
n1, n2, n3 = st.columns(3)
n1.page_link("views/problems.py", label="Problems: what needs a person", icon=":material/report:")
n2.page_link("views/gpus.py", label="GPUs with a critical Xid this month", icon=":material/error:",
             query_params={"health": "xid"})
n3.page_link("views/gpus.py", label="GPUs paid for but unused, the most first", icon=":material/money_off:",
             query_params={"sort": "waste_cost"})
summary = data.query("fleet_summary", **b).iloc[0]
daily = data.query("fleet_daily", **b)
hourly = data.query("fleet_hourly", **b)
if common.no_rows(hourly, "metered GPU-hours"):
    st.stop()

st.subheader("Sharing dividend")
try:
    div = data.dividend(common.month())
except data.Unavailable as exc:
    div = None
    st.error(str(exc))


def money(amount, currency) -> str:
    """At catalog prices; a dash without a price catalog ($SLICEMETER_PRICES)."""
    return fmt.money(amount, currency) if currency else "–"


if div is not None:
    fd = div.fleet
    d1, d2, d3 = st.columns(3)
    d1.metric("Users on the same hardware", "–" if fd.sharing_factor is None else f"{fd.sharing_factor:.1f}x",
              help="GPUs the same containers would need if each took whole GPUs, over the GPUs in use "
                   f"({fd.gpus_needed:.1f} / {fd.gpus_in_use:.1f}); {fd.containers} containers served.")
    d2.metric("Avoided GPUs", f"{fd.gpus_avoided:.1f}", help="Whole-GPU need minus GPUs in use, averaged over the month's metered hours.")
    # the one projected figure of the row: both money labels say which kind they are
    d3.metric("Cost avoided (whole month, projected)", money(fd.monthly_cost_avoided, fd.currency),
              help="The avoided GPUs at catalog prices, at this month's rate so far, over the whole month.")
    d4, d5, d6 = st.columns(3)
    d4.metric("GPU cost (month to date)", money(fd.gpu_cost, fd.currency),
              help="Metered GPU-hours so far at catalog prices: tenant charges plus idle.")
    d5.metric("Energy avoided", f"{fd.kwh_avoided:,.0f} kWh", help="Avoided GPU-hours at each model's measured idle power.")
    d6.metric("Carbon avoided", f"{fd.co2e_kg_avoided:,.0f} kgCO2e",
              help=f"Energy avoided at {div.carbon_g_per_kwh:g} gCO2e/kWh, from the price catalog "
                   "(electricity.carbon_g_per_kwh).")
    st.caption(f"Utilization {fmt.pct(fd.utilization)} with sharing, {fmt.pct(fd.utilization_unshared)} if each container "
               f"held whole GPUs; enterprise fleets typically run at 20-25 %. {fd.hours} of {div.month_hours} hours "
               "metered. Definitions: docs/dividend.md.")

util_7d, util_delta = fmt.trend(daily["utilization"].tolist())
c1, c2, c3, c4, c5 = st.columns(5)
c1.metric("Fleet utilization", fmt.pct(summary.utilization),
          delta=None if util_delta is None else f"{util_delta * 100:+.1f} pts (7 d)",
          help="NVML SM busy time / metered GPU time over the month. Industry fleets sit at 20-25 %.")
c2.metric("Allocated", fmt.pct(summary.allocation), help="Share of metered capacity granted to slices (dominant share).")
c3.metric("Slices per GPU", f"{summary.slices_per_gpu:.2f}",
          help=f"Average containers sharing a GPU; {fmt.pct(summary.shared_fraction)} of GPU-hours were shared.")
c4.metric("GPUs · nodes · tenants", f"{int(summary.gpus)} · {int(summary.nodes)} · {int(summary.tenants)}")
c5.metric("Capacity (GPU-hours)", f"{summary.capacity_gpu_h:,.0f}", help="GPU-hours metered this month.")

st.subheader("Capacity over time")
long = hourly.melt(id_vars=["hour"], value_vars=["used_gpu_h", "reserved_idle_gpu_h", "unallocated_gpu_h"],
                   var_name="kind", value_name="gpu_h")
names = {"used_gpu_h": "used", "reserved_idle_gpu_h": "allocated, idle", "unallocated_gpu_h": "unallocated"}
long["kind"] = long["kind"].map(names)
order = list(names.values())
common.chart(
    alt.Chart(long).mark_area(interpolate="step-after").encode(
        x=alt.X("hour:T", title=None),
        y=alt.Y("gpu_h:Q", stack="zero", title="GPUs (GPU-hours per hour)"),
        color=alt.Color("kind:N", sort=order, title=None,
                        scale=alt.Scale(domain=order, range=["#2e7d32", "#f9a825", "#cfd8dc"]),
                        legend=alt.Legend(orient="top")),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("hour:T"), "kind:N", alt.Tooltip("gpu_h:Q", format=".2f", title="GPU-h")],
    ).transform_calculate(order=f"indexof({order!r}, datum.kind)").properties(height=260)
)

left, right = st.columns(2)
with left:
    st.subheader("Utilization trend")
    trend = daily.melt(id_vars=["day"], value_vars=["utilization", "allocation"], var_name="measure", value_name="ratio")
    band = alt.Chart().mark_rect(opacity=0.35, color="#e0e0e0").encode(y=alt.datum(0.20), y2=alt.datum(0.25))
    lines = alt.Chart().mark_line(point=True).encode(
        x=alt.X("day:T", title=None),
        y=alt.Y("ratio:Q", axis=alt.Axis(format="%"), title=None, scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("measure:N", title=None, legend=alt.Legend(orient="top"),
                        scale=alt.Scale(domain=["utilization", "allocation"], range=["#2e7d32", "#1565c0"])),
        tooltip=[alt.Tooltip("day:T"), "measure:N", alt.Tooltip("ratio:Q", format=".1%")],
    )
    common.chart(alt.layer(band, lines, data=trend).properties(height=220))
    st.caption("Grey band: the 20-25 % typical of enterprise GPU fleets.")
with right:
    st.subheader("Sharing density and GPUs avoided")
    need = div.daily.melt(id_vars=["day"], value_vars=["gpus_in_use", "gpus_needed"], var_name="measure", value_name="gpus")
    need["measure"] = need["measure"].map({"gpus_in_use": "GPUs in use", "gpus_needed": "whole-GPU need"})
    common.chart(
        alt.Chart(need).mark_line(point=True, interpolate="step-after").encode(
            x=alt.X("day:T", title=None),
            y=alt.Y("gpus:Q", title="GPUs", scale=alt.Scale(zero=True)),
            color=alt.Color("measure:N", title=None, legend=alt.Legend(orient="top"),
                            scale=alt.Scale(domain=["GPUs in use", "whole-GPU need"], range=["#6a1b9a", "#ef6c00"])),
            tooltip=[alt.Tooltip("day:T"), "measure:N", alt.Tooltip("gpus:Q", format=".1f")],
        ).properties(height=220)
    )
    st.caption("The gap is the GPUs slicing avoided: each container on a whole GPU would need the orange line.")

st.subheader("By tenant")
by_tenant = data.query("fleet_by_tenant", **b)
link_cols = st.columns(min(len(by_tenant), 4) or 1)
for i, tenant in enumerate(by_tenant["tenant"]):
    link_cols[i % len(link_cols)].page_link("views/gpus.py", label=f"{tenant}: most wasteful GPUs",
                                            icon=":material/grid_view:",
                                            query_params={"tenant": tenant, "sort": "waste_cost"})
# st.table (HTML, not canvas): small, and readable by screen readers and browser tests
st.table(by_tenant.assign(
    capacity_gpu_h=by_tenant["capacity_gpu_h"].map(lambda v: fmt.gpu_hours(v, 0)),
    allocation=by_tenant["allocation"].map(fmt.pct),
    utilization=by_tenant["utilization"].map(fmt.pct),
    slices_per_gpu=by_tenant["slices_per_gpu"].map("{:.2f}".format),
).rename(columns={"display_name": "name", "capacity_gpu_h": "capacity", "slices_per_gpu": "slices / GPU"})
 .set_index("tenant"))
