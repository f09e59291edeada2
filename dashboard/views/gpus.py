"""GPUs: allocation and usage per physical GPU over time, filtered and ordered by what costs
money or needs a person; pick a GPU (or click its row in the heatmap) to see its slices."""
from decimal import Decimal

import altair as alt
import streamlit as st

from slicemeter.dashboard import common, data, filters, fmt, money

common.header("GPUs", "Each physical GPU over time; filter and order them, pick one (or click its row in the heatmap) "
              "to see its slices")
b = common.bounds()
options = data.query("gpu_filter_options", **b)
if common.no_rows(options, "GPUs"):
    st.stop()
choice = filters.widgets(options)
catalog = data.price_catalog()
currency = catalog.currency if catalog is not None else "USD"
prices = money.price_lists(catalog, options[["model", "node", "cluster"]].itertuples(index=False, name=None))
gpus = data.query("gpu_table", throttled_share=data.throttled_share(), **filters.sql_params(choice), **prices, **b)
if gpus.empty:
    st.info(f"No GPU matches these filters in {common.month()}.")
    st.stop()

# money stays exact: the catalog's Decimal price times the integer milliseconds SQL summed
price_of = {(m, n, c): Decimal(p) for m, n, c, p in zip(*prices.values())}
place = list(zip(gpus["model"], gpus["node"], gpus["cluster"]))
gpus["cost"] = [fmt.money(money.share_cost(price_of[k], ms), currency) if k in price_of else ""
                for k, ms in zip(place, gpus["metered_ms"])]
gpus["waste_cost"] = [fmt.money(money.share_cost(price_of[k], ms), currency) if k in price_of else ""
                      for k, ms in zip(place, gpus["unused_ms"])]

GPUS_PER_PAGE = 40   # heatmap rows a screen shows; a large fleet is paged through
c1, c2, c3 = st.columns(3)
measure = c1.radio("Show", ["utilization", "allocation"], horizontal=True, key="gpu_measure",
                   format_func={"allocation": "allocated share", "utilization": "SM utilization"}.get)
bucket = c2.radio("Resolution", ["hour", "day"], horizontal=True, key="gpu_bucket", index=0 if len(gpus) <= 24 else 1)
pages = -(-len(gpus) // GPUS_PER_PAGE)
if st.session_state.get("gpu_page", 1) > pages:   # the filters left fewer pages
    st.session_state["gpu_page"] = 1
page = c3.number_input(f"GPUs page (of {pages})", 1, pages, key="gpu_page") if pages > 1 else 1
first = (page - 1) * GPUS_PER_PAGE
shown = gpus.iloc[first:first + GPUS_PER_PAGE]
heat = data.query("gpu_heatmap", bucket=bucket, gpus=shown["gpu_uuid"].tolist(), **b)
st.caption(f"GPUs {first + 1}-{first + len(shown)} of {len(gpus)}, ordered by {filters.SORTS[choice['sort']]}"
           if pages > 1 else f"{len(gpus)} GPUs, ordered by {filters.SORTS[choice['sort']]}")

pick = alt.selection_point(fields=["gpu"], name="pick")
event = st.altair_chart(
    alt.Chart(heat).mark_rect().encode(
        x=alt.X("bucket:T", title=None), x2="bucket_end:T",
        y=alt.Y("gpu:N", title=None, sort=shown["gpu"].tolist(), axis=alt.Axis(labelLimit=260)),
        color=alt.Color(f"{measure}:Q", title=None, scale=alt.Scale(domain=[0, 1], scheme="viridis"),
                        legend=alt.Legend(format="%")),
        opacity=alt.condition(pick, alt.value(1.0), alt.value(0.45)),
        tooltip=["gpu:N", "model:N", alt.Tooltip("bucket:T", title="from"),
                 alt.Tooltip("allocation:Q", format=".0%"), alt.Tooltip("utilization:Q", format=".0%")],
    ).add_params(pick).properties(height=max(160, 24 * len(shown))),
    width="stretch", height=max(160, 24 * len(shown)) + 70, on_select="rerun", key="heatmap",
)
picked = [p.get("gpu") for p in (event.selection.get("pick") or [])] if event else []
labels = gpus["gpu"].tolist()
label_of = dict(zip(gpus["gpu_uuid"], gpus["gpu"]))
# a link names a GPU by its UUID (?gpu=...): applied when the URL's GPU changes
url_gpu = st.query_params.get("gpu")
if url_gpu and url_gpu != st.session_state.get("gpu_url_seen") and url_gpu in label_of:
    st.session_state["gpu_pick"] = label_of[url_gpu]
st.session_state["gpu_url_seen"] = url_gpu
# a chart selection persists across reruns: apply it only when it changes, so choosing
# another GPU in the list afterwards is not overridden by the old click
if picked and picked[0] in labels and picked[0] != st.session_state.get("gpu_clicked"):
    st.session_state["gpu_pick"] = picked[0]
st.session_state["gpu_clicked"] = picked[0] if picked else None
if st.session_state.get("gpu_pick") not in labels:
    st.session_state["gpu_pick"] = labels[0]

st.dataframe(
    common.as_pct(gpus[["gpu", "tenant", "model", "driver", "health", "metered_h", "allocation", "utilization", "cost",
                        "waste_cost", "idle_alloc_gpu_h", "waste_gpu_h", "degraded_h", "unverified_h", "unmetered_h",
                        "max_slices"]], "allocation", "utilization"),
    hide_index=True, width="stretch", key="gpu_table",
    column_config={"gpu": "GPU", "driver": "granted by", "health": "health this month",
                   "metered_h": common.hours_col("metered"),
                   "allocation": common.pct_col("allocated"), "utilization": common.pct_col("SM utilization"),
                   "cost": st.column_config.TextColumn(f"cost ({currency})", help="metered hours at the catalog price"),
                   "waste_cost": st.column_config.TextColumn(f"paid for, not used ({currency})",
                                                             help="the slices' allocation minus usage at the catalog price"),
                   "idle_alloc_gpu_h": common.gpu_h_col("allocated but idle",
                                                        "allocation SM kernels did not use, per GPU-day"),
                   "waste_gpu_h": common.gpu_h_col("unused allocation", "the slices' allocation minus usage"),
                   "degraded_h": common.hours_col("degraded", "GPU-hours with a critical Xid, an uncorrectable ECC "
                                                  "error, lost or throttled (docs/health.md)"),
                   "unverified_h": common.hours_col("usage unverified", "slice-hours whose usage NVML could not check"),
                   "unmetered_h": common.hours_col("unmetered", "hours with no metering between the GPU's first "
                                                   "metered hour and the latest"),
                   "max_slices": common.number_col("max slices", digits=0)})

events = data.query("gpu_events", throttled_share=data.throttled_share(), gpus=gpus["gpu_uuid"].tolist(), **b)
if not events.empty:
    st.subheader("Health events")
    st.caption("Hours with an Xid, an uncorrectable ECC error, throttling, the GPU lost or its device reported "
               "Unhealthy or Unknown by Kubernetes, and the tenants whose slices were on it then; a degraded hour "
               "may be credited (docs/health.md).")
    st.dataframe(events, hide_index=True, width="stretch", key="health_events",
                 column_config={"hour": st.column_config.DatetimeColumn("hour", format="YYYY-MM-DD HH:00"),
                                "gpu_uuid": "GPU", "what": "what happened", "tenants": "tenants on it"})

st.subheader("Slices on a GPU")
label = st.selectbox("GPU", labels, key="gpu_pick")
row = gpus[gpus["gpu"] == label].iloc[0]
if st.query_params.get("gpu") != row.gpu_uuid:   # the link to this view names the GPU
    st.query_params["gpu"] = row.gpu_uuid
    st.session_state["gpu_url_seen"] = row.gpu_uuid
st.caption(f"{row.model} · node {row.node} · tenant {row.tenant} · {row.driver} · `{row.gpu_uuid}`")
m1, m2, m3 = st.columns(3)
m1.metric("Allocated", fmt.pct(row.allocation))
m2.metric("SM utilization", fmt.pct(row.utilization) if row.utilization == row.utilization else "no reader")
m3.metric("Slices at most", int(row.max_slices))
if row.utilization != row.utilization:   # NULL: nothing measured its usage
    st.info(f"No usage reader for this device ({row.driver}): it is metered and billed by allocation, "
            "from its claims; usage is left empty.")
own_events = events[events["gpu_uuid"] == row.gpu_uuid]
if not own_events.empty:
    st.dataframe(own_events.drop(columns=["gpu_uuid", "node"]), hide_index=True, width="stretch", key="gpu_health",
                 column_config={"hour": st.column_config.DatetimeColumn("hour", format="YYYY-MM-DD HH:00"),
                                "what": "what happened", "tenants": "tenants on it"})
slices = data.query("gpu_slices", gpu=row.gpu_uuid, **b)
st.dataframe(common.as_pct(common.blank_missing(slices, "claim"), "alloc_cores", "used_of_allocated", "sm_util_max"), hide_index=True, width="stretch",
             column_config={"driver": st.column_config.TextColumn("granted by", help="the DRA driver of the slice's "
                                                                  "ResourceClaim, or HAMi's device plugin"),
                            "claim": st.column_config.TextColumn("claim", help="the ResourceClaim (DRA only)"),
                            "whole_gpu": st.column_config.CheckboxColumn("whole GPU"),
                            "alloc_memory_gib": common.gib_col("memory granted"),
                            "alloc_cores": common.pct_col("cores granted"),
                            "hours": common.hours_col("present"),
                            "allocated_gpu_h": common.gpu_h_col("allocated"), "used_gpu_h": common.gpu_h_col("used"),
                            "used_of_allocated": common.pct_col("used / allocated"),
                            "sm_util_max": common.pct_col("peak SM"),
                            "memory_used_max_gib": common.gib_col("peak memory")})
hourly = data.query("gpu_slice_hourly", gpu=row.gpu_uuid, **b)
if not hourly.empty:
    long = hourly.melt(id_vars=["hour", "slice"], value_vars=["allocation", "usage"], var_name="measure", value_name="share")
    common.chart(alt.Chart(long).mark_line(interpolate="step-after").encode(
        x=alt.X("hour:T", title=None), y=alt.Y("share:Q", axis=alt.Axis(format="%"), title="share of the GPU"),
        color=alt.Color("slice:N", legend=alt.Legend(orient="bottom", title=None)),
        strokeDash=alt.StrokeDash("measure:N", legend=alt.Legend(orient="bottom", title=None)),
        tooltip=[alt.Tooltip("hour:T"), "slice:N", "measure:N", alt.Tooltip("share:Q", format=".1%")],
    ).properties(height=220))
