"""`slicemeter backup --db STORE --out DIR`: a consistent copy of ingest's store file while
ingest writes to it (store/backup.py), as DIR/<the store's file name>. Restore: stop ingest,
put the copy in the store's place, start ingest: docs/operations.md, Backup and restore."""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from slicemeter.common import ConfigError, existing_db, is_lake


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="ingest's DuckDB store file (running or not)")
    p.add_argument("--out", required=True, type=Path, help="folder the copy is written to")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="how long to wait for a running ingest to write the copy (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    import duckdb

    from slicemeter.store import backup

    db = existing_db(args.db)
    if is_lake(db):
        raise ConfigError("--db: a lake is backed up by its catalog (pg_dump) and its data folder "
                          "(docs/operations.md, Backup and restore)")
    args.out.mkdir(parents=True, exist_ok=True)
    copy = (args.out / Path(db).name).resolve()
    if copy == Path(db).resolve():
        raise ConfigError("--out: the copy would replace the store itself")
    backup.result_path(copy).unlink(missing_ok=True)
    try:   # no ingest holds the file: copy it here
        offsets = backup.copy_file(Path(db), copy)
    except duckdb.IOException as exc:
        if "lock" not in str(exc).lower():
            raise ConfigError(f"--db: cannot open {db}: {exc}") from None
        offsets = None
    if offsets is None:   # ingest holds it: ask ingest for the copy
        request = backup.request_path(Path(db))
        tmp = request.with_name(f".{request.name}.tmp")
        tmp.write_text(str(copy))
        os.replace(tmp, request)
        print(f"backup: {db} is held by a running ingest; asked it for the copy", flush=True)
        deadline = time.monotonic() + args.timeout
        result = backup.result_path(copy)
        while not result.is_file():
            if time.monotonic() >= deadline:
                request.unlink(missing_ok=True)
                print(f"slicemeter backup: no copy of {db} within {args.timeout:.0f} s: is the ingest writing it "
                      "this release's (0.4.0 or later)?", flush=True)
                return 1
            time.sleep(0.2)
        answer = json.loads(result.read_text())
        result.unlink()
        if "error" in answer:
            print(f"slicemeter backup: ingest could not copy {db}: {answer['error']}", flush=True)
            return 1
        offsets = answer["offsets"]
    print(f"backup: {copy} (Kafka offsets " + ", ".join(f"{t}/{p}:{o}" for t, p, o in offsets) + ")")
    return 0
