"""`slicemeter demo`: its command plan against the subcommands' documented CLIs, its progress measure on a
real DuckDB file, and that stopping really stops every child (real processes)."""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from slicemeter.testkit.fleet_fixture import build_fleet_db
from slicemeter import demo
from slicemeter.broker import free_port

REPO = Path(__file__).resolve().parent.parent


def args(**kw) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    demo.configure(p)
    return p.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in kw.items()])


def test_plan_uses_the_brief_clis():
    now = datetime(2026, 11, 29, 15, 30, tzinfo=timezone.utc)
    paths = demo.Paths(Path("/w/var"), Path("/w/out"))
    cmds = demo.plan(args(days=30), "127.0.0.1:9092", {"gpu-node-1": "acme", "gpu-node-2": "globex"}, paths, now)
    assert list(cmds) == ["ingest", "backfill", "exporter-gpu-node-1", "exporter-gpu-node-2", "export-2026-10",
                          "export-2026-11", "dashboard"]
    for argv in cmds.values():
        assert argv[:3] == demo.SLICEMETER
    sub = {name: argv[3:] for name, argv in cmds.items()}
    assert sub["ingest"][:5] == ["ingest", "--kafka", "127.0.0.1:9092", "--db", "/w/var/slicemeter.duckdb"]
    assert sub["ingest"][sub["ingest"].index("--snapshot") + 1] == "/w/var/snapshot.duckdb"
    # ingest serves the right-sizing figures on the port after the two exporters'
    assert sub["ingest"][sub["ingest"].index("--metrics-port") + 1] == "9402"
    assert sub["ingest"][sub["ingest"].index("--recommend-interval") + 1] == "300"
    assert sub["ingest"][sub["ingest"].index("--bill-interval") + 1] == "60"   # the live bill and budgets
    # a rolling window ending now (on a Tick boundary), not at midnight
    assert sub["backfill"] == ["backfill", "--scenario", str(demo.DEFAULT_SCENARIO), "--start", "2026-10-30T15:30:00",
                               "--days", "30", "--kafka", "127.0.0.1:9092", "--interval", "60"]
    e2 = sub["exporter-gpu-node-2"]
    assert e2[:7] == ["exporter", "--simulate", str(demo.DEFAULT_SCENARIO), "--node", "gpu-node-2",
                      "--tenant", "globex"]
    assert e2[e2.index("--port") + 1] == "9401" and e2[e2.index("--hami-dir") + 1] == "/w/var/hami/gpu-node-2"
    # the last complete month and the month to date
    assert sub["export-2026-10"] == ["export", "--db", "/w/var/export-copy.duckdb", "--month", "2026-10", "--out", "/w/out"]
    assert sub["export-2026-11"][4] == "2026-11"
    assert sub["dashboard"] == ["dashboard", "--db", "/w/var/snapshot.duckdb", "--port", "8501"]


def test_history_ends_now_and_exports_two_months():
    now = datetime(2026, 12, 1, 0, 5, 7, tzinfo=timezone.utc)
    assert demo.history_end(now, 10) == datetime(2026, 12, 1, 0, 5)
    assert demo.backfill_start(now, 30, 10) == datetime(2026, 11, 1, 0, 5)
    assert demo.export_months(now) == ["2026-11", "2026-12"]
    assert demo.export_months(datetime(2027, 1, 15, tzinfo=timezone.utc)) == ["2026-12", "2027-01"]


def test_children_get_the_pretend_clock(monkeypatch):
    monkeypatch.setenv("SLICEMETER_NOW", "2026-12-01T09:00:00Z")
    env = demo.child_env(pretend_clock=True)
    started = datetime.fromisoformat(env["SLICEMETER_NOW"])
    assert datetime(2026, 12, 1, 9, tzinfo=timezone.utc) <= started < datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert demo.child_env(pretend_clock=False) is None




def test_coverage_reads_a_real_store(tmp_path):
    start = datetime(2026, 11, 1)
    assert demo.coverage(tmp_path / "absent.duckdb", start, 20, 5) == 0.0
    db = build_fleet_db(tmp_path / "s.duckdb", "2026-11", days=10)
    assert demo.coverage(db, start, 20, 5) == pytest.approx(0.5)
    assert demo.coverage(db, start, 20, 10) == pytest.approx(0.25)   # half the nodes not seen yet
    assert demo.coverage(db, start, 5, 5) == 1.0


CHILD = """
import os, signal, subprocess, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    g = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    open(sys.argv[2], "w").write(str(g.pid))
else:
    open(sys.argv[2], "w").write(str(os.getpid()))
while True:
    time.sleep(1)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie awaiting its parent counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_for_file(path: Path, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return path.read_text()


def test_supervisor_stops_every_child_and_grandchild(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    sup = demo.Supervisor(tmp_path / "logs", grace_s=1.0)
    polite = sup.start("polite", [sys.executable, str(script), "polite", str(tmp_path / "p.pid")])
    stubborn = sup.start("stubborn", [sys.executable, str(script), "stubborn", str(tmp_path / "g.pid")])
    grandchild = int(wait_for_file(tmp_path / "g.pid"))
    wait_for_file(tmp_path / "p.pid")
    assert sup.failed() is None
    t = time.monotonic()
    sup.stop_all()
    assert time.monotonic() - t < 5
    assert polite.proc.returncode == -signal.SIGTERM          # stopped by SIGTERM
    assert stubborn.proc.returncode == -signal.SIGKILL        # ignored it: killed after the grace period
    deadline = time.monotonic() + 5
    while alive(grandchild):                                   # its process group went too
        assert time.monotonic() < deadline, "grandchild survived"
        time.sleep(0.05)
    assert sup.children == []


def test_a_child_that_dies_is_reported_with_its_log(tmp_path):
    sup = demo.Supervisor(tmp_path / "logs")
    done = sup.start("backfill", [sys.executable, "-c", "pass"], finite=True)
    done.proc.wait(timeout=10)
    assert sup.failed() is None            # a finite child exiting with 0 is fine
    c = sup.start("broken", [sys.executable, "-c", "import sys; print('bad config: --db'); sys.exit(2)"])
    c.proc.wait(timeout=10)
    assert sup.failed() is c
    msg = str(demo.ChildFailed(c))
    assert "broken exited with 2" in msg and "bad config: --db" in msg
    sup.stop_all()


def fetch_text(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def months_in(snapshot: Path) -> dict[str, int]:
    """Month -> days with data, as the dashboard's month picker reads them."""
    from slicemeter.store import connect, sql_text

    con = connect(snapshot, read_only=True)
    try:
        return {m: d for m, d, _ in con.execute(sql_text("dashboard/months.sql")).fetchall()}
    finally:
        con.close()


def short_lived_reservations(snapshot: Path, month: str) -> set[str]:
    """Pods the Waste page lists as short-lived idle reservations in `month` (its own query
    and thresholds: lived under 24 h, idle at least half the time)."""
    from slicemeter.common import month_window
    from slicemeter.store import connect, sql_text

    start, end, _hours = month_window(month)
    con = connect(snapshot, read_only=True)
    try:
        return set(con.execute(sql_text("dashboard/short_reservations.sql"), {
            "start": start, "end": end, "max_life_s": 24 * 3600, "min_idle_share": 0.5}).df()["pod"])
    finally:
        con.close()


def dashboard_month(url: str) -> str:
    """The month the dashboard opens on, read in Debian's chromium, and its reason."""
    from slicemeter.testkit.browser import chromium

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 1200})
        page.goto(url)
        page.wait_for_selector("text=Users on the same hardware", timeout=90_000)
        return page.wait_for_selector("text=Opened on", timeout=30_000).inner_text()


def start_demo(tmp_path: Path, now: str, port: int, exporter_port: int, *extra: str) -> subprocess.Popen:
    """The README's demo command, `make demo`, with the clock at `now` (started with SIGINT
    ignored, as `make demo &` from a script has it)."""
    demo_args = " ".join([f"--workdir {tmp_path / 'var'} --out {tmp_path / 'out'} --port {port}",
                          f"--exporter-port {exporter_port}", *extra])
    env = {**os.environ, "SLICEMETER_NOW": now}
    return subprocess.Popen(["make", "--no-print-directory", "demo", f"DEMO_ARGS={demo_args}"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))


def wait_ready(proc: subprocess.Popen, timeout: float = 240) -> list[str]:
    lines = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line)
        if "dashboard ready" in line:
            return lines
        assert time.monotonic() < deadline, "".join(lines)
    raise AssertionError("demo ended before the dashboard was ready:\n" + "".join(lines))


def stop(proc: subprocess.Popen) -> None:
    """SIGINT first: the demo stops its children (each in a session of its own, beyond the
    reach of a kill of make's group); SIGKILL only if it does not exit."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def xid_hours_on_the_gpus_page(snapshot: Path, month: str) -> list[tuple]:
    """(hour, node, what, tenants) of the month's Xid hours, as the GPUs page's health events
    (its own query) show them."""
    from slicemeter.chargeback.prices import DEFAULT_THROTTLED_SHARE
    from slicemeter.common import month_window
    from slicemeter.store import connect, sql_text

    start, end, _hours = month_window(month)
    con = connect(snapshot, read_only=True)
    try:
        rows = con.execute(sql_text("dashboard/gpu_events.sql"),
                           {"start": start, "end": end, "throttled_share": float(DEFAULT_THROTTLED_SHARE),
                            "gpus": [r[0] for r in con.execute("SELECT DISTINCT gpu_uuid FROM gpu_hour").fetchall()]}
                           ).fetchall()
    finally:
        con.close()
    return [(str(hour), node, what, tenants) for hour, _, node, what, _, tenants in rows if "Xid" in what]


def credited_month(tmp_path: Path) -> None:
    """November's faults with the credit policy on: gpu-node-1's Xid 79 hour (and its ECC
    burst) are credited to acme, the tenant on it, in the invoice and FOCUS, and the totals
    reconcile: total = GPU cost - credits, FOCUS's Credit rows = - credits."""
    import csv

    import pyarrow.parquet as pq

    catalog = tmp_path / "prices-credits.yaml"
    catalog.write_text(Path(demo.REPO / "examples" / "prices.yaml").read_text() + 'credits: {degraded_hour: "1.0"}\n')
    out = tmp_path / "credited"
    res = subprocess.run([*demo.SLICEMETER, "export", "--db", str(tmp_path / "var" / "snapshot.duckdb"), "--month",
                          "2026-11", "--out", str(out), "--prices", str(catalog)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    total, cost, credits = (Decimal(x) for x in re.search(
        r"total ([0-9.]+) USD, GPU cost ([0-9.]+), credits ([0-9.]+)", res.stdout + res.stderr).groups())
    assert credits > 0 and total == cost - credits
    detail = pq.read_table(out / "detail-2026-11.parquet").to_pylist()
    credit_lines = [r for r in detail if r["kind"] == "credit"]
    assert {r["tenant"] for r in credit_lines} == {"acme"}
    assert {r["node"] for r in credit_lines} == {"gpu-node-1"}
    assert -sum(r["cost"] for r in credit_lines) == credits
    focus = list(csv.DictReader((out / "focus-2026-11.csv").open()))
    assert -sum(Decimal(r["BilledCost"]) for r in focus if r["ChargeCategory"] == "Credit") == credits
    assert sum(Decimal(r["BilledCost"]) for r in focus) == total


def test_demo_on_the_first_of_a_month(tmp_path):
    """On 1 December at 09:00: the history reaches back into November, November's exports
    have rows, and the dashboard opens on November (December is 9 hours old) and says why.
    Also: an exporter's /metrics (labelled with its Kamaji tenant) and ingest's right-sizing
    and dividend figures are served, and SIGINT stops everything."""
    port, exporter_port = free_port(), free_port()
    proc = start_demo(tmp_path, "2026-12-01T09:00:00Z", port, exporter_port)
    try:
        lines = wait_ready(proc)
        out = "".join(lines)
        assert "export    2026-11 (last complete month)" in out and "export    2026-12 (month to date)" in out
        assert "(opens on 2026-11: the latest month with at least 3 days of data" in out
        months = months_in(tmp_path / "var" / "snapshot.duckdb")
        assert months["2026-11"] >= 29 and months["2026-12"] == 1
        short = short_lived_reservations(tmp_path / "var" / "snapshot.duckdb", "2026-11")
        # the demo's reservations opened on working mornings and left idle, one pod per day
        for base in ("scratch-reserved", "debug-reserved"):
            assert len({p for p in short if p.startswith(base + "-")}) >= 10, (base, short)
        assert not short - {p for p in short if p.startswith(("scratch-reserved-", "debug-reserved-"))}
        invoice = (tmp_path / "out" / "invoice-2026-11.csv").read_text().splitlines()
        assert len(invoice) > 1                         # rows, not just the header
        for name in ("focus-2026-11.csv", "unmetered-2026-11.csv"):
            assert len((tmp_path / "out" / name).read_text().splitlines()) > 1, name
        xid_hours = xid_hours_on_the_gpus_page(tmp_path / "var" / "snapshot.duckdb", "2026-11")
        assert [(h, n, t) for h, n, _, t in xid_hours] == [("2026-11-12 14:00:00", "gpu-node-1", "acme")], xid_hours
        assert "Xid 79 (critical)" in xid_hours[0][2]
        credited_month(tmp_path)
        opened = dashboard_month(f"http://127.0.0.1:{port}/")
        assert opened.startswith("Opened on 2026-11: the latest month with at least 3 days of data"), opened
        assert "2026-12 has 1 day so far" in opened
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert "hami_vgpu_memory_used_bytes" in text
        assert set(re.findall(r'tenant="([^"]*)"', text)) == {"acme"}   # gpu-node-1's Kamaji tenant
        from slicemeter.simulator.scenario import load_scenario
        ingest_port = exporter_port + len(load_scenario(demo.DEFAULT_SCENARIO).nodes)  # after the exporters
        deadline = time.monotonic() + 60
        while not re.search(r'slicemeter_dividend_sharing_factor\{(?=[^}]*scope="fleet")(?=[^}]*month="2026-11")',
                            text := fetch_text(f"http://127.0.0.1:{ingest_port}/metrics")):
            assert time.monotonic() < deadline, f"ingest serves no dividend figures: {text[-500:]}"
            time.sleep(0.2)
        assert "slicemeter_recommend_freeable_gpus " in text
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        assert proc.returncode == 0
        for p in (port, exporter_port):
            with pytest.raises(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{p}/", timeout=2)
    finally:
        stop(proc)


def test_demo_on_the_fifteenth(tmp_path):
    """On 15 November (20 days of history at one Tick per 5 minutes, to keep the suite short:
    the month picker counts days, not Ticks): October and November to date both have data,
    October's exports have rows, and the dashboard opens on November, which has 15 days of data."""
    port, exporter_port = free_port(), free_port()
    proc = start_demo(tmp_path, "2026-11-15T12:00:00Z", port, exporter_port, "--days 20", "--history-interval 300")
    try:
        out = "".join(wait_ready(proc))
        months = months_in(tmp_path / "var" / "snapshot.duckdb")
        assert months == {"2026-11": 15, "2026-10": 6}, out
        assert len((tmp_path / "out" / "invoice-2026-10.csv").read_text().splitlines()) > 1
        opened = dashboard_month(f"http://127.0.0.1:{port}/")
        assert opened.startswith("Opened on 2026-11: the latest month with data"), (opened, out, months_in(
            tmp_path / "var" / "snapshot.duckdb"))
    finally:
        stop(proc)


def test_demo_names_what_is_missing(tmp_path, monkeypatch):
    """A demo without every subcommand installed refuses to start and names them."""
    monkeypatch.setitem(demo.COMMANDS, "export", ("ingest.no_such_module", "x"))
    assert demo.missing_commands() == ["export (ingest.no_such_module)"]
    assert demo.run(args(workdir=tmp_path / "var", out=tmp_path / "out")) == 3


@pytest.mark.parametrize("bad", [0, 7])
def test_a_history_interval_that_does_not_divide_a_day_is_refused_before_anything_starts(tmp_path, bad):
    """A history whose last Tick would not end where the exporters' Ticks begin leaves a gap."""
    from slicemeter.common import ConfigError

    with pytest.raises(ConfigError, match="--history-interval must divide a day"):
        demo.run(args(workdir=tmp_path / "var", out=tmp_path / "out", history_interval=bad))
    assert not (tmp_path / "var").exists()
