"""A generated month of hourly rollups for tests and benchmarks (sql/testkit/synth_month.sql).

Writes gpu_hour, slice_hour and tenants rows directly, as ingest would have, so chargeback
and exports can be exercised at any fleet size without the simulator or Kafka.
"""
from __future__ import annotations

from slicemeter.chargeback.bill import parse_month
from slicemeter.store.script import execute_script


def synthesize_month(con, month: str, gpus: int, tenants: int = 4, seed: int = 0) -> None:
    m_start, m_end = parse_month(month)
    execute_script(con, "testkit/synth_month.sql",
                   {"m_start": m_start, "m_end": m_end, "gpus": int(gpus), "tenants": int(tenants), "seed": int(seed)})


def mark_synth_health(con, month: str, seed: int = 0) -> None:
    """A few GPUs of a generated month with a critical Xid, or throttled (sql/testkit/synth_health.sql):
    applied to a copy of the cached month, so a cache generated before it still serves."""
    m_start, _ = parse_month(month)
    execute_script(con, "testkit/synth_health.sql", {"m_start": m_start, "seed": int(seed)})


def synth_month_db(path, month: str, gpus: int, fresh: bool = False):
    """A store file holding a generated month of `gpus` GPUs, kept for reuse (benchmarks
    cache it under var/bench/: generating 8,000 GPUs takes minutes)."""
    from pathlib import Path

    from slicemeter.store import connect

    path = Path(path)
    if path.exists() and not fresh:
        return path
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)
    con = connect(path)
    try:
        synthesize_month(con, month, gpus=gpus)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return path
