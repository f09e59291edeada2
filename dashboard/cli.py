"""`slicemeter dashboard --db FILE [--port 8501]`: serve the Streamlit app on a database.

Replaces this process with `streamlit run dashboard/app.py` (headless), so signals sent to
it (Ctrl-C, the demo's SIGTERM) reach Streamlit directly. The database path goes through
as the script argument `--db` and $SLICEMETER_DB.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from slicemeter.cli import ConfigError

APP = Path(__file__).resolve().parent / "app.py"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="DuckDB file to read (opened read-only; an ingest snapshot)")
    parser.add_argument("--port", type=int, default=8501, help="HTTP port (default 8501)")
    parser.add_argument("--address", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")


def streamlit_argv(db: Path, port: int, address: str) -> list[str]:
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
    ]


def run(args: argparse.Namespace) -> int:
    db = Path(args.db)
    if not db.is_file():
        raise ConfigError(f"--db: no such database file: {db}")
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port: {args.port} is not a TCP port")
    argv = streamlit_argv(db.resolve(), args.port, args.address)
    env = dict(os.environ, SLICEMETER_DB=str(db.resolve()))
    print(f"dashboard: http://{args.address}:{args.port}/ on {db}", flush=True)
    os.execve(argv[0], argv, env)
    return 0  # not reached
