"""The operator's two questions at fleet scale, in headless Chromium (Debian's), from the Fleet
page of `slicemeter dashboard` on a readers' file of a generated month:

(a) the ten GPUs of one tenant that cost the most paid for but unused;
(b) every GPU with a critical Xid this month;

each reached in at most three interactions (clicks or selections), what the GPUs page lists
(its table's own CSV download) checked against SQL of the same store written apart from the
dashboard's (sql/testkit/oracle_*.sql). Each question is asked twice, each time on a fresh
page opened on Fleet: right after the dashboard starts (cold: nothing cached) and again
(warm: the server's caches answer).

Set up as bench_pages_after_refresh.py sets up a fleet: the generated month cached under
var/bench/ with its money kept (generating 8,000 GPUs takes minutes), copied into a live
store, a few GPUs given a critical Xid or throttling (testkit/synth_month.py
mark_synth_health), and the readers' file made from it, which the dashboard serves.
Too slow for the suite (tests/test_dashboard_browser_filters.py asks the same on 30 GPUs).

    python bench/bench_browser_8000.py [--gpus 8000] [--screenshot docs/gpus-filtered-8000.png]

Prints what it checked and each interaction's time; exits 1 on any mismatch.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from bench_dashboard import MONTH  # noqa: E402
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402
from bench_kept_money import kept_db  # noqa: E402

from slicemeter import store  # noqa: E402
from slicemeter.chargeback.bill import parse_month  # noqa: E402
from slicemeter.chargeback.prices import load_prices_or_default  # noqa: E402
from slicemeter.dashboard import fmt, money  # noqa: E402
from slicemeter.store import sql_text  # noqa: E402
from slicemeter.store.reader_file import ReaderFile  # noqa: E402
from slicemeter.testkit.browser import chromium, fleet_page, gpu_list, serve_dashboard  # noqa: E402
from slicemeter.testkit.synth_month import mark_synth_health  # noqa: E402

TOP = 10
TIMEOUT_MS = 600_000   # a cold page at fleet scale on a loaded machine


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        print(f"  {'ok' if ok else 'MISMATCH'}: {what}", flush=True)
        if not ok:
            self.failed.append(what)


def load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def ask(browser, url: str, link: str, timings: list, run: str, question: str) -> tuple[object, list[dict]]:
    """A fresh page on Fleet, then one click on `link`: (the page, the GPUs it lists); the s to
    open Fleet to its end, from the click to the GPUs' table drawn and to read the table's CSV
    printed and added to `timings`."""
    t = time.perf_counter()
    page = fleet_page(browser, url, TIMEOUT_MS)
    page.wait_for_selector("[data-testid=stTable] td", timeout=TIMEOUT_MS)   # the last of Fleet: by tenant
    fleet_s = time.perf_counter() - t
    t = time.perf_counter()
    page.get_by_role("link", name=link).click()                                   # the one interaction
    page.wait_for_selector("text=Slices on a GPU", timeout=TIMEOUT_MS)
    page.wait_for_selector("[data-testid=stDataFrame]", timeout=TIMEOUT_MS)
    click_s = time.perf_counter() - t
    t = time.perf_counter()
    rows = gpu_list(page, TIMEOUT_MS)
    csv_s = time.perf_counter() - t
    timings.append((run, question, fleet_s, click_s, csv_s, load()))
    print(f"  Fleet opened in {fleet_s:.2f} s; click -> the GPUs' table drawn {click_s:.2f} s; "
          f"its CSV read in {csv_s:.2f} s ({load()})", flush=True)
    return page, rows


def screenshot(page, path: Path) -> None:
    """The GPUs page from its top, its heatmap showing the allocated share (the generated
    month records no SM busy time, so utilization would draw one colour)."""
    page.set_viewport_size({"width": 1400, "height": 2400})   # the filters, the heatmap, the list's first rows
    page.get_by_text("allocated share", exact=True).click()
    running = "[data-testid=stStatusWidgetRunningIcon]"
    try:   # the rerun may end before the icon is seen
        page.wait_for_selector(running, timeout=5_000)
    except PlaywrightTimeout:
        pass
    page.wait_for_selector(running, state="detached", timeout=TIMEOUT_MS)
    page.evaluate("document.querySelectorAll('*').forEach(e => { if (e.scrollTop) e.scrollTop = 0; })")
    page.screenshot(path=str(path))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8000, help="the generated fleet's size in GPUs")
    ap.add_argument("--fresh", action="store_true", help="regenerate the cached generated month")
    ap.add_argument("--screenshot", type=Path, help="write the GPUs page of question (a), cold, here (PNG), "
                    "once its list is checked")
    opts = ap.parse_args()
    checks = Checks()
    m_start, m_end = parse_month(MONTH)
    t = time.perf_counter()
    cached, _, _ = kept_db(opts.gpus, opts.fresh)
    print(f"generated month of {opts.gpus} GPUs ready in {time.perf_counter() - t:.0f} s ({load()})", flush=True)
    with tempfile.TemporaryDirectory(dir=cached.parent, prefix="bench-browser-") as tmp:
        live = Path(tmp) / "live.duckdb"
        shutil.copyfile(cached, live)
        con = store.connect(live)
        try:
            mark_synth_health(con, MONTH)
            reader = ReaderFile(con, Path(tmp) / "reader.duckdb")
            reader.refresh()
            tenant = con.execute("SELECT min(tenant) FROM tenants").fetchone()[0]
        finally:
            con.close()
        print(f"readers' file written in {reader.copy_s + reader.pin_s:.1f} s ({load()})", flush=True)
        with store.connect(reader.dest, read_only=True) as rcon:
            bounds = {"start": m_start, "end": m_end}
            placed = rcon.execute(sql_text("testkit/oracle_tenant_gpu_waste.sql"), {**bounds, "tenant": tenant}).fetchall()
            xid = dict(rcon.execute(sql_text("testkit/oracle_xid_gpus.sql"), bounds).fetchall())
        catalog = load_prices_or_default(None)
        cost = {label: money.share_cost(catalog.price(model, node, cluster), ms)
                for label, _uuid, model, node, cluster, ms in placed}
        timings = []
        with serve_dashboard(reader.dest, Path(tmp) / "dashboard.log") as url, chromium() as browser:
            for run in ("cold", "warm"):
                print(f"\n({run}) (a) {tenant}'s {TOP} GPUs paid for but unused the most: 1 interaction, "
                      f"the link '{tenant}: most wasteful GPUs' on Fleet", flush=True)
                page, rows = ask(browser, url, f"{tenant}: most wasteful GPUs", timings, run, "a")
                top = rows[:TOP]
                checks.check("tenant=" + tenant in page.url and "sort=waste_cost" in page.url,
                             f"the URL names the choice: {page.url.split('/')[-1]}")
                checks.check(len(rows) == len(cost), f"the page lists {len(rows):,} GPUs; {tenant} has {len(cost):,}")
                checks.check({r["tenant"] for r in rows} == {tenant}, f"every GPU listed is {tenant}'s")
                shown = [cost.get(r["gpu"]) for r in top]
                checks.check(all(c is not None for c in shown), "each of the first ten is one of the tenant's GPUs")
                want = sorted(cost.values(), reverse=True)[:TOP]
                checks.check(shown == want, "the first ten are the ten largest by the SQL's money: "
                             + ", ".join(f"{r['gpu']} {r['waste_cost']}" for r in top))
                checks.check([fmt.money(c, catalog.currency) if c is not None else None for c in shown]
                             == [r["waste_cost"] for r in top], "each shows the SQL's amount, to the cent")
                if run == "cold" and opts.screenshot:
                    screenshot(page, opts.screenshot)
                page.close()

                print(f"({run}) (b) every GPU with a critical Xid in {MONTH}: 1 interaction, "
                      "the link 'GPUs with a critical Xid this month' on Fleet", flush=True)
                page, rows = ask(browser, url, "GPUs with a critical Xid this month", timings, run, "b")
                checks.check("health=xid" in page.url, f"the URL names the choice: {page.url.split('/')[-1]}")
                listed = [r["gpu"] for r in rows]
                checks.check(len(listed) == len(set(listed)) and set(listed) == set(xid),
                             f"the page lists {len(listed)} GPUs, the SQL finds {len(xid)}, the same ones")
                checks.check(all("critical Xid" in r["health"] for r in rows), "each says critical Xid in its health")
                page.close()
        print("\nrun  question  Fleet s  click -> table s  CSV s  load")
        for run, q, fleet_s, click_s, csv_s, at in timings:
            print(f"{run:<5}{q:<10}{fleet_s:>7.2f}{click_s:>18.2f}{csv_s:>7.2f}  {at}")
    if checks.failed:
        print(f"\n{len(checks.failed)} mismatches: " + "; ".join(checks.failed))
        return 1
    print("\nevery check held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
