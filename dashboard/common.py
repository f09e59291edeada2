"""What every page shares: the sidebar (database, month) and small rendering helpers."""
from __future__ import annotations

from datetime import datetime

import altair as alt
import pandas as pd
import streamlit as st

from slicemeter.common import SchemaMismatch, month_window
from slicemeter.dashboard import access, data, fmt

MONTH_KEY = "month"


def sidebar() -> bool:
    """Database check, who is signed in and which tenant they see, and the month picker;
    False (with the reason shown) when there is nothing to show."""
    try:
        path = data.db_path()
    except data.NoDatabase as exc:
        st.error(str(exc))
        return False
    try:
        user, allowed = data.signed_in()
        if data.fixed_tenant() is None and allowed is not None and len(allowed) > 1:
            st.sidebar.selectbox("Tenant", access.choices(allowed), key=data.TENANT_PICK)
        tenant = data.scope()
    except access.Denied as exc:
        st.error(str(exc))
        return False
    if user:
        st.sidebar.caption(f"Signed in as {user}")
    if tenant:
        st.sidebar.caption(f"Tenant: **{tenant}** (this dashboard shows only its data)")
    try:
        coverage = data.query("months")
    except SchemaMismatch as exc:
        st.info(f"Being upgraded: {exc}")
        return False
    months = coverage["month"].tolist()
    st.sidebar.caption(f"Database: `{data.db_label(path)}`")
    if not months and tenant:
        st.warning(f"No metered GPU-hours for tenant {tenant} (its clusters in the tenant catalog have reported none).")
        return False
    if not months:
        st.warning("The database has no metered GPU-hours yet. Start ingest, or run `slicemeter demo`.")
        return False
    opening, why = fmt.default_month(list(zip(months, coverage["days"].tolist())))
    if st.session_state.get(MONTH_KEY) not in months:
        st.session_state[MONTH_KEY] = opening
    st.sidebar.selectbox("Month (UTC)", months, key=MONTH_KEY)
    if st.session_state[MONTH_KEY] == opening:
        st.sidebar.caption(f"Opened on {opening}: {why}.")
    return True


def month() -> str:
    return st.session_state[MONTH_KEY]


def bounds() -> dict[str, datetime]:
    start, end, _hours = month_window(month())
    return {"start": start, "end": end}


def header(title: str, caption: str) -> None:
    st.title(title)
    st.caption(f"{caption} · {month()} (UTC)")


def chart(c: alt.TopLevelMixin) -> None:
    """Full width; the element gets the chart's own height (plus room for legend and axis)."""
    h = getattr(c, "height", None)
    st.altair_chart(c, width="stretch", height=h + 70 if isinstance(h, int) else "content")


def no_rows(df: pd.DataFrame, what: str) -> bool:
    if df.empty:
        st.info(f"No {what} in {month()}.")
        return True
    return False


# The tables' one number format (fmt.number's): thousands separators, the unit after a space.
def number_col(label: str, unit: str = "", digits: int = 1, help: str | None = None) -> st.column_config.NumberColumn:
    return st.column_config.NumberColumn(label, format=f"%,.{digits}f" + (f" {unit}" if unit else ""), help=help)


def gpu_h_col(label: str, help: str | None = None) -> st.column_config.NumberColumn:
    return number_col(label, "GPU-h", help=help)


def hours_col(label: str, help: str | None = None) -> st.column_config.NumberColumn:
    return number_col(label, "h", help=help)


def gib_col(label: str, help: str | None = None) -> st.column_config.NumberColumn:
    return number_col(label, "GiB", help=help)


def pct_col(label: str, help: str | None = None) -> st.column_config.NumberColumn:
    # values are percent numbers (as_pct), written as fmt.pct writes a fraction: "10.0 %"
    return st.column_config.NumberColumn(label, format="%.1f %%", help=help)


def blank_missing(df: pd.DataFrame, *cols: str) -> pd.DataFrame:
    """Text columns with missing values as blank cells (a device-plugin slice has no claim:
    the table says nothing there, not "None")."""
    return df.assign(**{c: df[c].map(fmt.cell) for c in cols if c in df.columns})


# The bill's columns (chargeback/bill.py) as a reader names them.
BILL_COLUMNS = {
    "charge_class": "charge class", "charge_period": "period", "kind": "line", "namespace": "namespace",
    "model": "GPU model", "gpu_hours_allocated": "allocated GPU-h", "gpu_hours_used": "used GPU-h",
    "gpu_hours_billed": "billed GPU-h", "gpu_hours_idle": "idle GPU-h", "charge": "charge", "idle_share": "idle share",
    "cost": "cost", "waste": "paid for, not used", "kwh": "energy (kWh)", "energy_cost": "energy cost",
    "gco2e": "emissions (gCO2e)", "currency": "currency", "usage_unverified_hours": "usage unverified (h)",
    "usage_unknown_hours": "usage unknown (h)", "unverified_at_allocation_hours": "unverified, billed at allocation (h)",
}


def as_pct(df: pd.DataFrame, *cols: str) -> pd.DataFrame:
    """Fractions to percent numbers for display with pct_col (sorting stays numeric)."""
    return df.assign(**{c: df[c] * 100 for c in cols if c in df.columns})

