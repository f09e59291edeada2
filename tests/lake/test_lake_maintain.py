"""`slicemeter lake-maintain` (store/lake_maintain.py): a pass folds the deltas, compacts
kept money and the bookkeeping, merges files and expires old snapshots, and changes no
byte of a month's invoice or FOCUS files while the lake's file count drops."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import date
from pathlib import Path

from slicemeter import store
from slicemeter.chargeback.bill import parse_month
from slicemeter.chargeback.kept import keep_hours, kept_current
from slicemeter.store.lake_maintain import data_files
from slicemeter.testkit.cb_rows import add_tenants
from slicemeter.testkit.ingest_helpers import StoreWriter
from slicemeter.testkit.kept_case import PRICES_FILE_TEXT, write_arrivals

CLI = [sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())"]
CASE = {"seed": 5, "nvml_down": {3, 20}, "move_at": 6, "late_before_close": 0.3, "late_after_close": 0.2}
NOVEMBER = parse_month("2026-11")


def _exports(target: str, out: Path, prices: Path) -> dict[str, str]:
    digests = {}
    for month in ("2026-10", "2026-11"):
        done = subprocess.run([*CLI, "export", "--db", target, "--month", month, "--out", str(out / month),
                               "--prices", str(prices)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        digests |= {f"{month}/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in sorted((out / month).iterdir())}
    return digests


def _state(con) -> dict:
    return {"gpu_hour": con.execute("SELECT * FROM gpu_hour ORDER BY hour, gpu_uuid").fetchall(),
            "slice_hour": con.execute("SELECT * FROM slice_hour ORDER BY ALL").fetchall(),
            "kept": con.execute("SELECT * FROM kept_slice_hour ORDER BY ALL").fetchall(),
            "offsets": con.execute("SELECT * FROM ingest_offsets ORDER BY ALL").fetchall(),
            "inventory": con.execute("SELECT * FROM gpu_inventory ORDER BY ALL").fetchall()}


def test_a_pass_changes_no_bill_and_cuts_the_file_count(lake_db, tmp_path):
    target, data = lake_db
    con = store.connect(target)
    writer = StoreWriter(con)
    try:
        add_tenants(con)
        write_arrivals(con, writer.write, CASE, 1)   # a batch per chunk: many deltas, kept rows and files
        keep_hours(con, date(2026, 10, 31), date(2026, 11, 2))    # kept money once more, whole
        before = _state(con)
        deltas = con.execute("SELECT count(*) FROM lake.main.slice_hour_pending").fetchone()[0]
        files = data_files(con)
    finally:
        con.close()
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES_FILE_TEXT)
    exports = _exports(target, tmp_path / "before", prices)
    on_disk = len(list(data.rglob("*.parquet")))

    done = subprocess.run([*CLI, "lake-maintain", "--db", target, "--keep-snapshots-s", "0"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{files} data files before" in done.stderr

    con = store.connect(target, read_only=True)
    try:
        assert _state(con) == before
        assert kept_current(con, *NOVEMBER)
        assert con.execute("SELECT count(*) FROM lake.main.slice_hour_pending").fetchone()[0] < deltas / 2
        assert data_files(con) < files / 2
    finally:
        con.close()
    assert len(list(data.rglob("*.parquet"))) < on_disk / 2
    assert _exports(target, tmp_path / "after", prices) == exports


def test_lake_maintain_refuses_a_file(tmp_path):
    done = subprocess.run([*CLI, "lake-maintain", "--db", str(tmp_path / "x.duckdb")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "works on a DuckLake" in done.stderr and "Traceback" not in done.stderr
