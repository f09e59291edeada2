"""Exports: the month's invoice CSV and FOCUS 1.2 file, as `slicemeter export` writes them."""
from datetime import datetime, timezone

import streamlit as st

from slicemeter.dashboard import common, data

common.header("Exports", "Download the month's invoice and FOCUS 1.2 cost and usage files")
c1, c2 = st.columns(2)
basis = c1.radio("Cost basis", ["allocation", "usage", "max"], horizontal=True, key="export_basis")
idle = c2.radio("Idle capacity", ["platform", "shared"], horizontal=True, key="export_idle")
month = common.month()
key = (data.scope(), month, basis, idle)   # a user granted several tenants switches between them
# Writing the files runs `slicemeter export` (seconds, not milliseconds), and a live
# snapshot changes every few seconds: build on request, and say when they were built.
built = st.session_state.setdefault("export_files", {})
if st.button(f"Write the {month} files from the current data", key="export_build", type="primary"):
    try:
        built[key] = (data.exports(month, basis, idle), datetime.now(timezone.utc))
    except data.ModuleMissing as exc:
        st.warning(f"Exports unavailable: {exc}. Run `slicemeter export --db FILE --month {month} --out DIR` once it is.")
        st.stop()
    except RuntimeError as exc:
        st.error(str(exc))
        st.stop()
if key not in built:
    st.caption("The files are those `slicemeter export` writes: invoice CSV, FOCUS 1.2 (CSV and Parquet), "
               "the Parquet detail and the unmetered hours.")
    st.stop()
files, when = built[key]
st.caption(f"Written {when:%Y-%m-%d %H:%M:%S} UTC · basis {basis} · idle {idle}")
if not files:
    st.info("`slicemeter export` wrote no files for this month.")
for name, blob in files.items():
    mime = "text/csv" if name.endswith(".csv") else "application/octet-stream"
    st.download_button(f"Download {name} ({len(blob):,} bytes)", blob, file_name=name, mime=mime, key=f"dl-{name}")
