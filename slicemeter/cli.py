"""The `slicemeter` command: one entry point, one module per subcommand.

Each subcommand module exposes `configure(parser)` and `run(args) -> int`; modules are
imported only when their command runs, so `slicemeter exporter` on a node never imports
DuckDB or Streamlit.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from slicemeter import __version__
from slicemeter.common import ConfigError, SchemaMismatch

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("slicemeter.simulator.cli", "write simulated HAMi regions and kubelet pod JSON for a scenario"),
    "exporter": ("slicemeter.exporter.cli", "run the node exporter (/metrics and Kafka)"),
    "hami-dump": ("slicemeter.exporter.hami_dump", "print one HAMi shared region as JSON"),
    "ingest": ("slicemeter.ingest.cli", "consume Ticks from Kafka into DuckDB"),
    "backfill": ("slicemeter.simulator.backfill", "publish simulated history for a scenario to Kafka"),
    "export": ("slicemeter.chargeback.export_cli", "write a month's invoice CSV, Parquet detail and FOCUS 1.2 files"),
    "close": ("slicemeter.chargeback.close_cli", "close a month: later data becomes correction rows"),
    "keep": ("slicemeter.chargeback.keep_cli", "keep a month's money again from its rollups (ingest keeps what it folds)"),
    "bindings": ("slicemeter.ingest.bindings_cli", "list or move the cluster a GPU UUID or node is bound to"),
    "lake-maintain": ("slicemeter.store.lake_maintain", "fold a DuckLake's deltas, compact it and expire its old snapshots"),
    "recommend": ("slicemeter.rightsizing.cli", "right-sizing and consolidation plan for a month"),
    "report": ("slicemeter.chargeback.report_cli", "a month's sharing dividend: GPUs, money, energy and carbon slicing saved"),
    "migrate": ("slicemeter.store.migrate_cli", "bring a store to this release's schema, or show it (--status)"),
    "backup": ("slicemeter.store.backup_cli", "copy ingest's store consistently, while ingest writes to it"),
    "dashboard": ("slicemeter.dashboard.cli", "serve the Streamlit dashboard on an existing database"),
    "demo": ("slicemeter.demo", "the local demo: broker, backfill, exporter, ingest, dashboard, exports"),
}


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = argparse.ArgumentParser(prog="slicemeter", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"slicemeter {__version__}")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules: dict[str, object] = {}
    wanted = next((a for a in argv if a in COMMANDS), None)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == wanted:
            module = importlib.import_module(module_name)
            module.configure(p)
            modules[name] = module
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    # the arguments are passed down, never written into sys.argv: a command called in-process
    # (tests, the demo) must leave the process's own arguments as they were
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, modules = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    module = modules.get(args.command) or importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except SchemaMismatch as exc:
        print(f"slicemeter {args.command}: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"slicemeter {args.command}: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
