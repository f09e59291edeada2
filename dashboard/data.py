"""Read-only data access for the dashboard.

Every query is a file under sql/queries/ and goes through `query()`, which caches the
result keyed on the database file's identity (path, size, mtime): ingest's snapshot is
replaced atomically, so new data changes the key and the next rerun reads it. A
connection is opened per cache miss and closed at once: holding one would pin the old
snapshot file and keep a lock that `slicemeter export` needs.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

import duckdb
import pandas as pd
import streamlit as st

from ingest.store import connect, sql_text

DB_ENV = "SLICEMETER_DB"


class NoDatabase(RuntimeError):
    pass


def db_path() -> Path:
    """The database: `--db FILE` after `--` on the streamlit command line, else $SLICEMETER_DB."""
    argv = sys.argv[1:]
    value = None
    if "--db" in argv and argv.index("--db") + 1 < len(argv):
        value = argv[argv.index("--db") + 1]
    value = value or os.environ.get(DB_ENV)
    if not value:
        raise NoDatabase(f"no database: run `slicemeter dashboard --db FILE` or set {DB_ENV}")
    path = Path(value)
    if not path.is_file():
        raise NoDatabase(f"database file not found: {path}")
    return path


def db_version(path: Path) -> tuple:
    """Changes whenever the file (or its WAL) changes: the cache key for new data."""
    st_ = path.stat()
    wal = path.with_name(path.name + ".wal")
    wal_m = wal.stat().st_mtime_ns if wal.exists() else 0
    return (st_.st_ino, st_.st_size, st_.st_mtime_ns, wal_m)


@contextlib.contextmanager
def open_db(path: Path | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    con = connect(path or db_path(), read_only=True)
    try:
        yield con
    finally:
        con.close()


@st.cache_data(show_spinner=False, max_entries=512)
def _cached(path: str, version: tuple, name: str, params: tuple) -> pd.DataFrame:
    with open_db(Path(path)) as con:
        return con.execute(sql_text(f"queries/{name}.sql"), dict(params)).df()


def query(name: str, **params) -> pd.DataFrame:
    """Run sql/queries/<name>.sql with named parameters ($start, $end, ...)."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"bad query name {name!r}")
    path = db_path()
    return _cached(str(path.resolve()), db_version(path), name, tuple(sorted(params.items())))


class ModuleMissing(RuntimeError):
    """A part of slicemeter this page needs is not installed; the text names it."""


def _import(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise ModuleMissing(f"{module} module not installed") from None
        raise


@st.cache_data(show_spinner="Computing chargeback…", max_entries=64)
def _chargeback(path: str, version: tuple, month: str, basis: str, idle: str) -> pd.DataFrame:
    cb = _import("ingest.chargeback")
    with open_db(Path(path)) as con:
        return cb.chargeback(con, month, basis=basis, idle=idle)


def chargeback(month: str, basis: str, idle: str) -> pd.DataFrame:
    """ingest.chargeback.chargeback on this database: the same code the exports use."""
    _import("ingest.chargeback")  # fail before touching the cache
    path = db_path()
    return _chargeback(str(path.resolve()), db_version(path), month, basis, idle)


@st.cache_data(show_spinner="Computing the sharing dividend…", max_entries=64)
def _dividend(path: str, version: tuple, month: str):
    div = _import("ingest.dividend")
    from ingest.prices import load_prices_or_default

    with open_db(Path(path)) as con:
        return div.dividend(con, month, load_prices_or_default(None))


def dividend(month: str):
    """ingest.dividend.dividend on this database, at the default price catalog: the same
    figures as `slicemeter report`."""
    _import("ingest.dividend")
    path = db_path()
    return _dividend(str(path.resolve()), db_version(path), month)


@st.cache_data(show_spinner="Writing the month's exports…", max_entries=32)
def _exports(path: str, version: tuple, month: str, basis: str, idle: str) -> dict[str, bytes]:
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="slicemeter-export-") as out:
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())",
             "export", "--db", path, "--month", month,
             "--out", out, "--basis", basis, "--idle", idle],
            capture_output=True, text=True, timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"slicemeter export failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return {p.name: p.read_bytes() for p in sorted(Path(out).rglob("*")) if p.is_file()}


def exports(month: str, basis: str, idle: str) -> dict[str, bytes]:
    """The month's export files (name -> bytes), written by `slicemeter export` (ingest.exports)
    in a child process, so the dashboard shows exactly what the CLI writes."""
    _import("ingest.exports")
    path = db_path()
    return _exports(str(path.resolve()), db_version(path), month, basis, idle)


def carbon_intensity(default: float = 320.0) -> float:
    """gCO2e per kWh from the price catalog's electricity section, else `default`."""
    import yaml

    prices = Path(os.environ.get("SLICEMETER_PRICES", Path(__file__).resolve().parent.parent / "examples" / "prices.yaml"))
    try:
        value = (yaml.safe_load(prices.read_text()) or {}).get("electricity", {}).get("carbon_g_per_kwh")
        return float(value) if value is not None else default
    except (OSError, yaml.YAMLError, AttributeError, TypeError, ValueError):
        return default
