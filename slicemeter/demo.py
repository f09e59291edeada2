"""`slicemeter demo`: the whole pipeline on one machine, from one command.

broker (Tansu, unless --kafka) -> ingest (DuckDB + snapshot) <- backfill of N days of the
scenario, a rolling window ending now -> live exporters (one per simulated node, /metrics on
9400+i; ingest's, with the right-sizing and sharing-dividend figures, on the port after them)
-> `slicemeter export` of the last complete month and of the month to date into ./out -> the
dashboard on :8501 against the snapshot.

`--now` (or $SLICEMETER_NOW) runs the whole demo as of another instant: every child gets
the pretend clock (slicemeter.clock), so the demo can be tried as on the 1st of a month.

Every part is a child process running the subcommand's own CLI, exactly as a user would
run it; logs and databases live in the working directory (./var). Ctrl-C or SIGTERM
stops every child: SIGTERM first, SIGKILL to the child's process group after a grace
period.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, TextIO

from slicemeter import clock
from slicemeter.progress import ProgressReporter
from slicemeter.cli import COMMANDS
from slicemeter.common import ConfigError, on_stop_signals

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SCENARIO = REPO / "examples" / "demo.yaml"
# subcommands the demo drives; checked before anything starts
NEEDED = ("ingest", "backfill", "exporter", "export", "dashboard")
RECOMMEND_INTERVAL_S = 300  # ingest replans the month's right-sizing figures this often
BILL_INTERVAL_S = 60        # and serves the tenants' live bill against their budgets (docs/live-bill.md)
TOPIC = "slicemeter.ticks"  # the exporter's, backfill's and ingest's default topic


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kafka", metavar="HOST:PORT", help="use this Kafka instead of starting Tansu")
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO, help="fleet scenario YAML (default examples/demo.yaml)")
    parser.add_argument("--days", type=int, default=30, help="days of history before now to backfill (default 30)")
    parser.add_argument("--now", metavar="INSTANT", help="run as of this UTC instant, e.g. 2026-12-01T09:00 "
                                                         f"(default: ${clock.ENV}, else the real clock)")
    parser.add_argument("--workdir", type=Path, default=Path("var"), help="databases and logs (default ./var)")
    parser.add_argument("--out", type=Path, default=Path("out"), help="export directory (default ./out)")
    parser.add_argument("--port", type=int, default=8501, help="dashboard port (default 8501)")
    parser.add_argument("--exporter-port", type=int, default=9400, help="first exporter /metrics port (default 9400)")
    parser.add_argument("--interval", type=int, default=10, help="seconds between the exporters' Ticks (default 10)")
    # hour rollups and bills read a minute's Tick as they read six of 10 s; a month of 10 s history
    # is six times the samples and kept ingest busy for most of the demo's start-up
    parser.add_argument("--history-interval", type=int, default=60,
                        help="seconds between the backfilled history's Ticks (default 60)")
    parser.add_argument("--snapshot-interval", type=float, default=5.0, help="seconds between ingest snapshots")
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="give up if not ready after this many seconds")


# ---------------------------------------------------------------- pure parts (tested)

# Not `python -m slicemeter.cli`: that runs the module as __main__, whose ConfigError is a
# different class from the one subcommands raise, so configuration errors would escape.
SLICEMETER = [sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())"]


def slicemeter_argv(*args: str) -> list[str]:
    return [*SLICEMETER, *args]


@dataclass(frozen=True)
class Paths:
    workdir: Path
    out: Path

    @property
    def db(self) -> Path:
        return self.workdir / "slicemeter.duckdb"

    @property
    def snapshot(self) -> Path:
        return self.workdir / "snapshot.duckdb"

    @property
    def export_copy(self) -> Path:
        return self.workdir / "export-copy.duckdb"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    def hami(self, node: str) -> Path:
        return self.workdir / "hami" / node


def history_end(now: datetime, interval_s: float) -> datetime:
    """History is a rolling window that ends at now (on a Tick boundary); live Ticks take
    over from there, so the month to date has data on any day, even the 1st."""
    t = now.astimezone(timezone.utc).replace(tzinfo=None)
    epoch = datetime(1970, 1, 1)
    step = timedelta(seconds=interval_s)
    return epoch + ((t - epoch) // step) * step


def backfill_start(now: datetime, days: int, interval_s: float = 10.0) -> datetime:
    return history_end(now, interval_s) - timedelta(days=days)


def export_months(now: datetime) -> list[str]:
    """The last complete month and the month to date, oldest first."""
    month = now.astimezone(timezone.utc).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    previous = (month - timedelta(days=1)).replace(day=1)
    return [f"{previous:%Y-%m}", f"{month:%Y-%m}"]


def ingest_metrics_port(args: argparse.Namespace, nodes: dict[str, str]) -> int:
    """The port after the exporters'."""
    return args.exporter_port + len(nodes)


def plan(args: argparse.Namespace, kafka: str, nodes: dict[str, str], paths: Paths, now: datetime) -> dict[str, list[str]]:
    """The child command lines, by name, in start order (the subcommands' documented CLIs). `nodes`:
    node name -> its tenant, the `tenant` label on that exporter's metrics."""
    start = backfill_start(now, args.days, args.interval)
    scenario = str(args.scenario)
    cmds = {
        "ingest": slicemeter_argv("ingest", "--kafka", kafka, "--db", str(paths.db), "--tenants", scenario,
                                  "--snapshot", str(paths.snapshot), "--snapshot-interval", str(args.snapshot_interval),
                                  "--metrics-port", str(ingest_metrics_port(args, nodes)),
                                  "--recommend-interval", str(RECOMMEND_INTERVAL_S),
                                  "--bill-interval", str(BILL_INTERVAL_S)),
        "backfill": slicemeter_argv("backfill", "--scenario", scenario, "--start", start.strftime("%Y-%m-%dT%H:%M:%S"),
                                    "--days", str(args.days), "--kafka", kafka, "--interval", str(args.history_interval)),
    }
    for i, (node, tenant) in enumerate(nodes.items()):
        cmds[f"exporter-{node}"] = slicemeter_argv(
            "exporter", "--simulate", scenario, "--node", node, "--tenant", tenant, "--port", str(args.exporter_port + i),
            "--kafka", kafka, "--hami-dir", str(paths.hami(node)), "--interval", str(args.interval))
    for month in export_months(now):
        cmds[f"export-{month}"] = slicemeter_argv("export", "--db", str(paths.export_copy), "--month", month,
                                                  "--out", str(paths.out))
    cmds["dashboard"] = slicemeter_argv("dashboard", "--db", str(paths.snapshot), "--port", str(args.port))
    return cmds


def coverage(snapshot: Path, start: datetime, days: int, nodes: int) -> float:
    """Share of the backfilled period that every node has in the snapshot (0 when absent)."""
    if not snapshot.is_file():
        return 0.0
    import duckdb

    from slicemeter.store import sql_text

    try:
        con = duckdb.connect(str(snapshot), read_only=True)
    except duckdb.Error:
        return 0.0  # replaced under us, or not a database yet: the next poll sees the new one
    try:
        seen, latest = con.execute(sql_text("demo/coverage.sql"), {"start": start}).fetchone()
    except duckdb.Error:
        return 0.0
    finally:
        con.close()
    if not seen or latest is None:
        return 0.0
    done = (latest + timedelta(hours=1) - start) / timedelta(days=days)
    return min(1.0, done) * min(1.0, seen / max(1, nodes))


def opening_month(snapshot: Path) -> str:
    """The month the dashboard opens on and why (slicemeter.dashboard.fmt.default_month), from the snapshot."""
    import duckdb

    from slicemeter.dashboard.fmt import default_month
    from slicemeter.store import connect, sql_text

    try:
        con = connect(snapshot, read_only=True)   # the query reads the views' macros
        try:
            months = [(m, d) for m, d, _ in con.execute(sql_text("dashboard/months.sql")).fetchall()]
        finally:
            con.close()
        return ": ".join(default_month(months))
    except (duckdb.Error, ValueError):
        return "the latest month with data"


def missing_commands() -> list[str]:
    """Subcommands whose module is not installed (the demo needs every one)."""
    out = []
    for name in NEEDED:
        module = COMMANDS[name][0]
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            out.append(f"{name} ({module})")
    return out


# ---------------------------------------------------------------- processes

@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log: Path
    finite: bool = False   # expected to exit (with 0) on its own, like the backfill


@dataclass
class Supervisor:
    """Starts children in their own process groups and stops them all, newest first."""

    logs: Path
    children: list[Child] = field(default_factory=list)
    grace_s: float = 10.0
    pretend_clock: bool = False   # hand each child the demo's pretend now as it starts

    def start(self, name: str, argv: list[str], finite: bool = False) -> Child:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        with open(log, "ab") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=os.getcwd(), env=child_env(self.pretend_clock))
        child = Child(name, proc, log, finite)
        self.children.append(child)
        return child

    def failed(self) -> Child | None:
        """A long-running child that exited, or a finite one that exited with an error."""
        return next((c for c in self.children
                     if c.proc.poll() is not None and (not c.finite or c.proc.returncode != 0)), None)

    def stop_all(self) -> None:
        for child in reversed(self.children):
            if child.proc.poll() is None:
                child.proc.terminate()
        deadline = time.monotonic() + self.grace_s
        for child in reversed(self.children):
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # the child's own children too (its session = its process group)
                os.killpg(child.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            child.proc.wait()
        self.children.clear()


def child_env(pretend_clock: bool) -> dict[str, str] | None:
    """The environment of a child started now: with the pretend clock, its SLICEMETER_NOW
    is this instant of the demo's clock (None: inherit the demo's environment)."""
    if not pretend_clock:
        return None
    return {**os.environ, clock.ENV: clock.now().isoformat()}


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until(cond: Callable[[], bool], timeout: float, sup: Supervisor, what: str, poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if (bad := sup.failed()) is not None:
            raise ChildFailed(bad)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready within {timeout:.0f} s")
        time.sleep(poll)  # a poll interval: each pass re-checks the condition


def topic_exists(kafka: str, topic: str = TOPIC) -> bool:
    import logging

    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    logging.getLogger("kafka").setLevel(logging.ERROR)  # one metadata probe, not the user's business
    try:
        consumer = KafkaConsumer(bootstrap_servers=kafka, client_id="slicemeter-demo", request_timeout_ms=5000)
    except KafkaError:
        return False
    try:
        return topic in consumer.topics()
    except KafkaError:
        return False
    finally:
        consumer.close()


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


class ChildFailed(RuntimeError):
    def __init__(self, child: Child):
        super().__init__(f"{child.name} exited with {child.proc.returncode}; log {child.log}:\n{tail(child.log)}")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


# ---------------------------------------------------------------- the demo

def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    t0 = time.monotonic()
    if args.days < 1:
        raise ConfigError("--days must be at least 1")
    if args.history_interval < 1 or 86400 % args.history_interval:
        raise ConfigError("--history-interval must divide a day (86400 s), so that the history ends where "
                          "the exporters' Ticks take over")
    if missing := missing_commands():
        print(f"slicemeter demo: cannot run, not installed: {', '.join(missing)}", file=sys.stderr)
        return 3
    if not args.scenario.is_file():
        raise ConfigError(f"--scenario: no such file: {args.scenario}")
    if args.now:
        try:
            clock.parse_instant(args.now, "--now")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        os.environ[clock.ENV] = args.now   # this process's clock; children get theirs at start
    from slicemeter.simulator.scenario import load_scenario

    nodes = {n.name: n.tenant for n in load_scenario(args.scenario).nodes}
    paths = Paths(args.workdir.resolve(), args.out.resolve())
    paths.workdir.mkdir(parents=True, exist_ok=True)
    paths.out.mkdir(parents=True, exist_ok=True)
    # a fresh broker has no offsets: start the demo's store fresh too
    for stale in (paths.db, paths.snapshot, paths.export_copy):
        for p in (stale, stale.with_name(stale.name + ".wal")):
            p.unlink(missing_ok=True)

    previous = on_stop_signals(_raise_interrupt)
    sup = Supervisor(paths.logs, pretend_clock=bool(os.environ.get(clock.ENV)))
    broker = None
    now = clock.now()
    try:
        if args.kafka:
            kafka = args.kafka
        else:
            from slicemeter.broker import TansuBroker

            paths.logs.mkdir(parents=True, exist_ok=True)
            broker = TansuBroker(log_path=paths.logs / "tansu.log").start()
            kafka = broker.bootstrap
            print(f"broker    Tansu on {kafka} (memory storage)", file=out, flush=True)
        cmds = plan(args, kafka, nodes, paths, now)
        # backfill first: ingest then finds the topic (auto-created by the first message)
        # with its partitions, whether it joins a group or assigns partitions itself
        backfill = sup.start("backfill", cmds["backfill"], finite=True)
        wait_until(lambda: topic_exists(kafka), 120, sup, f"topic {TOPIC}", poll=0.5)
        sup.start("ingest", cmds["ingest"])
        start = backfill_start(now, args.days, args.interval)
        print(f"backfill  {args.days} days of {args.scenario.name} ({len(nodes)} nodes), "
              f"{start:%Y-%m-%d %H:%M} to {history_end(now, args.interval):%Y-%m-%d %H:%M} UTC",
              file=out, flush=True)
        _backfill_progress(sup, backfill, paths, start, args, len(nodes), out)

        for name, argv in cmds.items():
            if name.startswith("exporter-"):
                sup.start(name, argv)
        sup.start("dashboard", cmds["dashboard"])  # boots while the export runs
        shutil.copyfile(paths.snapshot, paths.export_copy)  # export from a private copy: no lock contention
        for month, label in zip(export_months(now), ("last complete month", "month to date")):
            _export(cmds[f"export-{month}"], month, label, out)

        url = f"http://127.0.0.1:{args.port}/"
        wait_until(lambda: http_ok(url + "_stcore/health"), 120, sup, "dashboard")
        for i, node in enumerate(nodes):
            print(f"exporter  {node}: http://127.0.0.1:{args.exporter_port + i}/metrics", file=out)
        print(f"ingest    http://127.0.0.1:{ingest_metrics_port(args, nodes)}/metrics", file=out)
        print(f"logs      {paths.logs}", file=out)
        print(f"dashboard {url} (opens on {opening_month(paths.snapshot)})", file=out)
        print(f"dashboard ready in {time.monotonic() - t0:.0f} s (Ctrl-C stops everything)", file=out, flush=True)
        while True:
            if (bad := sup.failed()) is not None:
                raise ChildFailed(bad)
            time.sleep(1.0)  # supervision poll
    except KeyboardInterrupt:
        print("\nstopping…", file=out, flush=True)
        return 0
    except (ChildFailed, TimeoutError, subprocess.TimeoutExpired, OSError) as exc:
        print(f"slicemeter demo: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sup.stop_all()
        if broker is not None:
            broker.stop()
        print("stopped", file=out, flush=True)


def _export(argv: list[str], month: str, label: str, out: TextIO) -> None:
    exp = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if exp.returncode != 0:
        print(f"export    {month} failed ({exp.returncode}): {exp.stderr.strip()[-1500:]}", file=out, flush=True)
        return
    files = [Path(line) for line in exp.stdout.splitlines() if line.strip()]
    where = files[0].parent if files else "?"
    print(f"export    {month} ({label}) -> {where}: {', '.join(p.name for p in files)}", file=out, flush=True)


def _backfill_progress(sup: Supervisor, backfill: Child, paths: Paths, start: datetime,
                       args: argparse.Namespace, nodes: int, out: TextIO) -> None:
    """Progress = share of the backfilled days that ingest has in the snapshot, every node.

    Done when it reaches 100 %, or when the backfill has exited and ingest has added
    nothing for a while (a scenario may leave nodes unmetered at the end of the period).
    """
    deadline = time.monotonic() + args.ready_timeout
    last, last_change, backfill_done = -1.0, time.monotonic(), False
    stall_s = max(30.0, 6 * args.snapshot_interval)
    progress = ProgressReporter(out, min_interval_s=0)
    while True:
        if (bad := sup.failed()) is not None:
            raise ChildFailed(bad)
        if not backfill_done and backfill.proc.poll() is not None:
            backfill_done, last_change = True, time.monotonic()
        frac = coverage(paths.snapshot, start, args.days, nodes)
        if frac > last:
            last, last_change = frac, time.monotonic()
        label = "publishing + ingesting" if not backfill_done else "ingesting"
        progress.show(frac, label)
        if frac >= 1.0 or (backfill_done and frac > 0 and time.monotonic() - last_change > stall_s):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"backfill not in the store within {args.ready_timeout:.0f} s ({frac:.0%})")
        time.sleep(0.5)  # poll interval of the progress bar
    progress.done(frac, "history in the store")
