"""slicemeter: observability and chargeback for fractional GPUs."""
__version__ = "0.1.0"
