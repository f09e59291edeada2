"""What a dashboard user meets right after ingest refreshes the readers' file: every page's
first run (cold) and reruns (warm), on a generated month with its money kept, read through
the readers' file.

The dashboard's caches are keyed on the readers' file's stat (dashboard/data.py store_key),
and a refresh switches the link to the other data file, so the first visit to a page after
each refresh reads DuckDB again. Set up per fleet size:

- the generated month (testkit/synth_month.py, cached under var/bench/ with its money kept,
  as bench_kept_money.py keeps it) copied into a live store, with a few GPUs given a
  critical Xid or throttling (mark_synth_health); the readers' file made from it
  (store/reader_file.py) and the dashboard pointed at it (SLICEMETER_DB);
- before each page: one ingest interval's change to the last hour (bench_reader_changed_hours.py
  `one_interval`: the rollups grow, the hour's money is kept again) and a refresh, which
  copies the changed hour, and ingest's replan after it (ingest/headlines.py: the month's
  right-sizing plan kept beside the readers' file, the dividend's figures; timed apart);
  then the page's first run (cold: wall and this process's CPU seconds) and the median of
  --repeat reruns (warm);
- the Tenants page (the fleet's bill) again with the kept money forgotten (chargeback/kept.py
  `forget_kept`): the bill recomputed from the rollups, the path a store without kept money takes.

References, measured in the same run on the readers' file: one pass over the month's rows
the pages read (count and sum of metered_s over slice_hour and gpu_hour, a fresh read-only
connection each time), a store connection opened and closed (every cache miss opens one),
and an empty Streamlit page (the framework's own cost per run).

The named reads of each cold run (data.query by SQL file, the fleet's bill, the sharing
dividend, the right-sizing plan, the price catalog) are timed where the pages call them,
so the table says where a slow page's cold time goes.

Besides the pages as they open, the filtered runs a user makes from Fleet's links
(dashboard/filters.py, the choice in the URL): one tenant's GPUs ordered by money paid for
but unused (gpus-tenant-waste), every GPU with a critical Xid (gpus-xid), and the Problems page.

    python bench/bench_pages_after_refresh.py [--gpus 1000,8000] [--repeat 3] [--pages tenants,gpus,gpus-xid]

Needs about 3 x the month's file of free disk beside the cache (live store, two data files).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import duckdb  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from bench_dashboard import MONTH, PAGES, empty_page_s, timed, timed_cpu  # noqa: E402
from bench_kept_money import kept_db  # noqa: E402
from bench_reader_changed_hours import one_interval  # noqa: E402

from slicemeter import store  # noqa: E402
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices  # noqa: E402
from slicemeter.ingest.headlines import HeadlineRefresher  # noqa: E402
from slicemeter.ingest.metrics import IngestMetrics  # noqa: E402
from slicemeter.chargeback.bill import parse_month  # noqa: E402
from slicemeter.chargeback.kept import forget_kept, kept_current  # noqa: E402
from slicemeter.dashboard import data, filters, right_sizing  # noqa: E402
from slicemeter.store.reader_file import ReaderFile  # noqa: E402
from slicemeter.testkit.synth_month import mark_synth_health  # noqa: E402

# filtered runs: (page script, URL query parameters); a None tenant is the store's first
FILTERED = {"gpus-tenant-waste": ("gpus", {"tenant": None, "sort": "waste_cost"}),
            "gpus-xid": ("gpus", {"health": "xid"}),
            "problems": ("problems", {})}

# where the pages' reads go: module attributes the page scripts call through
TIMED = [(data, "query"), (data, "chargeback"), (data, "dividend"), (data, "exports"),
         (data, "price_catalog"), (right_sizing, "_plan"), (data, "connect")]
NESTED = "connect"   # a store connection, opened inside the reads above on each cache miss
SCAN = ("SELECT (SELECT count(*) FROM slice_hour WHERE hour >= $1 AND hour < $2), "
        "(SELECT sum(metered_s) FROM slice_hour WHERE hour >= $1 AND hour < $2), "
        "(SELECT count(*) FROM gpu_hour WHERE hour >= $1 AND hour < $2), "
        "(SELECT sum(metered_s) FROM gpu_hour WHERE hour >= $1 AND hour < $2)")


class Reads:
    """Seconds per named read of the pages, summed over the runs since the last reset."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        for module, attr in TIMED:
            setattr(module, attr, self._wrap(attr, getattr(module, attr)))

    def _wrap(self, attr: str, fn):
        def timed_read(*args, **kwargs):
            name = f"query {args[0]}" if attr == "query" else attr.lstrip("_")
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - t
                self.calls[name] += 1
        return timed_read

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        taken = dict(self.seconds), dict(self.calls)
        self.seconds, self.calls = defaultdict(float), defaultdict(int)
        return taken


def one_pass(path: Path, repeat: int) -> tuple[float, float, int, int]:
    """(median s of one pass over the month's rows, median s to open and close a store
    connection, slice-hours, GPU-hours), each on a fresh read-only connection to `path`."""
    m_start, m_end = parse_month(MONTH)
    scans, opens = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        con = duckdb.connect(str(path), read_only=True)
        sh, _, gh, _ = con.execute(SCAN, [m_start, m_end]).fetchone()
        con.close()
        scans.append(time.perf_counter() - t)
        t = time.perf_counter()
        store.connect(path, read_only=True).close()
        opens.append(time.perf_counter() - t)
    return statistics.median(scans), statistics.median(opens), sh, gh


def where(reads: tuple[dict[str, float], dict[str, int]], total: float, top: int = 3) -> str:
    """The slowest named reads of a run (each with the connections it opened), the
    connections opened in all, and the rest of the run (Streamlit, pandas, charts)."""
    seconds, calls = reads
    opened = seconds.pop(NESTED, 0.0)
    named = sorted(seconds.items(), key=lambda kv: -kv[1])
    parts = [f"{name} {s:.2f}" for name, s in named[:top] if s >= 0.01]
    return ", ".join(parts + [f"of all: {calls.get(NESTED, 0)} connections {opened:.2f}",
                              f"rest {max(0.0, total - sum(seconds.values())):.2f}"])


def run_page(at: AppTest, page: str, repeat: int, reads: Reads,
             params: dict | None = None) -> tuple[float, float, float, float, dict, int]:
    """(cold s, cold CPU s, warm s, warm CPU s, the cold run's named reads, the rows of the
    page's first table: the GPUs or problems a filtered run lists), with the GPU
    filters a link's URL query parameters `params` set (none: as the menu opens the page).
    The filters' widgets are set as the URL would set them (their state, once there, is
    what the page reads), so an earlier run's choice does not carry over."""
    params = params or {}
    for field in filters.FIELDS:
        at.session_state[filters.WIDGET_PREFIX + field] = params.get(field, {"q": "", "sort": filters.DEFAULT_SORT}.get(field))
    at.session_state[filters.SESSION_KEY] = {}
    at.switch_page(f"views/{page}.py")
    reads.take()
    cold, cold_cpu = timed_cpu(at)
    cold_reads = reads.take()
    runs = [timed_cpu(at) for _ in range(repeat)]
    return (cold, cold_cpu, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
            cold_reads, len(at.dataframe[0].value) if at.dataframe else 0)


def fleet(gpus: int, opts, ref_s: float, reads: Reads) -> None:
    t = time.perf_counter()
    cached, _, _ = kept_db(gpus, opts.fresh)
    prepared = time.perf_counter() - t
    m_start, m_end = parse_month(MONTH)
    with tempfile.TemporaryDirectory(dir=cached.parent, prefix="bench-pages-") as tmp:
        live = Path(tmp) / "live.duckdb"
        shutil.copyfile(cached, live)
        con = store.connect(live)
        try:
            mark_synth_health(con, MONTH)   # the health filters and Problems find some GPUs
            last = con.execute("SELECT max(hour) FROM gpu_hour").fetchone()[0]
            reader = ReaderFile(con, Path(tmp) / "reader.duckdb")
            reader.refresh()
            whole_s = reader.copy_s
            one_interval(con, last)
            reader.refresh()   # both data files exist: from here every refresh copies the changed hours
            ingest = HeadlineRefresher(reader.dest, 3600, IngestMetrics().recommend, load_prices(DEFAULT_PRICES),
                                       now=lambda: m_start.replace(day=15), dividend=IngestMetrics().dividend)

            def replan() -> float:
                t = time.perf_counter()
                ingest.refresh()
                return time.perf_counter() - t

            replan()
            os.environ["SLICEMETER_DB"] = str(reader.dest)
            at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=1800)
            timed(at)   # imports, first connection: not what a refresh costs a user
            scan_s, open_s, sh, gh = one_pass(reader.dest, opts.repeat)
            scan_load = os.getloadavg()[0]
            print(f"\ngenerated fleet: {gpus} GPUs on {gpus // 8} nodes, {MONTH} ({gh:,} GPU-hours, "
                  f"{sh:,} slice-hours; cache ready in {prepared:.0f} s, readers' file whole copy {whole_s:.1f} s)")
            print(f"reference: one pass over the month's rows {scan_s:.3f} s, a store connection opened "
                  f"{open_s * 1000:.1f} ms (load average {scan_load:.1f}); empty page {ref_s * 1000:.1f} ms")
            print(f"{'page':<18}{'bill':>8}{'refresh s':>10}{'replan s':>9}{'cold s':>8}{'cold cpu':>9}{'warm s':>8}"
                  f"{'warm cpu':>9}{'cold/pass':>10}{'warm/empty':>11}{'load':>6}   cold run's reads (s)")

            first_tenant = con.execute("SELECT min(tenant) FROM tenants").fetchone()[0]

            def row(label: str, bill: str, page: str, params: dict | None = None) -> None:
                refresh_s = reader.pin_s + reader.copy_s
                replan_s = replan()
                cold, cold_cpu, warm, warm_cpu, cold_reads, listed = run_page(at, page, opts.repeat, reads, params)
                print(f"{label:<18}{bill:>8}{refresh_s:>10.2f}{replan_s:>9.2f}{cold:>8.2f}{cold_cpu:>9.2f}"
                      f"{warm:>8.3f}{warm_cpu:>9.3f}{cold / scan_s:>10.0f}{warm / ref_s:>11.0f}{os.getloadavg()[0]:>6.1f}   "
                      f"{where(cold_reads, cold)}" + (f"; {listed:,} rows listed" if params is not None else ""),
                      flush=True)

            for page in opts.pages:
                one_interval(con, last)
                reader.refresh()
                assert reader.incremental
                if page in FILTERED:
                    script, params = FILTERED[page]
                    row(page, "", script, {k: v or first_tenant for k, v in params.items()})
                else:
                    row(page, "kept" if page in ("tenants", "waste") else "", page)
            if "tenants" in opts.pages:
                with store.connect(reader.dest, read_only=True) as rcon:
                    assert kept_current(rcon, m_start, m_end), "the kept rows above were not current"
                one_interval(con, last)
                forget_kept(con)
                reader.refresh()   # the log names every hour: a whole copy
                with store.connect(reader.dest, read_only=True) as rcon:
                    assert not kept_current(rcon, m_start, m_end)
                row("tenants", "scratch", "tenants")
        finally:
            con.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="1000", help="generated fleet sizes in GPUs, e.g. 1000,8000")
    ap.add_argument("--repeat", type=int, default=3, help="warm reruns and reference passes (median)")
    ap.add_argument("--fresh", action="store_true", help="regenerate the cached generated months")
    ap.add_argument("--pages", default=",".join([*PAGES, *FILTERED]),
                    help=f"pages to measure (default: all, and the filtered runs {', '.join(FILTERED)})")
    opts = ap.parse_args()
    opts.pages = opts.pages.split(",")
    reads = Reads()
    ref_s = empty_page_s(opts.repeat)
    for gpus in (int(g) for g in opts.gpus.split(",") if g):
        fleet(gpus, opts, ref_s, reads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
