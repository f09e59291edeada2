"""The dashboard's page scripts, run by app.py's st.navigation (not imported)."""
