"""What a group member frozen past its session (SIGSTOP: a stalled node, a paused
container) does to the group on the broker the tests use: how soon a second member holds
every partition, with and without a stable identity (`--instance-id`), same broker, same run.

    .venv/bin/python bench/bench_frozen_member.py                 # session 6 s, wait 90 s

Worker `a` of group `g` stores its first batch of a 4-partition topic and is SIGSTOPped;
worker `b` starts and more records arrive; the figure is the time from the stop until `b`
logs all 4 partitions as its own, or none within --wait-s. Then `a` is SIGCONTed (it finds
its session expired and rejoins) and both are stopped.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from slicemeter.broker import TansuBroker
from slicemeter.testkit.ingest_helpers import SLICEMETER, create_topic, produce_chunks, wait_for_line
from slicemeter.testkit.synth_ticks import fleet, messages, recent_midnight_ms

REPO = Path(__file__).resolve().parent.parent
ALL = "slicemeter.ingest: assigned partitions [0, 1, 2, 3]"


def worker(bootstrap: str, folder: Path, name: str, session_ms: int, static: bool) -> subprocess.Popen:
    args = [*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", str(folder / f"{name}.duckdb"), "--group", "g",
            "--session-timeout-ms", str(session_ms), "--batch-samples", "2000", "--batch-max-seconds", "0.3",
            *(["--instance-id", name] if static else [])]
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(folder / f"{name}.log", "w"))


def one_round(folder: Path, session_ms: int, static: bool, wait_s: float) -> tuple[float | None, int]:
    """(seconds from a's stop until b holds every partition or None, b's failed SyncGroups)."""
    with TansuBroker(log_path=folder / "tansu.log") as broker:
        create_topic(broker.bootstrap, partitions=4)
        chunks = list(messages(fleet(8, ["https://acme:6443"]), recent_midnight_ms(), 240, 30))
        produce_chunks(broker.bootstrap, chunks[: len(chunks) // 2])
        a = worker(broker.bootstrap, folder, "a", session_ms, static)
        b = None
        try:
            assert wait_for_line(a, folder / "a.log", "stored batch", 1, deadline_s=120)
            a.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            b = worker(broker.bootstrap, folder, "b", session_ms, static)
            produce_chunks(broker.bootstrap, chunks[len(chunks) // 2:])
            held = None
            while time.monotonic() - stopped < wait_s:
                if ALL in (folder / "b.log").read_text():
                    held = time.monotonic() - stopped
                    break
                try:
                    b.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    pass
        finally:
            a.send_signal(signal.SIGCONT)
            for proc in (a, b):
                if proc is not None:
                    proc.send_signal(signal.SIGTERM)
            for proc in (a, b):
                if proc is not None:
                    try:
                        proc.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
        return held, (folder / "b.log").read_text().count("SyncGroup for group g failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--wait-s", type=float, default=90.0)
    args = ap.parse_args()
    for static in (False, True):
        with tempfile.TemporaryDirectory(prefix="frozen-member-") as tmp:
            held, failed = one_round(Path(tmp), args.session_timeout_ms, static, args.wait_s)
        print(f"{'with' if static else 'without'} --instance-id: b holds all 4 partitions "
              f"{'after %.1f s' % held if held is not None else 'not within %.0f s' % args.wait_s}; "
              f"{failed} 'SyncGroup failed due to coordinator rebalance'", flush=True)


if __name__ == "__main__":
    main()
