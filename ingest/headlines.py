"""`slicemeter ingest --recommend-interval S`: the right-sizing plan's and the sharing
dividend's headline figures as ingest metrics (docs/metrics.md, "Ingest"); with
`--bill-interval S`, the live bill's (docs/live-bill.md) the same way.

A background thread rebuilds the plan and the dividend for the current UTC month every S
seconds, and as soon as the snapshot holds a new refresh, and hands their samples
(slicemeter.rightsizing.plan.headline_metrics, slicemeter.chargeback.dividend.dividend_metrics)
to the metrics collector. The plan is also kept beside the snapshot for the Right-sizing page
(slicemeter.rightsizing.kept). It reads the snapshot, as every other reader does, never the
live file: the writer's transactions are not disturbed and the plan sees one consistent
copy. A failed plan keeps the previous figures and is logged; the thread never stops ingest.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

from slicemeter.ingest.metrics import Headline, RecommendHeadline
from slicemeter import clock
from slicemeter.common import SchemaMismatch, file_version

log = logging.getLogger("slicemeter.ingest.recommend")

RETRY_S = 5.0  # how soon to look again while the snapshot is absent or has no rollups yet
POLL_S = 1.0   # how often the thread looks for a new refresh of the snapshot
# the least time between two plans that follow refreshes: a snapshot refreshed every few
# seconds (the demo's) is not replanned as often
REPLAN_GAP_S = 30.0


def utc_now() -> datetime:
    return clock.now()


@contextlib.contextmanager
def open_snapshot(path: Path) -> Iterator:
    """A read-only connection to the reader file, opened through reading(): the reader file's
    refreshes run in this process, where DuckDB's file lock does not keep them off the data
    file this connection reads (store/reader_file.py)."""
    from slicemeter.store import connect
    from slicemeter.store.reader_file import reading

    with reading(path) as target:
        con = connect(target, read_only=True)
        try:
            yield con
        finally:
            con.close()


class HeadlineRefresher:
    def __init__(self, snapshot: Path, interval_s: float, headline: RecommendHeadline, prices=None,
                 headroom: float = 0.2, now: Callable[[], datetime] = utc_now, dividend: Headline | None = None,
                 replan_gap_s: float = REPLAN_GAP_S):
        self.snapshot = Path(snapshot)
        self.interval_s = interval_s
        self.headline = headline
        self.prices = prices
        self.headroom = headroom
        self.now = now
        self.dividend = dividend
        self.replan_gap_s = replan_gap_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="recommend-metrics", daemon=True)

    def refresh(self) -> bool:
        """Plan the current month from the snapshot; False if there is no snapshot yet."""
        from slicemeter.rightsizing.kept import Stamp, data_stamp, keep_plan, kept_path
        from slicemeter.rightsizing.plan import build_plan, headline_metrics, price_key

        if not self.snapshot.is_file():
            return False
        month = self.now().strftime("%Y-%m")
        with open_snapshot(self.snapshot) as con:
            plan = build_plan(con, month, self.headroom, self.prices)
            self.headline.update(headline_metrics(plan))
            data = data_stamp(con)
            if data is not None:
                keep_plan(plan, kept_path(self.snapshot),
                          Stamp(*data, month, self.headroom, price_key(self.prices)))
            if self.dividend is not None:
                from slicemeter.chargeback.dividend import dividend, dividend_metrics, previous_month

                # the month to date is young on the 1st: the last complete month beside it
                reports = [dividend(con, m, self.prices) for m in (previous_month(month), month)]
                self.dividend.update(dividend_metrics(reports))
                if not any(r.fleet.hours for r in reports):
                    return False   # a snapshot from before the first rollups: look again soon
        return True

    follows_refreshes = True   # plan again as soon as the snapshot holds a new refresh

    def _snapshot_version(self):
        """Changes with every refresh: the link is switched to the other data file, rewritten."""
        try:
            return file_version(self.snapshot)
        except OSError:
            return None

    def _wait(self, seconds: float, seen, started: float) -> None:
        """Until `seconds` have passed, the thread is stopped, or (follows_refreshes) the
        snapshot differs from the version `seen` and replan_gap_s have passed since `started`."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._stop.wait(min(left, POLL_S) if self.follows_refreshes else left)
            if (self.follows_refreshes and time.monotonic() - started >= self.replan_gap_s
                    and self._snapshot_version() != seen):
                return

    def _loop(self) -> None:
        while not self._stop.is_set():
            seen = self._snapshot_version()   # before reading it: a refresh meanwhile is planned next
            started = time.monotonic()
            try:
                planned = self.refresh()
            except SchemaMismatch as exc:   # an older release's readers' file, until the first refresh
                log.warning("%s: %s", self._thread.name, exc)
                planned = False
            except Exception:  # a bad snapshot costs this round's figures, not ingest
                log.exception("%s: computing from %s failed", self._thread.name, self.snapshot)
                planned = True
            self._wait(self.interval_s if planned else min(self.interval_s, RETRY_S), seen, started)

    def start(self) -> "HeadlineRefresher":
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)


class LiveBillRefresher(HeadlineRefresher):
    """Every tenant's month-to-date money, forecast and budget for the current UTC month
    (slicemeter.chargeback.live_bill), from the snapshot every S seconds, as HeadlineRefresher
    does for the plan: a failed round keeps the previous figures."""

    def __init__(self, snapshot: Path, interval_s: float, served: Headline, prices, bases: tuple[str, ...],
                 idle: str, now: Callable[[], datetime] = utc_now):
        super().__init__(snapshot, interval_s, None, prices, now=now)
        self.served, self.bases, self.idle = served, bases, idle
        self._thread.name = "live-bill"

    follows_refreshes = False

    def refresh(self) -> bool:
        from slicemeter.chargeback.live_bill import budgets, live_bill, live_bill_metrics

        if not self.snapshot.is_file():
            return False
        with open_snapshot(self.snapshot) as con:
            budget = budgets(con)
            rows = live_bill(con, self.now(), self.bases, self.idle, self.prices, tuple(budget))
        self.served.update(live_bill_metrics(rows, budget, self.prices.currency))
        return True
