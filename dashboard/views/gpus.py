"""GPUs: allocation and usage per physical GPU over time; click a GPU to see its slices."""
import altair as alt
import streamlit as st

from slicemeter.dashboard import common, data, fmt

common.header("GPUs", "Each physical GPU over time; pick one (or click its row in the heatmap) to see its slices")
b = common.bounds()
gpus = data.query("gpu_list", **b)
if common.no_rows(gpus, "GPUs"):
    st.stop()

GPUS_PER_PAGE = 40   # heatmap rows a screen shows; a large fleet is paged through
c1, c2, c3 = st.columns(3)
measure = c1.radio("Show", ["utilization", "allocation"], horizontal=True, key="gpu_measure",
                   format_func={"allocation": "allocated share", "utilization": "SM utilization"}.get)
bucket = c2.radio("Resolution", ["hour", "day"], horizontal=True, key="gpu_bucket", index=0 if len(gpus) <= 24 else 1)
pages = -(-len(gpus) // GPUS_PER_PAGE)
page = c3.number_input(f"GPUs page (of {pages})", 1, pages, 1, key="gpu_page") if pages > 1 else 1
first = (page - 1) * GPUS_PER_PAGE
heat = data.query("gpu_heatmap", bucket=bucket, offset=first, limit=GPUS_PER_PAGE, **b)
shown = gpus.iloc[first:first + GPUS_PER_PAGE]
if pages > 1:
    st.caption(f"GPUs {first + 1}-{first + len(shown)} of {len(gpus)}, in the order of the list below")

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
# a chart selection persists across reruns: apply it only when it changes, so choosing
# another GPU in the list afterwards is not overridden by the old click
if picked and picked[0] in labels and picked[0] != st.session_state.get("gpu_clicked"):
    st.session_state["gpu_pick"] = picked[0]
st.session_state["gpu_clicked"] = picked[0] if picked else None
if st.session_state.get("gpu_pick") not in labels:
    st.session_state["gpu_pick"] = labels[0]

st.dataframe(common.as_pct(gpus.drop(columns=["gpu_uuid"]), "allocation", "utilization"), hide_index=True, width="stretch",
             column_config={"metered_h": st.column_config.NumberColumn("metered", format="%.1f h"),
                            "allocation": common.pct_col("allocated"), "utilization": common.pct_col("SM utilization"),
                            "max_slices": "max slices"})

events = data.query("gpu_events", throttled_share=data.throttled_share(), **b)
if not events.empty:
    st.subheader("Health events")
    st.caption("Hours with an Xid, an uncorrectable ECC error, throttling, the GPU lost or its device reported "
               "Unhealthy or Unknown by Kubernetes, and the tenants whose slices were on it then; a degraded hour "
               "may be credited (docs/health.md).")
    st.dataframe(events, hide_index=True, width="stretch", key="health_events",
                 column_config={"gpu_uuid": "GPU", "what": "what happened", "tenants": "tenants on it"})

st.subheader("Slices on a GPU")
label = st.selectbox("GPU", labels, key="gpu_pick")
row = gpus[gpus["gpu"] == label].iloc[0]
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
                 column_config={"what": "what happened", "tenants": "tenants on it"})
slices = data.query("gpu_slices", gpu=row.gpu_uuid, **b)
st.dataframe(common.as_pct(slices, "alloc_cores", "used_of_allocated", "sm_util_max"), hide_index=True, width="stretch",
             column_config={"driver": st.column_config.TextColumn("granted by", help="the DRA driver of the slice's "
                                                                  "ResourceClaim, or HAMi's device plugin"),
                            "claim": st.column_config.TextColumn("claim", help="the ResourceClaim (DRA only)"),
                            "alloc_memory_gib": st.column_config.NumberColumn("memory granted", format="%.1f GiB"),
                            "alloc_cores": common.pct_col("cores granted"),
                            "hours": st.column_config.NumberColumn("present", format="%.1f h"),
                            "allocated_gpu_h": common.gpu_h_col("allocated"), "used_gpu_h": common.gpu_h_col("used"),
                            "used_of_allocated": common.pct_col("used / allocated"),
                            "sm_util_max": common.pct_col("peak SM"),
                            "memory_used_max_gib": st.column_config.NumberColumn("peak memory", format="%.1f GiB")})
hourly = data.query("gpu_slice_hourly", gpu=row.gpu_uuid, **b)
if not hourly.empty:
    long = hourly.melt(id_vars=["hour", "slice"], value_vars=["allocation", "usage"], var_name="measure", value_name="share")
    common.chart(alt.Chart(long).mark_line(interpolate="step-after").encode(
        x=alt.X("hour:T", title=None), y=alt.Y("share:Q", axis=alt.Axis(format="%"), title="share of the GPU"),
        color=alt.Color("slice:N", legend=alt.Legend(orient="bottom", title=None)),
        strokeDash=alt.StrokeDash("measure:N", legend=alt.Legend(orient="bottom", title=None)),
        tooltip=[alt.Tooltip("hour:T"), "slice:N", "measure:N", alt.Tooltip("share:Q", format=".1%")],
    ).properties(height=220))
