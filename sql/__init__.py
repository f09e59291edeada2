"""slicemeter's DuckDB statements (*.sql below this folder), shipped as package data so
that a wheel install finds them: slicemeter.store resolves this package's folder."""
