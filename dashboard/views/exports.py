"""Exports: the month's invoice CSV and FOCUS 1.2 file, as `slicemeter export` writes them."""
import streamlit as st

from dashboard import common, data

common.header("Exports", "Download the month's invoice and FOCUS 1.2 cost and usage files")
c1, c2 = st.columns(2)
basis = c1.radio("Cost basis", ["allocation", "usage", "max"], horizontal=True, key="export_basis")
idle = c2.radio("Idle capacity", ["platform", "shared"], horizontal=True, key="export_idle")
try:
    files = data.exports(common.month(), basis, idle)
except data.ModuleMissing as exc:
    st.warning(f"Exports unavailable: {exc}. Run `slicemeter export --db FILE --month {common.month()} --out DIR` once it is.")
    st.stop()
except RuntimeError as exc:
    st.error(str(exc))
    st.stop()
if not files:
    st.info("`slicemeter export` wrote no files for this month.")
for name, blob in files.items():
    mime = "text/csv" if name.endswith(".csv") else "application/octet-stream"
    st.download_button(f"Download {name} ({len(blob):,} bytes)", blob, file_name=name, mime=mime, key=f"dl-{name}")
