"""Consistent read-only copies of the store for readers (dashboard, exports).

DuckDB allows one writing process per file, so readers never open the live file: the
ingest process checkpoints (all committed data moves from the WAL into the main file)
and, between two of its own transactions, copies the file next to PATH and renames it
over PATH. rename(2) is atomic, so a reader opens either the old or the new snapshot.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb


def write_snapshot(con: duckdb.DuckDBPyConnection, db_path: str | Path, dest: str | Path) -> Path:
    """Call only between transactions of `con` (it is the only writer)."""
    dest = Path(dest)
    con.execute("CHECKPOINT")
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(db_path, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dest)
    return dest
