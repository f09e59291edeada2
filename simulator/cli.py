"""`slicemeter simulate`: write a scenario's HAMi region files and kubelet pod JSON.

With one node (a one-node scenario, or `--node NAME`) the regions go exactly where HAMi
puts them under its hook path: `HAMI_DIR/containers/<podUID>_<container>/<name>.cache`.
With several nodes each node gets its own hook path: `HAMI_DIR/<node>/containers/...`.
Pod lists go to `PODS_DIR/<node>.json` (the kubelet's /pods PodList), replaced atomically;
beside them `resourceclaims.json` and `resourceslices.json`, the ResourceClaimList and
ResourceSliceList of every simulated node, as the API server lists them.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

from slicemeter.simulator.node import SimulatedNode
from slicemeter.simulator.scenario import ScenarioError, load_scenario
from slicemeter import clock
from slicemeter.common import ConfigError

log = logging.getLogger("slicemeter.simulate")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", required=True, help="scenario YAML (see docs/simulator.md)")
    parser.add_argument("--hami-dir", required=True, help="HAMi hook path to write region files under")
    parser.add_argument("--ticks", type=int, default=1, help="number of ticks to write (0 = until interrupted)")
    parser.add_argument("--pods-dir", help="write each node's kubelet /pods JSON here as <node>.json, and the nodes' "
                        "ResourceClaimList and ResourceSliceList as resourceclaims.json and resourceslices.json")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between ticks (simulated time)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (same seed, same fleet)")
    parser.add_argument("--node", action="append", help="simulate only this node (repeatable)")
    parser.add_argument("--start", help="simulated time of the first tick: ISO 8601 UTC or epoch ms (default: now)")
    parser.add_argument("--realtime", action="store_true", help="pace ticks on the wall clock, one per interval")


def _start_ms(value: str | None, interval_ms: int) -> int:
    if value is None:
        now = clock.now_ms()
        return now - now % interval_ms
    if value.isdigit():
        return int(value)
    try:
        return int(clock.parse_instant(value, "--start").timestamp() * 1000)
    except ValueError:
        raise ConfigError(f"--start: {value!r} is neither ISO 8601 nor epoch milliseconds") from None


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def _merged(lists) -> dict:
    """One List of the items of several (the API server lists every node's objects)."""
    lists = list(lists)
    return {**lists[0], "items": [item for lst in lists for item in lst["items"]]}


def run(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        raise ConfigError(f"--scenario: {exc}") from None
    if args.interval <= 0:
        raise ConfigError("--interval must be positive")
    if args.ticks < 0:
        raise ConfigError("--ticks must be >= 0")
    names = args.node or [n.name for n in scenario.nodes]
    known = {n.name for n in scenario.nodes}
    for n in names:
        if n not in known:
            raise ConfigError(f"--node: no node {n!r} in {args.scenario}")
    hami_dir = Path(args.hami_dir)
    single = len(names) == 1
    nodes = [SimulatedNode(scenario, n, hami_dir if single else hami_dir / n, seed=args.seed) for n in names]
    pods_dir = Path(args.pods_dir) if args.pods_dir else None
    if pods_dir:
        pods_dir.mkdir(parents=True, exist_ok=True)
    interval_ms = int(args.interval * 1000)
    start = _start_ms(args.start, interval_ms)
    tick = 0
    while args.ticks == 0 or tick < args.ticks:
        ts = start + tick * interval_ms
        if args.realtime:
            wait = ts / 1000 - clock.time_s()
            if wait > 0:
                time.sleep(wait)   # pacing a live simulation, not synchronisation
        for node in nodes:
            node.advance(ts)
            if pods_dir:
                _write_json(pods_dir / f"{node.name}.json", node.pods())
        if pods_dir:
            _write_json(pods_dir / "resourceclaims.json", _merged(n.resource_claims_json() for n in nodes))
            _write_json(pods_dir / "resourceslices.json", _merged(n.resource_slices_json() for n in nodes))
        tick += 1
        log.debug("tick %d at %d", tick, ts)
    regions = sum(n.region_count for n in nodes)
    log.info("wrote %d tick(s) for %d node(s): %d live region file(s) under %s", tick, len(nodes), regions, hami_dir)
    return 0
