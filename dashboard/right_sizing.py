"""Right-sizing page: per-slice recommendations and the consolidation plan for a month.

`render(con, month)` is called by the dashboard's view (dashboard/views/right_sizing.py)
with a read-only store connection; it only reads (slicemeter.rightsizing.plan.build_plan).
"""
from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from slicemeter.common import file_version
from slicemeter.dashboard import fmt
from slicemeter.dashboard.data import NoDatabase, connection_scope, db_path
from slicemeter.chargeback.prices import DEFAULT_PRICES as PRICES_FILE
from slicemeter.rightsizing.kept import Stamp, data_stamp, kept_path, kept_plan_for
from slicemeter.rightsizing.plan import Plan, build_plan, price_key

ROWS_SHOWN = 500   # table rows a page sends; a large fleet's full lists are the CLI's
FLAGS = {"over_requested": "over-requested (grant > 2x p99)",
         "oom_risk": "OOM risk (p99 > 90 % of limit)",
         "idle": "idle reservation"}
SLICE_COLUMNS = {
    "tenant": "Tenant", "namespace": "Namespace", "pod": "Pod", "container": "Container",
    "node": "Node", "model": "GPU model", "hours": "Hours",
    "grant_memory_mib": "gpumem now (MiB)", "recommended_gpumem_mib": "gpumem rec. (MiB)",
    "mem_p50_mib": "mem p50 (MiB)", "mem_p95_mib": "mem p95 (MiB)", "mem_p99_mib": "mem p99 (MiB)",
    "mem_max_mib": "mem max (MiB)",
    "grant_cores_pct": "gpucores now (%)", "recommended_gpucores_pct": "gpucores rec. (%)",
    "sm_p50_pct": "SM p50 (%)", "sm_p95_pct": "SM p95 (%)", "sm_p99_pct": "SM p99 (%)",
    "sm_max_pct": "SM max (%)", "hours_since_kernel": "h since kernel",
    "over_requested": "over-req.", "oom_risk": "OOM risk", "idle": "idle",
    "planned_node": "planned node",
}


def _prices():
    """The default price catalog, when the repository has one (the dashboard has no
    price option of its own)."""
    if not PRICES_FILE.is_file():
        return None, "USD"
    from slicemeter.chargeback.prices import load_prices
    try:
        catalog = load_prices(PRICES_FILE)
        return catalog.gpu_hour, catalog.currency
    except Exception as exc:  # a broken catalog costs the money figure, not the page
        st.warning(f"Price catalog not used: {exc}")
        return None, "USD"


@st.cache_data(show_spinner="Planning the month...", max_entries=8)
def _cached_plan(db_file: str, version: tuple, tenant: str | None, month: str, headroom: float,
                 prices_key: str, _prices, currency, _con):
    # keyed on the database file and its version (a new snapshot replans), the tenant the
    # connection is scoped to (one tenant's plan never answers another), month, headroom
    # and the price catalog's content
    return build_plan(_con, month, headroom=headroom, prices=_prices, currency=currency)


@st.cache_data(show_spinner=False, max_entries=8)
def _cached_kept(kept: str, version: tuple, wanted: Stamp):
    # keyed on the kept file's version and what the page would plan
    return kept_plan_for(kept, wanted)


def _kept(con, month: str, headroom: float, prices, currency) -> tuple[Plan, str] | None:
    """The plan ingest kept beside the readers' file this connection reads, when it is the
    one this page would make (slicemeter.rightsizing.kept; the whole fleet's only), with a
    line saying which refresh it was made from."""
    if connection_scope(con) is not None:
        return None
    data = data_stamp(con)
    if data is None:
        return None
    try:
        kept = kept_path(db_path())
        version = file_version(kept)
    except (NoDatabase, OSError):
        return None
    wanted = Stamp(*data, month, headroom, price_key(prices, currency))
    found = _cached_kept(str(kept), version, wanted)
    if found is None:
        return None
    stamp, plan = found
    note = "Planned by ingest from this data." if stamp.refresh >= wanted.refresh else (
        "Planned by ingest from the readers' file's previous refresh; the plan of this one follows "
        "in seconds.")
    return plan, note


def _plan(con, month: str, headroom: float) -> tuple[Plan, str | None]:
    """The plan ingest kept for this data, with a line on where it comes from; else planned
    here, cached per database file version (on a large fleet it takes seconds, and every
    widget change reruns the page)."""
    prices, currency = _prices()
    kept = _kept(con, month, headroom, prices, currency)
    if kept is not None:
        return kept
    row = con.execute("SELECT path FROM duckdb_databases() "
                      "WHERE database_name = current_database()").fetchone()
    path = Path(row[0]) if row and row[0] else None
    if path is None or not path.is_file():
        return build_plan(con, month, headroom=headroom, prices=prices, currency=currency), None
    return _cached_plan(str(path), file_version(path), connection_scope(con), month, headroom,
                        price_key(prices, currency), prices, currency, con), None


def _slice_table(slices: pd.DataFrame) -> pd.DataFrame:
    mib = 1024 * 1024
    t = slices.assign(
        **{f"mem_{p}_mib": slices[f"mem_{p}"] / mib for p in ("p50", "p95", "p99", "max")},
        **{f"sm_{p}_pct": slices[f"sm_{p}"] * 100 for p in ("p50", "p95", "p99", "max")},
    )
    return t[list(SLICE_COLUMNS)].rename(columns=SLICE_COLUMNS)


def render(con, month: str) -> None:
    st.title("Right-sizing")
    st.caption(f"What each slice should ask for, and how many GPUs the fleet could give "
               f"back · {month} (UTC)")
    headroom = st.slider("Headroom over observed needs (%)", 0, 100, 20, step=5,
                         key="recommend_headroom",
                         help="gpumem = p99 memory peak x (1 + headroom); gpucores = p99 "
                              "SM share x (1 + headroom); the plan packs p95 needs x "
                              "(1 + headroom).") / 100
    plan, where = _plan(con, month, headroom)
    if where:
        st.caption(where)
    s = plan.summary
    if not s["gpus_total"]:
        st.info(f"No metered GPUs in {month}.")
        return

    c = st.columns(4)
    c[0].metric("GPUs freeable", f"{s['gpus_freeable']:,} of {s['gpus_total']:,}",
                help=f"{s['nodes_freeable']} whole nodes")
    c[1].metric("Monthly saving",
                fmt.money(s["monthly_saving"], s["currency"]) if s["currency"] else "n/a",
                help="freed GPUs x catalog price per GPU-hour x hours in the month")
    c[2].metric("Utilization", f"{s['projected_utilization']:.1%}",
                delta=f"{s['projected_utilization'] - s['utilization_today']:+.1%} vs today "
                      f"({s['utilization_today']:.1%})")
    c[3].metric("Plan vs first-fit decreasing", f"{s['gpus_planned']:,} GPUs",
                delta=f"{s['gpus_planned'] - s['gpus_ffd']:+,} vs FFD", delta_color="inverse",
                help=f"lower bound {s['lower_bound_gpus']:,}; gap {s['optimality_gap']} GPUs"
                     f"{' (proven optimal)' if s['proven_optimal'] else ''}")
    if s.get("gpus_short"):
        st.warning(f"{s['gpus_short']} more GPUs needed where p95 needs exceed today's GPUs.")
    if s.get("unpriced_models"):
        st.warning(f"No price for: {', '.join(s['unpriced_models'])}")

    st.subheader("Consolidation plan per tenant cluster and GPU model")
    g = plan.groups
    bars = pd.concat([
        g.assign(when="today (holding slices)", gpus=g["gpus_with_slices_today"]),
        g.assign(when="planned", gpus=g["gpus_planned"]),
    ])
    st.altair_chart(
        alt.Chart(bars).mark_bar().encode(
            x=alt.X("gpus:Q", title="GPUs"), y=alt.Y("tenant:N", title=None),
            yOffset="when:N", color=alt.Color("when:N", title=None),
            tooltip=["tenant", "model", "when", "gpus"]),
        width="stretch")
    st.dataframe(g.rename(columns={
        "tenant": "Tenant", "cluster": "Cluster", "model": "GPU model", "gpus_today": "GPUs",
        "gpus_with_slices_today": "holding slices", "slices": "Slices", "gpus_ffd": "FFD",
        "gpus_planned": "Planned", "lower_bound": "Lower bound", "recurring_units": "Recurring needs",
        "proven_optimal": "Optimal", "method": "Method"}), hide_index=True, width="stretch")

    st.subheader("Slices")
    chosen = st.multiselect("Show slices flagged", list(FLAGS), format_func=FLAGS.get,
                            key="recommend_flags")
    sl = plan.slices
    if chosen:
        sl = sl[sl[chosen].any(axis=1)]
    counts = " · ".join(f"{int(plan.slices[f].sum())} {FLAGS[f]}" for f in FLAGS)
    st.caption(f"{len(sl):,} of {len(plan.slices):,} slices · {counts} · "
               f"{s['slices_ended']} ended before the month's end (not placed; their GPU's "
               "recurring need is). Percentiles are nearest-rank over the month's hourly "
               "values (memory: hourly peaks; SM: hourly means).")
    top = sl.nlargest(ROWS_SHOWN, "memory_saving_mib") if len(sl) > ROWS_SHOWN else \
        sl.sort_values("memory_saving_mib", ascending=False)
    if len(sl) > ROWS_SHOWN:
        st.caption(f"The {ROWS_SHOWN:,} slices with the largest memory saving; "
                   "`slicemeter recommend --out DIR` writes them all.")
    st.dataframe(_slice_table(top), hide_index=True, width="stretch")

    with st.expander("Placement per GPU: today beside the plan"):
        p = plan.placement[["tenant", "node", "gpu_uuid", "model", "slices_today",
                            "need_mem_today", "need_sm_today", "slices_planned",
                            "need_mem_planned", "need_sm_planned", "moves_in", "freed"]]
        if len(p) > ROWS_SHOWN:
            st.caption(f"The first {ROWS_SHOWN:,} of {len(p):,} GPUs; `slicemeter recommend --out DIR` writes them all.")
        st.dataframe(p.head(ROWS_SHOWN).rename(columns={
            "tenant": "Tenant", "node": "Node", "gpu_uuid": "GPU", "model": "GPU model", "slices_today": "Slices today",
            "need_mem_today": "Memory need today", "need_sm_today": "SM need today", "slices_planned": "Slices planned",
            "need_mem_planned": "Memory need planned", "need_sm_planned": "SM need planned", "moves_in": "Slices moving in",
            "freed": "Freed"}), hide_index=True, width="stretch")
