"""`slicemeter dashboard --db FILE [--port 8501] [--tenant T] [--access FILE]`: serve the
Streamlit app on a database.

Replaces this process with `streamlit run dashboard/app.py` (headless), so signals sent to
it (Ctrl-C, the demo's SIGTERM) reach Streamlit directly. The database path, the tenant and
the access file go through as script arguments (`--db`, `--tenant`, `--access`).

`--access` trusts identity headers, which only the authenticating proxy may set: the
dashboard then listens on loopback only, where nothing but a proxy on the same host (the
pod's sidecar) reaches it (docs/dashboard.md, "Access").
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

from slicemeter.dashboard.access import check_tenant, load_access
from slicemeter.common import ConfigError, existing_db, named
from slicemeter.store import schema

APP = Path(__file__).resolve().parent / "app.py"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="DuckDB file to read (opened read-only; an ingest snapshot), "
                        "or a lake: ducklake:postgres:CONNINFO")
    parser.add_argument("--port", type=int, default=8501, help="HTTP port (default 8501)")
    parser.add_argument("--address", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--tenant", help="serve this tenant only: every page, total and download shows its rows alone")
    parser.add_argument("--access", metavar="FILE",
                        help="sign-in through an authenticating proxy: YAML mapping the proxy's groups to "
                             "tenants (docs/dashboard.md, Access); needs a loopback --address")


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def streamlit_argv(db: Path | str, port: int, address: str, tenant: str | None = None,
                   access: Path | None = None) -> list[str]:
    """The streamlit command line (pure: tested without starting anything)."""
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.headless", "true",
        "--server.port", str(port),
        "--server.address", address,
        "--server.fileWatcherType", "none",   # a served database, not a dev loop
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "viewer",
        "--theme.base", "light",
        "--", "--db", str(db),
        *(["--tenant", tenant] if tenant else []),
        *(["--access", str(access)] if access else []),
    ]


def run(args: argparse.Namespace) -> int:
    db = existing_db(args.db)
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port: {args.port} is not a TCP port")
    with named("--tenant"):
        check_tenant(args.tenant)
    access = None
    if args.access:
        access = Path(args.access).resolve()
        load_access(access)   # a broken file stops here, not at the first request
        if not is_loopback(args.address):
            raise ConfigError(f"--access trusts identity headers, so the dashboard must be reachable only "
                              f"through the proxy: --address must be loopback, not {args.address}")
    if not isinstance(db, str) and schema.check_file(db):
        print(f"dashboard: {db} is a readers' file of an older schema: its pages say it is being upgraded "
              "until this release's ingest rebuilds it", file=sys.stderr, flush=True)
    if not isinstance(db, str):   # a file; a lake is named as given
        # absolute, but not resolved: the readers' PATH is a link that ingest switches
        # between two data files, and the dashboard must follow it, not stay on one of them
        db = Path(os.path.abspath(db))
    argv = streamlit_argv(db, args.port, args.address, args.tenant, access)
    env = dict(os.environ, SLICEMETER_DB=str(db))
    scope = f" for tenant {args.tenant}" if args.tenant else ""
    where = "a DuckLake" if isinstance(db, str) else db   # a lake's name may hold a password
    print(f"dashboard: http://{args.address}:{args.port}/ on {where}{scope}", flush=True)
    os.execve(argv[0], argv, env)
    return 0  # not reached
