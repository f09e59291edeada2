"""The tenant catalog's health on the Tenants page: when each source last synced, and
which clusters match no tenant (their samples bill as 'unassigned')."""
from __future__ import annotations

import streamlit as st

from slicemeter.dashboard import common, data


def _when(ts) -> str:
    return f"{ts:%Y-%m-%d %H:%M} UTC" if ts is not None and ts == ts else "never"


def panel(bounds: dict) -> None:
    st.subheader("Tenant catalog")
    syncs = data.query("catalog_syncs")
    if syncs.empty:
        st.caption("No catalog sync recorded: ingest stores the catalog at start-up and every --catalog-interval.")
    for row in syncs.itertuples():
        line = f"**{row.source}**: last synced {_when(row.last_synced)}"
        if row.last_ok:
            st.markdown(f"{line}, {int(row.tenants)} tenants, {int(row.aliases)} addresses"
                        + (f" ({row.message})" if row.message else ""))
        else:
            st.warning(f"{line}; the latest refresh ({_when(row.last_attempt)}) failed: {row.message}")
    unassigned = data.query("catalog_unassigned", **bounds)
    if unassigned.empty:
        st.success(f"Every cluster metered in {common.month()} matches a tenant.")
        return
    st.warning(f"{len(unassigned)} cluster(s) match no tenant in {common.month()}: their samples bill as "
               "'unassigned'. Add the address to the tenant's aliases, or check the Kamaji source.")
    st.dataframe(unassigned, hide_index=True, width="stretch",
                 column_config={"gpu_hours": common.gpu_h_col("metered"),
                                "first_hour": st.column_config.DatetimeColumn("first hour", format="YYYY-MM-DD HH:mm"),
                                "last_hour": st.column_config.DatetimeColumn("last hour", format="YYYY-MM-DD HH:mm")})
