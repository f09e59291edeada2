"""`slicemeter bindings`: which tenant cluster each GPU UUID and node belongs to.

    slicemeter bindings list --db F [--cluster C]
    slicemeter bindings move --db F (--gpu UUID | --node NAME) --to CLUSTER

A GPU or node binds to the cluster that first reported it; Ticks from any other cluster
naming it are dead letters (ingest/trust.py). When hardware really moves (a node joins
another tenant), an operator moves the binding; like `close`, this writes the store, so
ingest is stopped meanwhile (DuckDB has one writer).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from slicemeter.store import connect, retry_conflicts, transaction
from slicemeter.store.script import execute_script
from slicemeter.common import ConfigError, existing_db


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("list", "move"))
    p.add_argument("--db", required=True, type=Path, help="the DuckDB file ingest writes (ingest stopped)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--gpu", metavar="UUID")
    what.add_argument("--node", metavar="NAME")
    p.add_argument("--to", metavar="CLUSTER", help="move: the cluster it belongs to from now on")
    p.add_argument("--cluster", help="list: only this cluster's")


def move_binding(con, kind: str, name: str, cluster: str) -> str | None:
    """Bind `name` to `cluster`; returns the cluster it was bound to (None: it was not).
    One transaction; on a lake, done again where a worker's batch stored bindings meanwhile."""
    def move() -> str | None:
        with transaction(con):
            before = con.execute("SELECT cluster FROM ingest_bindings WHERE kind = ? AND name = ?",
                                 [kind, name]).fetchall()
            execute_script(con, "ingest/move_binding.sql", {"kind": kind, "name": name, "cluster": cluster})
        return before[0][0] if before else None

    return retry_conflicts(move)


def run(args: argparse.Namespace) -> int:
    con = connect(existing_db(args.db))
    try:
        if args.action == "list":
            rows = con.execute("SELECT kind, name, cluster, bound_at, moved_from FROM ingest_bindings "
                               "WHERE ? IS NULL OR cluster = ? ORDER BY kind, name", [args.cluster, args.cluster]).fetchall()
            for kind, name, cluster, at, moved_from in rows:
                print(f"{kind}\t{name}\t{cluster}\t{at:%Y-%m-%dT%H:%M:%S}" + (f"\t(moved from {moved_from})" if moved_from else ""))
            return 0
        if not (args.gpu or args.node) or not args.to:
            raise ConfigError("move needs --gpu UUID or --node NAME, and --to CLUSTER")
        kind, name = ("gpu", args.gpu) if args.gpu else ("node", args.node)
        before = move_binding(con, kind, name, args.to)
        print(f"{kind} {name}: {before or 'unbound'} -> {args.to}")
    finally:
        con.close()
    return 0
