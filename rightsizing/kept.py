"""The month's plan kept beside a readers' file.

A plan reads every slice-hour of the month and packs every slice (seconds on a large fleet),
and it changes only when the data does. So ingest plans the current month after each refresh
of the readers' file (ingest/headlines.py) and keeps the plan in `PATH.plan` beside the
readers' PATH, stamped with the data it was made from: the store, the refresh, the month,
the headroom and the prices. The Right-sizing page shows a kept plan whose stamp matches
what it would plan itself, made from the refresh it reads or the one before (ingest plans
a few seconds after each refresh), and plans by itself otherwise.

The file is a zip of the plan's three tables as Parquet and its summary as JSON, written
to a temporary name and renamed over the previous one, so a reader opens either whole.
"""
from __future__ import annotations

import io
import json
import logging
import os
import zipfile
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pandas as pd

from slicemeter.common import fsync_path
from slicemeter.rightsizing.plan import Plan

log = logging.getLogger("slicemeter.rightsizing")

FRAMES = ("slices", "placement", "groups")
REFRESHES_BEHIND = 1   # a kept plan of the refresh before the one read is still shown


@dataclass(frozen=True)
class Stamp:
    """What a plan was made from."""
    store_id: str
    refresh: int
    month: str
    headroom: float
    prices: str   # plan.price_key of the prices and currency

    def serves(self, wanted: "Stamp") -> bool:
        """Whether a plan made from this serves a reader that wants `wanted`."""
        return ((self.store_id, self.month, self.headroom, self.prices)
                == (wanted.store_id, wanted.month, wanted.headroom, wanted.prices)
                and self.refresh >= wanted.refresh - REFRESHES_BEHIND)


def kept_path(reader_path: str | Path) -> Path:
    """Where the plan of the readers' file at `reader_path` is kept."""
    p = Path(reader_path)
    return p.with_name(p.name + ".plan")


def data_stamp(con) -> tuple[str, int] | None:
    """(store, refresh) of the readers' file `con` reads; None for any other database."""
    from slicemeter.store import is_reader_file

    if not is_reader_file(con):
        return None
    row = con.execute("SELECT store_id, refresh FROM reader_file_state").fetchone()
    return (str(row[0]), int(row[1])) if row and row[0] is not None and row[1] is not None else None


def _summary_json(summary: dict) -> str:
    decimals = sorted(k for k, v in summary.items() if isinstance(v, Decimal))
    return json.dumps({"values": {k: (str(v) if k in decimals else v) for k, v in summary.items()},
                       "decimals": decimals})


def _summary_of(text: str) -> dict:
    doc = json.loads(text)
    return {k: (Decimal(v) if k in doc["decimals"] else v) for k, v in doc["values"].items()}


def keep_plan(plan: Plan, path: str | Path, stamp: Stamp) -> Path:
    """Write `plan` to `path` (kept_path of a readers' file), replacing the previous one whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr("stamp.json", json.dumps(stamp.__dict__))
            z.writestr("summary.json", _summary_json(plan.summary))
            for name in FRAMES:
                buf = io.BytesIO()
                getattr(plan, name).to_parquet(buf, index=False)
                z.writestr(f"{name}.parquet", buf.getvalue())
        fsync_path(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_path(path.parent)
    return path


def read_kept(path: str | Path) -> tuple[Stamp, Plan] | None:
    """The plan kept at `path` with its stamp; None when there is none, or none that reads
    whole (logged: the reader plans by itself)."""
    try:
        with zipfile.ZipFile(path) as z:
            stamp = Stamp(**json.loads(z.read("stamp.json")))
            summary = _summary_of(z.read("summary.json").decode())
            frames = {name: pd.read_parquet(io.BytesIO(z.read(f"{name}.parquet"))) for name in FRAMES}
    except FileNotFoundError:
        return None
    except Exception as exc:   # any damage to a file that only saves time: it is not used
        log.warning("kept plan %s not used: %r", path, exc)
        return None
    return stamp, Plan(stamp.month, stamp.headroom, frames["slices"], frames["placement"], frames["groups"], summary)


def kept_plan_for(path: str | Path, wanted: Stamp) -> tuple[Stamp, Plan] | None:
    """The plan kept at `path` if it serves `wanted` (Stamp.serves)."""
    kept = read_kept(path)
    return kept if kept is not None and kept[0].serves(wanted) else None
