"""Right-sizing page: the rendering lives in slicemeter.dashboard.right_sizing (render(con, month)),
which the tests drive without a page script."""
import importlib

import streamlit as st

from slicemeter.dashboard import common, data

try:
    right_sizing = importlib.import_module("slicemeter.dashboard.right_sizing")
except ModuleNotFoundError as exc:
    if exc.name not in ("slicemeter.dashboard.right_sizing", "slicemeter.rightsizing.plan"):
        raise
    common.header("Right-sizing", "Per-slice recommendations and a consolidation plan")
    st.warning(f"Right-sizing unavailable: {exc.name} module not installed.")
    st.stop()

with data.open_db() as con:
    right_sizing.render(con, common.month())
