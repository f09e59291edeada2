"""`slicemeter hami-dump PATH`: print one HAMi shared region as JSON (a debugging tool).

Reads the file exactly as the exporter does (read-only, no links, header and live slots
only) and prints the header, each device with its limits and the live slots with their
per-device memory by kind and SM utilization. Exit 1 with the reason when it is rejected;
a skipped device or slot (`device_errors`, `stuck_slots` in the JSON) is also named on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from slicemeter.exporter.sources.hami import Region, read_region_file


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a region file: <hook>/containers/<podUID>_<container>/<name>.cache")
    parser.add_argument("--device-memory", action="append", default=[], metavar="UUID=BYTES",
                        help="bound values by this GPU's memory (repeatable); default: 1 TiB")


def run(args: argparse.Namespace) -> int:
    bounds: dict[str, int] = {}
    for item in args.device_memory:
        uuid, _, value = item.partition("=")
        if not value.isdigit():
            from slicemeter.common import ConfigError

            raise ConfigError(f"--device-memory {item!r}: expected UUID=BYTES")
        bounds[uuid] = int(value)
    path = os.path.abspath(args.path)
    result = read_region_file(path, os.path.dirname(path), bounds)
    if not isinstance(result, Region):
        print(f"hami-dump: {path}: rejected: {result}", file=sys.stderr)
        return 1
    for index, err in result.device_errors:
        print(f"hami-dump: {path}: device {index} skipped: {err}", file=sys.stderr)
    for slot in result.stuck_slots:
        print(f"hami-dump: {path}: slot {slot} skipped: its seqlock stayed odd (writer killed mid-update)", file=sys.stderr)
    json.dump({"path": path} | result.to_json_dict(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
