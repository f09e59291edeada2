"""The Streamlit dashboard: reads the DuckDB store read-only, never writes."""
