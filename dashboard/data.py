"""Read-only data access for the dashboard.

Every query is a file under sql/dashboard/ and goes through `query()`, which caches the
result keyed on the database file's identity (path, size, mtime): ingest's snapshot is
replaced atomically, so new data changes the key and the next rerun reads it. Opening a
connection costs more than many of a page's queries (the views of sql/views/), so the
queries of a script run share connections (`_QueryConnections`), closed when the run ends:
a connection pins its data file, and ingest updates a readers' data file in place only
when no reader holds it (store/reader_file.py), else it copies the whole store.

A DuckLake (`--db ducklake:...`, store/lake.py) is keyed on its latest snapshot id
instead. Attaching one costs about a second (extensions, catalog, views), so its
connections are kept, one per tenant scope, each used under a lock in a transaction of
its own: a page's query reads the latest committed snapshot, and nothing is held between.

Tenant scope is enforced here, not in the pages: every connection a page gets is scoped
to the request's tenant (sql/scope/tenant.sql: the store's tables read as that tenant's
rows, every other table reads empty), chargeback and the export files are the full bill's
rows of that tenant, and every cache key carries the scope, so one tenant's cached result
never answers another's request (the fleet's bill is cached once for every scope and only
the request's tenant's rows of it leave data.py). The same holds for errors: a fleet-wide
computation can fail on another tenant's data, and a tenant is shown only that its figure is
unavailable (`Unavailable`), the whole message going to the dashboard's log.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from pathlib import Path
from typing import Iterator

import duckdb
import pandas as pd
import streamlit as st

from slicemeter.common import file_version, is_lake
from slicemeter.dashboard import access
from slicemeter.store.script import statements
from slicemeter.store import connect, lake, quote_ident, sql_text, transaction

DB_ENV = "SLICEMETER_DB"
TENANT_ENV = "SLICEMETER_TENANT"
ACCESS_ENV = "SLICEMETER_ACCESS"
TENANT_PICK = "tenant_pick"   # session key of the tenant picker (a user granted several)
_UNSET = object()


log = logging.getLogger("slicemeter.dashboard")


class NoDatabase(RuntimeError):
    pass


class Unavailable(RuntimeError):
    """A figure this request cannot have; its text is safe to show to the request's scope."""


def unavailable(what: str, exc: Exception) -> Unavailable:
    """The error a page shows for `exc`: its text for an unscoped (platform) request; for a
    tenant, one that names nothing of the fleet, since the failing computation may have
    read other tenants' nodes, GPUs and clusters. The whole text goes to the log."""
    if scope() is None:
        return Unavailable(f"{what}: {exc}")
    log.error("%s failed for a tenant's request: %s", what, exc)
    return Unavailable(f"{what} is unavailable: the platform's data or price catalog needs attention. "
                       "The dashboard's log has the details for the platform team.")


def script_option(name: str, env: str) -> str | None:
    """`--name VALUE` after `--` on the streamlit command line, else $env."""
    argv = sys.argv[1:]
    if name in argv and argv.index(name) + 1 < len(argv):
        return argv[argv.index(name) + 1]
    return os.environ.get(env) or None


def db_path() -> Path | str:
    """The database: `--db FILE` after `--` on the streamlit command line, else $SLICEMETER_DB;
    a lake's name as given."""
    value = script_option("--db", DB_ENV)
    if not value:
        raise NoDatabase(f"no database: run `slicemeter dashboard --db FILE` or set {DB_ENV}")
    if is_lake(value):
        return value
    path = Path(value)
    if not path.is_file():
        raise NoDatabase(f"database file not found: {path}")
    return path


def db_label(target: Path | str) -> str:
    """What the sidebar names: the file, or that it is a lake (its name may hold a password)."""
    return "a DuckLake" if isinstance(target, str) else target.name


def db_version(path: Path | str) -> tuple:
    """Changes whenever the file (or its WAL) changes, or the lake commits: the cache key for new data."""
    if isinstance(path, str):
        with _lake_connection(path, None) as con:
            return ("lake", con.execute("SELECT max(snapshot_id) FROM ducklake_snapshots(?)",
                                        [lake.ALIAS]).fetchone()[0])
    wal = path.with_name(path.name + ".wal")
    wal_m = wal.stat().st_mtime_ns if wal.exists() else 0
    return (*file_version(path), wal_m)


@st.cache_resource
def _access_config(path: str) -> access.AccessConfig:
    return access.load_access(path)


def fixed_tenant() -> str | None:
    """`--tenant T`: the one tenant this dashboard serves."""
    return access.check_tenant(script_option("--tenant", TENANT_ENV))


def access_config() -> access.AccessConfig | None:
    """`--access FILE`: identity from the proxy's headers, groups mapped to tenants."""
    path = script_option("--access", ACCESS_ENV)
    return _access_config(path) if path else None


def signed_in() -> tuple[str | None, frozenset[str] | None]:
    """(user, the tenants the user may see; None: all). access.Denied when it may see nothing."""
    cfg = access_config()
    if cfg is None:
        return None, None
    return access.allowed_tenants(cfg, st.context.headers)


def scope() -> str | None:
    """The tenant this request sees (None: every tenant). access.Denied when none."""
    _user, allowed = signed_in()
    return access.resolve_scope(fixed_tenant(), allowed, st.session_state.get(TENANT_PICK))


_STORE_TABLE = re.compile(r"\{store\}\.main\.([a-z_]+)")


def scope_connection(con: duckdb.DuckDBPyConnection, tenant: str) -> None:
    """Narrow a store connection to one tenant: sql/scope/tenant.sql shadows the tables a
    tenant's rows live in; every other table (raw samples, dead letters, frozen months,
    tables added later) is shadowed by an empty view, so nothing reads another tenant's
    rows through it."""
    catalog = con.execute("SELECT current_database()").fetchone()[0]
    store = quote_ident(catalog)
    # a lake derives its hour rows on read (sql/lake/views.sql unscoped_*): the scope narrows
    # those, not the lake's own tables of the same names
    derived = {name for (name,) in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE temporary AND starts_with(view_name, 'unscoped_')").fetchall()}

    def source(table: re.Match) -> str:
        name = table.group(1)
        return f"unscoped_{name}" if f"unscoped_{name}" in derived else f"{store}.main.{name}"

    text = _STORE_TABLE.sub(source, sql_text("scope/tenant.sql")).replace("{store}", store)
    scoped = set()
    for body in statements(text):
        con.execute(body, {"tenant": tenant} if "$tenant" in body else None)
        if body.startswith("CREATE OR REPLACE TEMP VIEW "):
            scoped.add(body.split()[5])
    others = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND NOT temporary "
        "UNION SELECT view_name FROM duckdb_views() WHERE database_name = current_database() "
        "AND NOT temporary AND NOT internal").fetchall()
    for (name,) in others:
        if name not in scoped:
            ident = quote_ident(name)
            con.execute(f"CREATE OR REPLACE TEMP VIEW {ident} AS SELECT * FROM {store}.main.{ident} LIMIT 0")


def connection_scope(con: duckdb.DuckDBPyConnection) -> str | None:
    """The tenant a connection was scoped to (None: unscoped), for caches keyed on a connection."""
    try:
        return con.execute("SELECT tenant FROM temp.main.scope_tenant").fetchone()[0]
    except duckdb.CatalogException:
        return None


@st.cache_resource(show_spinner="Attaching the lake…")
def _lake_handle(target: str, tenant: str | None) -> tuple[threading.Lock, duckdb.DuckDBPyConnection]:
    con = connect(target, read_only=True)
    if tenant is not None:
        scope_connection(con, tenant)
    con.execute("COMMIT")   # between uses the connection holds no snapshot (nor a catalog transaction)
    return threading.Lock(), con


@contextlib.contextmanager
def _lake_connection(target: str, tenant: str | None) -> Iterator[duckdb.DuckDBPyConnection]:
    """The kept lake connection for `tenant`, in a transaction: the lake's latest snapshot."""
    lock, con = _lake_handle(target, tenant)
    with lock, transaction(con):
        yield con


def store_key() -> tuple[str, tuple]:
    """This database's name and version, the first arguments of every cached read."""
    target = db_path()
    return (target if isinstance(target, str) else str(target.resolve())), db_version(target)


_LOCK_TRIES = 3


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


def _on_current(read):
    """read(path, version) on the data file the readers' link names now. Ingest writes the
    other data file, but a read that looked at the link just before a switch can reach its
    file as the next refresh begins writing it (DuckDB's lock refuses the reader): read again
    on a fresh look at the link, which names the file just written by then."""
    for attempt in range(_LOCK_TRIES):
        try:
            return read(*store_key())
        except duckdb.IOException as exc:
            if not _locked(exc) or attempt == _LOCK_TRIES - 1:
                raise


@contextlib.contextmanager
def open_db(path: Path | str | None = None, tenant: str | None | object = _UNSET) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection, scoped to `tenant` (default: this request's scope)."""
    tenant = scope() if tenant is _UNSET else tenant
    path = path or db_path()
    if is_lake(path):
        with _lake_connection(path, tenant) as con:
            yield con
        return
    for attempt in range(_LOCK_TRIES):   # opening the link again follows it afresh (_on_current)
        try:
            con = connect(path, read_only=True)
            break
        except duckdb.IOException as exc:
            if not _locked(exc) or attempt == _LOCK_TRIES - 1:
                raise
    try:
        if tenant is not None:
            scope_connection(con, tenant)
        yield con
    finally:
        con.close()


class _QueryConnections:
    """Read-only connections for the dashboard's SQL files, one per query at a time, kept
    between the queries of one script run (app.py releases them when the run ends) for the
    same (file, version, tenant): a page's cold run makes several queries in a row, and each
    would otherwise open and set up a connection of its own. A new version closes the
    previous one's at once (its data file is the one ingest writes next). The reads leave
    nothing another read sees: the SQL files only read, and the bill writes only its own
    TEMP working tables, which it empties before it fills them; a connection whose read
    failed is closed."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: dict[tuple, list[duckdb.DuckDBPyConnection]] = {}
        self._latest: dict[str, tuple] = {}     # path -> the newest version seen
        self.opened = 0

    @contextlib.contextmanager
    def connection(self, path: str, version: tuple, tenant: str | None) -> Iterator[duckdb.DuckDBPyConnection]:
        key = (path, version, tenant)
        with self._lock:
            if self._latest.get(path) != version:
                self._latest[path] = version
                self._close_where(lambda k: k[0] == path and k[1] != version)
            kept = self._idle.get(key)
            con = kept.pop() if kept else None
        if con is None:
            con = connect(path, read_only=True)
            self.opened += 1
            try:
                if tenant is not None:
                    scope_connection(con, tenant)
            except BaseException:
                con.close()
                raise
        try:
            yield con
        except BaseException:
            con.close()   # a failed query may leave a transaction open: not reused
            raise
        with self._lock:
            if self._latest.get(path) == version:
                self._idle.setdefault(key, []).append(con)
                return
        con.close()

    def release(self) -> None:
        """Close every connection not in use (the end of a script run)."""
        with self._lock:
            self._close_where(lambda k: True)

    def _close_where(self, stale) -> None:
        for key in [k for k in self._idle if stale(k)]:
            for con in self._idle.pop(key):
                con.close()

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())


_QUERY_CONNECTIONS = _QueryConnections()


@contextlib.contextmanager
def _read_connection(path: str, version: tuple, tenant: str | None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for one cached read: on a file, one the script run's reads share (the
    bill and the dividend included, so a cold page opens one connection, not one more for
    each of them); on a lake, its kept connection."""
    if is_lake(path):
        with open_db(path, tenant) as con:
            yield con
        return
    with _QUERY_CONNECTIONS.connection(path, version, tenant) as con:
        yield con


@st.cache_data(show_spinner=False, max_entries=512)
def _cached(path: str, version: tuple, tenant: str | None, name: str, params: tuple) -> pd.DataFrame:
    with _read_connection(path, version, tenant) as con:
        return con.execute(sql_text(f"dashboard/{name}.sql"), dict(params)).df()


def release_connections() -> None:
    """Close the connections this run's queries shared (app.py, when a run ends): none
    pins a data file between runs."""
    _QUERY_CONNECTIONS.release()


def query(name: str, **params) -> pd.DataFrame:
    """Run sql/dashboard/<name>.sql with named parameters ($start, $end, ...), on this
    request's tenant's rows."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"bad query name {name!r}")
    tenant, key = scope(), tuple(sorted(params.items()))
    return _on_current(lambda path, version: _cached(path, version, tenant, name, key))


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


@st.cache_data(show_spinner="Computing chargeback…", max_entries=16)
def _fleet_chargeback(path: str, version: tuple, month: str, basis: str, idle: str) -> pd.DataFrame:
    """The whole fleet's invoice lines (idle and rounding are fleet-wide): computed once per
    data change and month for every tenant's requests, which read their rows of it. At fleet
    scale the bill is the costliest thing a page shows."""
    cb = _import("slicemeter.chargeback.bill")
    with _read_connection(path, version, None) as con:
        return cb.chargeback(con, month, basis=basis, idle=idle)


def chargeback(month: str, basis: str, idle: str) -> pd.DataFrame:
    """slicemeter.chargeback.bill.chargeback on this database, this request's tenant's rows: the
    same code and rows as `slicemeter export --tenant`."""
    _import("slicemeter.chargeback.bill")  # fail before touching the cache
    tenant = scope()
    try:
        fleet = _on_current(lambda path, version: _fleet_chargeback(path, version, month, basis, idle))
    except Exception as exc:  # the fleet's bill fails on any tenant's data: see unavailable()
        raise unavailable("The month's bill", exc) from None
    return fleet if tenant is None else fleet[fleet["tenant"] == tenant].reset_index(drop=True)


@st.cache_data(show_spinner="Computing the sharing dividend…", max_entries=64)
def _dividend(path: str, version: tuple, tenant: str | None, month: str):
    div = _import("slicemeter.chargeback.dividend")
    from slicemeter.chargeback.prices import load_prices_or_default

    with _read_connection(path, version, tenant) as con:
        return div.dividend(con, month, load_prices_or_default(None))


def dividend(month: str):
    """slicemeter.chargeback.dividend.dividend on this database, at the default price catalog: the same
    figures as `slicemeter report`."""
    _import("slicemeter.chargeback.dividend")
    try:
        tenant = scope()
        return _on_current(lambda path, version: _dividend(path, version, tenant, month))
    except Exception as exc:
        raise unavailable("The sharing dividend", exc) from None


@st.cache_data(show_spinner="Writing the month's exports…", max_entries=32)
def _exports(path: str, version: tuple, tenant: str | None, month: str, basis: str, idle: str) -> dict[str, bytes]:
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="slicemeter-export-") as out:
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())",
             "export", "--db", path, "--month", month,
             "--out", out, "--basis", basis, "--idle", idle, *(["--tenant", tenant] if tenant else [])],
            capture_output=True, text=True, timeout=300,
        )
        if proc.returncode == 4:   # nothing to bill in the month for this scope: no files
            return {}
        if proc.returncode != 0:
            raise RuntimeError(f"slicemeter export failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return {p.name: p.read_bytes() for p in sorted(Path(out).rglob("*")) if p.is_file()}


def exports(month: str, basis: str, idle: str) -> dict[str, bytes]:
    """The month's export files (name -> bytes), written by `slicemeter export` (slicemeter.chargeback.exports)
    in a child process, so the dashboard shows exactly what the CLI writes (with --tenant
    when this request is scoped to one)."""
    _import("slicemeter.chargeback.exports")
    try:
        return _exports(*store_key(), scope(), month, basis, idle)
    except RuntimeError as exc:
        raise unavailable("The month's export", exc) from None


def price_catalog():
    """The default price catalog (slicemeter.chargeback.prices), or None where there is none or it is
    broken: a page then shows its figures without their cost."""
    from slicemeter.chargeback.prices import load_prices_or_default
    from slicemeter.common import ConfigError

    try:
        return load_prices_or_default(None)
    except ConfigError:  # a bad catalog costs the money column, not the page
        return None


def throttled_share() -> float:
    """The share of an hour a GPU may be throttled before the hour is degraded: the price
    catalog's `degraded: {throttled_share}` (docs/health.md), else its default."""
    from slicemeter.chargeback.prices import DEFAULT_THROTTLED_SHARE

    catalog = price_catalog()
    return float(catalog.throttled_share if catalog is not None else DEFAULT_THROTTLED_SHARE)


def carbon_intensity(default: float = 320.0) -> float:
    """gCO2e per kWh from the price catalog's electricity section, else `default`."""
    catalog = price_catalog()
    return float(catalog.carbon_g_per_kwh) if catalog is not None and catalog.carbon_g_per_kwh else default
