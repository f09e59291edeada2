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
from pathlib import Path

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("simulator.cli", "write simulated HAMi regions and kubelet pod JSON for a scenario"),
    "exporter": ("exporter.cli", "run the node exporter (/metrics and Kafka)"),
    "hami-dump": ("exporter.hami_dump", "print one HAMi shared region as JSON"),
    "ingest": ("ingest.cli", "consume Ticks from Kafka into DuckDB"),
    "backfill": ("ingest.backfill", "publish simulated history for a scenario to Kafka"),
    "export": ("ingest.export_cli", "write a month's invoice CSV, Parquet detail and FOCUS 1.2 files"),
    "close": ("ingest.close_cli", "close a month: later data becomes correction rows"),
    "bindings": ("ingest.bindings_cli", "list or move the cluster a GPU UUID or node is bound to"),
    "recommend": ("ingest.recommend_cli", "right-sizing and consolidation plan for a month"),
    "report": ("ingest.report_cli", "a month's sharing dividend: GPUs, money, energy and carbon slicing saved"),
    "dashboard": ("dashboard.cli", "serve the Streamlit dashboard on an existing database"),
    "demo": ("slicemeter.demo", "the local demo: broker, backfill, exporter, ingest, dashboard, exports"),
}


class ConfigError(Exception):
    """A bad option or config value; the message names the offending key."""


def read_yaml_file(path, option: str):
    """The parsed YAML file that `option` names; ConfigError saying which and why otherwise."""
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{option}: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{option}: {path} is not valid YAML: {exc}") from None


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = argparse.ArgumentParser(prog="slicemeter", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules: dict[str, object] = {}
    wanted = next((a for a in sys.argv[1:] if a in COMMANDS), None)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == wanted:
            module = importlib.import_module(module_name)
            module.configure(p)
            modules[name] = module
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        sys.argv = ["slicemeter", *argv]
    parser, modules = build_parser()
    args = parser.parse_args()
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    module = modules.get(args.command) or importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except ConfigError as exc:
        print(f"slicemeter {args.command}: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
