"""`slicemeter migrate`: bring a store (a DuckDB file or a lake) to this release's schema,
or show what it holds (--status). Ingest migrates at start too; every other command refuses
a store whose schema is not the release's (store/schema.py)."""
from __future__ import annotations

import argparse
import sys

from slicemeter.common import existing_db, is_lake


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="the store: ingest's DuckDB file (not the readers' file, which "
                                               "ingest rebuilds), or a DuckLake ducklake:postgres:CONNINFO")
    p.add_argument("--status", action="store_true",
                   help="show the migrations held, the releases that applied them and what is pending; change nothing")
    p.add_argument("--memory", default="256MB", metavar="SIZE", help="DuckDB's memory limit (default %(default)s)")


def _progress(done: int, total: int, name: str, seconds: float) -> None:
    print(f"migrate: {done}/{total} {name} ({seconds:.1f} s)", flush=True)


def run(args: argparse.Namespace) -> int:
    from slicemeter.store import schema

    db = existing_db(args.db)
    if is_lake(db):
        from slicemeter.store import lake

        return lake.migrate_command(db, args.status)
    import duckdb

    con = duckdb.connect(str(db), read_only=args.status, config={"memory_limit": args.memory})
    con.execute("SET enable_progress_bar = false")   # the log lines say what runs
    try:
        found = schema.state(con)
        if args.status:
            print("\n".join(schema.describe(db, found)))
            return 0 if found is not None and found.current else 1
        if found is not None and not found.current and (found.unknown or schema.is_readers_copy(con)):
            # a newer release's store, or a readers' file (its ingest rebuilds it, migrated or not)
            copy = not found.unknown
            print(f"slicemeter migrate: {schema.mismatch_sentence(db, found, copy)}", file=sys.stderr)
            return 2
        if found is not None and found.current:
            print(f"{db}: already at slicemeter's schema ({len(found.applied)} migrations); nothing to do")
            return 0
        print(f"migrate: {db}: {len(found.pending) if found else len(schema.shipped())} migration(s) "
              "in one transaction", flush=True)
        applied = schema.migrate(con, _progress)
        print(f"migrated {db}: {len(applied)} migration(s) applied and committed")
    finally:
        con.close()
    return 0
