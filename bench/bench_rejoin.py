"""How soon a SIGKILLed ingest worker, started again, holds its partitions: with a stable
member identity (`--instance-id`, static membership) beside without one (the reference),
same broker, same run.

    .venv/bin/python bench/bench_rejoin.py                       # 3 rounds each, session 10 s
    .venv/bin/python bench/bench_rejoin.py --session-timeout-ms 30000 --rounds 2

The broker is Tansu (Apache Kafka does not run on the test machines: docs/ingest.md). One
worker of a group holds every partition of a 4-partition topic; it is SIGKILLed and the
same command started at once; the figure is the time from the kill until the new process
logs every partition as its own (its start-up, about a second, included in both).
"""
from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from slicemeter.broker import TansuBroker
from slicemeter.testkit.ingest_helpers import SLICEMETER, create_topic, wait_for_line

REPO = Path(__file__).resolve().parent.parent
ALL = "slicemeter.ingest: assigned partitions [0, 1, 2, 3]"


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "w"))


def rejoin_seconds(bootstrap: str, tmp: Path, name: str, session_ms: int, extra: list[str]) -> float:
    """Seconds from SIGKILLing the group's only worker to its restart holding every partition."""
    cmd = [*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", str(tmp / f"{name}.duckdb"), "--group", name,
           "--session-timeout-ms", str(session_ms), *extra]
    first = start(cmd, tmp / f"{name}-1.log")
    wait_for_line(first, tmp / f"{name}-1.log", ALL, 1, deadline_s=session_ms / 1000 * 3 + 60)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed = time.monotonic()
    second = start(cmd, tmp / f"{name}-2.log")
    try:
        if not wait_for_line(second, tmp / f"{name}-2.log", ALL, 1, deadline_s=session_ms / 1000 * 3 + 60):
            raise SystemExit(f"the restarted worker exited:\n{(tmp / f'{name}-2.log').read_text()[-3000:]}")
        return time.monotonic() - killed
    finally:
        second.terminate()
        second.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--session-timeout-ms", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, TansuBroker(log_path=Path(d) / "tansu.log") as broker:
        tmp = Path(d)
        create_topic(broker.bootstrap, partitions=4)
        dynamic, static = [], []
        for r in range(args.rounds):   # alternating, so the machine's load weighs on both alike
            dynamic.append(rejoin_seconds(broker.bootstrap, tmp, f"dynamic{r}", args.session_timeout_ms, []))
            static.append(rejoin_seconds(broker.bootstrap, tmp, f"static{r}", args.session_timeout_ms,
                                         ["--instance-id", "ingest-0"]))
    print(f"session timeout {args.session_timeout_ms / 1000:.0f} s, {args.rounds} round(s), Tansu")
    print(f"without --instance-id (reference): {', '.join(f'{s:.1f}' for s in dynamic)} s "
          f"(median {statistics.median(dynamic):.1f})")
    print(f"with --instance-id:                {', '.join(f'{s:.1f}' for s in static)} s "
          f"(median {statistics.median(static):.1f})")
    print(f"ratio with / without: {statistics.median(static) / statistics.median(dynamic):.2f}")


if __name__ == "__main__":
    main()
