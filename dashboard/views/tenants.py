"""Tenants: GPU-hours and cost by tenant and namespace, with the exports' chargeback code."""
from decimal import Decimal

import altair as alt
import streamlit as st

from slicemeter import clock
from slicemeter.chargeback import live_bill
from slicemeter.chargeback.dividend import previous_month
from slicemeter.chargeback.money import COST
from slicemeter.dashboard import catalog, common, data, fmt, money

common.header("Tenants", "GPU-hours and cost by tenant (Kamaji control plane) and namespace")
b = common.bounds()
usage = data.query("tenant_usage", **b)
if common.no_rows(usage, "slices"):
    catalog.panel(b)
    st.stop()

per_tenant = (usage.groupby(["tenant", "display_name"], as_index=False)
              [["slices", "allocated_gpu_h", "used_gpu_h"]].sum()
              .sort_values("allocated_gpu_h", ascending=False))

c1, c2 = st.columns(2)
basis = c1.radio("Cost basis", ["allocation", "usage", "max"], horizontal=True, key="basis",
                 help="allocation: pay for what HAMi granted; usage: for what was used; max: the larger.")
idle = c2.radio("Idle capacity", ["platform", "shared"], horizontal=True, key="idle",
                format_func={"platform": "kept by the platform", "shared": "shared out to tenants"}.get,
                help="Capacity nobody was charged for: a platform line, or spread in proportion to charges.")

try:
    bill = data.chargeback(common.month(), basis, idle)
except data.ModuleMissing as exc:
    bill = None
    st.warning(f"Costs unavailable: {exc}. The GPU-hours below are metered data; costs appear once chargeback is installed.")
except data.Unavailable as exc:
    bill = None
    st.error(f"{exc} The GPU-hours below are metered data.")

if bill is not None:
    cur = money.currency(bill)
    totals = money.totals_by(bill, "tenant", COST)
    grand = sum(totals[COST], Decimal(0))
    m1, m2 = st.columns([1, 3])
    m1.metric(f"Total ({basis}, idle {idle})", fmt.money(grand, cur))
    unverified = money.unverified_usage(bill)
    if unverified:
        st.warning(f"{sum(unverified.values()):,.1f} slice-hours of this {basis}-basis cost rest on usage "
                   "that could not be checked against NVML (the exporter could not place NVML's processes: "
                   "no hostPID, or memory no process explains): "
                   + ", ".join(f"{t} {h:,.1f} h" for t, h in sorted(unverified.items()))
                   + ". The charges are as reported; the detail's usage_unverified_hours names the lines.")
    totals = totals.merge(per_tenant[["tenant", "display_name", "allocated_gpu_h", "used_gpu_h"]], on="tenant", how="left")
    # the platform's idle line holds no slice: nothing allocated, nothing used
    totals[["allocated_gpu_h", "used_gpu_h"]] = totals[["allocated_gpu_h", "used_gpu_h"]].fillna(0.0)
    # rows chargeback adds beyond the catalog: the platform's idle line, unassigned clusters
    totals["display_name"] = totals["display_name"].fillna(totals["tenant"].map(
        {"platform": "idle capacity (nobody's slice)", "unassigned": "not in the tenant catalog"}))
    totals["cost_text"] = totals[COST].map(lambda d: fmt.money(d, cur))
    # the live bill's figures (docs/live-bill.md): a month that is over forecasts its own total
    month, now = common.month(), clock.now()
    elapsed, length = live_bill.month_seconds(month, now)
    running, before = elapsed < length, None
    if live_bill.needs_previous(month, now):
        try:
            before = data.chargeback(previous_month(month), basis, idle)
        except data.Unavailable:
            pass   # the 1st's forecast then counts only the hours seen
    forecasts = live_bill.month_forecasts(bill, month, now, before)
    budgets = {t: Decimal(b) for t, b in data.query("tenant_budgets").itertuples(index=False)}
    totals["forecast_text"] = totals["tenant"].map(lambda t: fmt.money(forecasts[t][1] if t in forecasts else None, cur))
    totals["budget_text"] = totals["tenant"].map(lambda t: fmt.money(budgets[t], cur) if t in budgets else "")
    spent = [t for t, b in budgets.items() if t in forecasts and forecasts[t][0].total > b]
    heading = [t for t, b in budgets.items() if t in forecasts and forecasts[t][1] > b and t not in spent]
    if spent:
        st.warning("Over the monthly budget: " + ", ".join(
            f"{t} ({fmt.money(forecasts[t][0].total, cur)} of {fmt.money(budgets[t], cur)})" for t in spent))
    if heading:
        st.warning("Heading over the monthly budget by the month's end: " + ", ".join(
            f"{t} (forecast {fmt.money(forecasts[t][1], cur)} of {fmt.money(budgets[t], cur)})" for t in heading))
    totals["share"] = [float(d / grand) if grand else 0.0 for d in totals[COST]]
    totals["cost_value"] = totals[COST].map(float)  # chart only; bills stay Decimal
    with m2:
        common.chart(alt.Chart(totals).mark_bar().encode(
            x=alt.X("cost_value:Q", title=f"cost ({cur})"), y=alt.Y("tenant:N", sort="-x", title=None),
            color=alt.Color("tenant:N", legend=None),
            tooltip=["tenant:N", alt.Tooltip("cost_text:N", title="cost"), alt.Tooltip("share:Q", format=".1%")],
        ).properties(height=max(140, 36 * len(totals))))
    st.subheader("Cost by tenant")
    st.dataframe(common.as_pct(totals[["tenant", "display_name", "cost_text", "forecast_text", "budget_text", "share",
                                       "allocated_gpu_h", "used_gpu_h"]], "share"),
                 hide_index=True, width="stretch",
                 column_config={"display_name": "tenant name",
                                "cost_text": st.column_config.TextColumn(
                                    f"{'month-to-date' if running else 'cost'} ({cur})"),
                                "forecast_text": st.column_config.TextColumn(
                                    f"forecast ({cur})", help="Month-to-date plus the month's mean rate so far "
                                    "over the days left (docs/live-bill.md)"),
                                "budget_text": st.column_config.TextColumn(f"monthly budget ({cur})"),
                                "share": common.pct_col("share of total"),
                                "allocated_gpu_h": common.gpu_h_col("allocated"),
                                "used_gpu_h": common.gpu_h_col("used")})
    with st.expander("Chargeback detail (tenant × namespace × GPU model)"):
        detail = bill.drop(columns=[c for c in bill.columns if c.endswith("_raw")])
        for col in money.money_columns(detail):
            detail[col] = detail[col].map(lambda d: "" if fmt.missing(d) else fmt.money(d, cur))
        st.dataframe(detail, hide_index=True, width="stretch", column_config=common.BILL_COLUMNS)

# the GPUs page opens on the tenant picked here (views/gpus.py reads it from the URL)
gpu_tenants = per_tenant["tenant"].tolist()
g1, g2 = st.columns([1, 2])
opened = g1.selectbox("A tenant's GPUs", gpu_tenants, key="tenant_gpus") if len(gpu_tenants) > 1 else gpu_tenants[0]
g2.page_link("views/gpus.py", label=f"Open {opened}'s GPUs, the most paid for but unused first",
             icon=":material/grid_view:", query_params={"tenant": opened, "sort": "waste_cost"})

st.subheader("GPU-hours by tenant")
degraded = data.query("tenant_degraded", throttled_share=data.throttled_share(), **b)
per_tenant = per_tenant.merge(degraded, on="tenant", how="left").fillna({"degraded_gpu_hours": 0.0,
                                                                         "degraded_gpu_hours_touched": 0})
if bill is not None and (bill["kind"] == "credit").any():
    credited = money.totals_by(bill[bill["kind"] == "credit"], "tenant", COST)
    per_tenant["credits"] = per_tenant["tenant"].map(
        {t: fmt.money(-c, cur) for t, c in zip(credited["tenant"], credited[COST])}).fillna(fmt.money(Decimal(0), cur))
st.dataframe(per_tenant, hide_index=True, width="stretch",
             column_config={"display_name": "tenant name", "allocated_gpu_h": common.gpu_h_col("allocated"),
                            "used_gpu_h": common.gpu_h_col("used"),
                            "degraded_gpu_hours": common.gpu_h_col(
                                "on degraded GPUs", "allocated GPU-hours on GPU-hours with a critical Xid, an "
                                "uncorrectable ECC error, lost, or throttled (docs/health.md)"),
                            "degraded_gpu_hours_touched": "degraded GPU-hours",
                            "credits": st.column_config.TextColumn("credited")})

st.subheader("Trend")
daily = data.query("tenant_daily", **b)
# the day still running holds only the hours so far: drawn, it would read as a drop
today = clock.now().date()
if (daily["day"].dt.date >= today).any():
    daily = daily[daily["day"].dt.date < today]
    st.caption(f"Whole days only: {today:%Y-%m-%d} (UTC) is still running.")
common.chart(alt.Chart(daily).mark_area(opacity=0.85).encode(
    x=alt.X("day:T", title=None),
    y=alt.Y("allocated_gpu_h:Q", stack="zero", title="allocated GPU-hours per day"),
    color=alt.Color("tenant:N", legend=alt.Legend(orient="top", title=None)),
    tooltip=[alt.Tooltip("day:T"), "tenant:N", alt.Tooltip("allocated_gpu_h:Q", format=",.1f"),
             alt.Tooltip("used_gpu_h:Q", format=",.1f")],
).properties(height=240))

st.subheader("By namespace")
usage["used_of_allocated"] = usage["used_gpu_h"] / usage["allocated_gpu_h"].where(usage["allocated_gpu_h"] > 0)
st.dataframe(common.as_pct(usage.drop(columns=["display_name"]), "used_of_allocated"), hide_index=True, width="stretch",
             column_config={"allocated_gpu_h": common.gpu_h_col("allocated"), "used_gpu_h": common.gpu_h_col("used"),
                            "used_of_allocated": common.pct_col("used / allocated"),
                            "unverified_h": common.hours_col(
                                "usage unverified", help="Slice-hours whose usage could not be checked against NVML")})

catalog.panel(b)
