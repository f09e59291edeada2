"""slicemeter dashboard: `slicemeter dashboard --db FILE` (or `streamlit run dashboard/app.py -- --db FILE`)."""
from __future__ import annotations

import streamlit as st

from slicemeter.dashboard import common, data

st.set_page_config(page_title="slicemeter", page_icon=":material/memory:", layout="wide")

# The page scripts live in views/, not pages/: Streamlit takes a pages/ folder beside app.py
# for an old-style multipage app and runs its scripts itself.
PAGES = [
    st.Page("views/fleet.py", title="Fleet", icon=":material/dns:", default=True),
    st.Page("views/tenants.py", title="Tenants", icon=":material/groups:"),
    st.Page("views/problems.py", title="Problems", icon=":material/report:"),
    st.Page("views/gpus.py", title="GPUs", icon=":material/grid_view:"),
    st.Page("views/waste.py", title="Waste", icon=":material/delete_sweep:"),
    st.Page("views/exports.py", title="Exports", icon=":material/download:"),
    st.Page("views/right_sizing.py", title="Right-sizing", icon=":material/tune:", url_path="right-sizing"),
]

page = st.navigation(PAGES)
st.sidebar.markdown("**slicemeter** · fractional GPU metering")
try:
    if common.sidebar():
        page.run()
finally:   # also when the run stops early (st.stop, a rerun, an error)
    data.release_connections()
