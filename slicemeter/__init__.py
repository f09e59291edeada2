"""slicemeter: observability and chargeback for fractional GPUs."""
# The release: semantic versions, one entry each in CHANGELOG.md. pyproject.toml reads it
# from here. The Tick wire version (tick.py) and the store's schema (sql/schema) are versioned
# on their own.
__version__ = "0.4.0"
