"""Problems: what needs a person this month, one row per thing, each linking to its GPU's
slices on the GPUs page."""
from urllib.parse import urlencode

import streamlit as st

from slicemeter.dashboard import common, data, filters

KINDS = {
    "degraded": "degraded GPU-hours",
    "unmetered": "unmetered gap",
    "unverified": "usage unverified",
    "unknown": "usage unknown",
    "idle": "allocated but idle",
    "memory": "near its memory limit",
}
IDLE_ALLOC_MIN, IDLE_UTIL_MAX, MEMORY_LIMIT_SHARE = 0.5, 0.05, 0.9

common.header("Problems", "What needs a person: degraded GPUs, gaps in metering, usage nobody could check, "
              "GPUs allocated but idle, slices near their memory limit")
b = common.bounds()
# the tenant picked on GPUs or Tenants, if any, and changeable here
tenants = filters.choices(data.query("gpu_filter_options", **b))["tenant"]
kept = (st.session_state.get(filters.SESSION_KEY) or {}).get("tenant")
if len(tenants) > 1:
    if "problems_tenant" not in st.session_state:   # arriving: the kept choice; then the widget's own
        st.session_state["problems_tenant"] = kept if kept in tenants else None
    tenant = st.selectbox("Tenant", [None, *tenants], key="problems_tenant", placeholder="all",
                          format_func=lambda v: "all" if v is None else v)
    if tenant != kept:
        filters.remember(tenant=tenant)
else:
    tenant = None
rows = data.query("problems", throttled_share=data.throttled_share(), tenant=tenant, idle_alloc_min=IDLE_ALLOC_MIN,
                  idle_util_max=IDLE_UTIL_MAX, memory_limit_share=MEMORY_LIMIT_SHARE, **b)
if rows.empty:
    st.success(f"Nothing needs a person in {common.month()}.")
else:
    counts = rows["kind"].value_counts()
    for col, (kind, label) in zip(st.columns(len(KINDS)), KINDS.items()):
        col.metric(label, f"{int(counts.get(kind, 0)):,}")
    shown = st.multiselect("Show", list(KINDS), default=list(KINDS), format_func=KINDS.get, key="problem_kinds")
    rows = rows[rows["kind"].isin(shown)]
    # a relative link: the GPUs page of this same app, wherever it is served from
    rows["slices"] = ["gpus?" + urlencode({"gpu": g}) for g in rows["gpu_uuid"]]
    rows["kind"] = rows["kind"].map(KINDS)
    rows["slice"] = rows["slice"].fillna("")
    rows = rows[["kind", "tenant", "gpu", "slices", "slice", "what", "hours"]]   # the link beside its GPU
    st.dataframe(rows, hide_index=True, width="stretch", key="problems",
                 column_config={"kind": "what needs a person", "gpu": "GPU", "slice": "slice (namespace/pod/container)",
                                "what": "detail", "hours": common.hours_col("hours"),
                                "slices": st.column_config.LinkColumn("its slices", display_text="open on GPUs")})
st.caption(f"Allocated but idle: allocated at least {IDLE_ALLOC_MIN:.0%} of the month with SM kernels busy under "
           f"{IDLE_UTIL_MAX:.0%}; hours are the allocation kernels did not use. Near its memory limit: peak memory "
           f"at {MEMORY_LIMIT_SHARE:.0%} of the slice's limit or more; hours are the hours it was.")
