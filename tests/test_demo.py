"""`slicemeter demo`: its command plan against the BRIEF's CLIs, its progress measure on a
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
from pathlib import Path

import pytest

from fleet_fixture import build_fleet_db
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
    assert list(cmds) == ["ingest", "backfill", "exporter-gpu-node-1", "exporter-gpu-node-2", "export", "dashboard"]
    for argv in cmds.values():
        assert argv[:3] == demo.SLICEMETER
    sub = {name: argv[3:] for name, argv in cmds.items()}
    assert sub["ingest"][:5] == ["ingest", "--kafka", "127.0.0.1:9092", "--db", "/w/var/slicemeter.duckdb"]
    assert sub["ingest"][sub["ingest"].index("--snapshot") + 1] == "/w/var/snapshot.duckdb"
    # ingest serves the right-sizing figures on the port after the two exporters'
    assert sub["ingest"][sub["ingest"].index("--metrics-port") + 1] == "9402"
    assert sub["ingest"][sub["ingest"].index("--recommend-interval") + 1] == "300"
    assert sub["backfill"] == ["backfill", "--scenario", str(demo.DEFAULT_SCENARIO), "--start", "2026-10-30",
                               "--days", "30", "--kafka", "127.0.0.1:9092", "--interval", "10"]
    e2 = sub["exporter-gpu-node-2"]
    assert e2[:7] == ["exporter", "--simulate", str(demo.DEFAULT_SCENARIO), "--node", "gpu-node-2",
                      "--tenant", "globex"]
    assert e2[e2.index("--port") + 1] == "9401" and e2[e2.index("--hami-dir") + 1] == "/w/var/hami/gpu-node-2"
    assert sub["export"] == ["export", "--db", "/w/var/export-copy.duckdb", "--month", "2026-11", "--out", "/w/out"]
    assert sub["dashboard"] == ["dashboard", "--db", "/w/var/snapshot.duckdb", "--port", "8501"]


def test_backfill_ends_at_utc_midnight():
    assert demo.backfill_start(datetime(2026, 12, 1, 0, 5, tzinfo=timezone.utc), 30) == datetime(2026, 11, 1)


def test_progress_bar():
    assert demo.progress_bar(0.5, width=10, label="x") == "[#####.....]  50.0 % x"
    assert demo.progress_bar(1.7, width=4) == "[####] 100.0 %"


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


def test_demo_end_to_end_or_names_what_is_missing(tmp_path):
    """With every branch merged: `slicemeter demo` reaches "dashboard ready", serves the
    dashboard, an exporter's /metrics (labelled with its Kamaji tenant) and ingest's
    right-sizing figures, writes exports, and Ctrl-C stops all of it, even when started
    with SIGINT ignored (as `demo &` from a script does). Before that: it refuses to start
    and names the missing subcommands."""
    port, exporter_port = free_port(), free_port()
    cmd = [*demo.SLICEMETER, "demo", "--days", "1", "--workdir", str(tmp_path / "var"),
           "--out", str(tmp_path / "out"), "--port", str(port), "--exporter-port", str(exporter_port)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    missing = demo.missing_commands()
    try:
        if missing:
            output, _ = proc.communicate(timeout=60)
            assert proc.returncode == 3
            for m in missing:
                assert m in output
            return
        lines = []
        deadline = time.monotonic() + 170
        for line in proc.stdout:
            lines.append(line)
            if "dashboard ready" in line:
                break
            assert time.monotonic() < deadline, "".join(lines)
        assert any("dashboard ready" in ln for ln in lines), "".join(lines)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert "hami_vgpu_memory_used_bytes" in text
        # gpu-node-1's Kamaji tenant, not its cluster URL
        assert set(re.findall(r'tenant="([^"]*)"', text)) == {"acme"}
        ingest_port = exporter_port + 5  # after the scenario's 5 exporters
        deadline = time.monotonic() + 60
        while "slicemeter_recommend_freeable_gpus " not in (text := fetch_text(f"http://127.0.0.1:{ingest_port}/metrics")):
            assert time.monotonic() < deadline, f"ingest serves no right-sizing figures: {text[-500:]}"
            time.sleep(0.2)
        assert any((tmp_path / "out").iterdir())
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        assert proc.returncode == 0
        for p in (port, exporter_port):
            with pytest.raises(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{p}/", timeout=2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
