"""Money kept on a DuckLake (sql/lake/keep_money.sql): each worker's batch appends the kept
rows of the GPU-hours it touched, and a bill read from the lake sums them.

The kept-money property's fleet (testkit/kept_case.py) arrives through `write_lake` from two
workers (each its own connection, string ids and inventory, as two ingest processes), in a
random order, some after a first bill and some after October's close. The lake's bill from
the kept hours equals the bill recomputed from its rollups and the bill of a single-file
store fed the same batches, line for line, for every basis, idle policy and share kind;
`slicemeter export` writes the same files from the lake with and without kept hours."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from pathlib import Path

from slicemeter import store
from slicemeter.chargeback.bill import BASES, IDLE_POLICIES, SHARES, compute_bill, parse_month
from slicemeter.chargeback.close import close_month
from slicemeter.chargeback.kept import forget_kept, kept_current
from slicemeter.cli import main
from slicemeter.ingest.strings import HashedStringIds, StringIds
from slicemeter.ingest.writer import InventoryCache, prepare, write_batch, write_lake
from slicemeter.testkit.cb_rows import add_tenants
from slicemeter.testkit.kept_case import PRICES, PRICES_FILE_TEXT, arrival_phases, chunks_batch, kept_case_chunks

NOVEMBER = parse_month("2026-11")
# NVML down for a chunk of each node; gpu-node-1's GPUs move to globex's cluster at 23:20 on Oct 31
CASE = {"seed": 11, "nvml_down": {2, 17, 40}, "move_at": 4, "late_before_close": 0.3, "late_after_close": 0.2,
        "batch": 2}


class Worker:
    """One ingest worker's state over a lake connection: what `write_lake` is given."""

    def __init__(self, con, partition: int):
        self.con, self.strings, self.inventory = con, HashedStringIds(con), InventoryCache(con)
        self.partition, self.offset = partition, 0

    def write(self, chunks) -> None:
        batch = chunks_batch(chunks, self.partition, self.offset)
        self.offset += 1
        write_lake(self.con, prepare(self.con, batch, self.strings, self.inventory))


def _node(chunk) -> str:
    return chunk[2]["node"][0].as_py()


def _same_bill(a, b) -> None:
    assert a.detail.equals(b.detail)
    assert a.invoice.equals(b.invoice)
    assert a.unmetered.equals(b.unmetered)
    assert (a.gpu_cost, a.total) == (b.gpu_cost, b.total)


def _from_scratch(con, basis, idle, share):
    """The lake's bill with no kept hours to read (the kept rows deleted in a transaction
    rolled back after)."""
    con.execute("BEGIN TRANSACTION")
    try:
        forget_kept(con)
        assert not kept_current(con, *NOVEMBER)
        return compute_bill(con, "2026-11", basis, idle, share, PRICES)
    finally:
        con.execute("ROLLBACK")


def _export(db: str, out: Path, prices: Path) -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())",
                           "export", "--db", db, "--month", "2026-11", "--out", str(out), "--basis", "max",
                           "--idle", "shared", "--share", "memory", "--prices", str(prices)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())}


def test_the_lakes_kept_money_equals_from_scratch_and_a_single_files(lake_db, tmp_path):
    target, case = lake_db[0], CASE
    workers = [Worker(store.connect(target), 0), Worker(store.connect(target), 1)]
    single = store.connect(tmp_path / "single.duckdb")
    single_ids = StringIds(single)
    try:
        add_tenants(workers[0].con)
        add_tenants(single)
        on_time, late, after_close = arrival_phases(case)
        for phase, chunks in enumerate((on_time, late, after_close)):
            if phase == 1:
                with store.connect(target, read_only=True) as reader:    # a reader between arrivals
                    compute_bill(reader, "2026-11", prices=PRICES)
            if phase == 2:
                close_month(workers[0].con, "2026-10", PRICES)
                close_month(single, "2026-10", PRICES)
            # a node's Ticks go to one worker (Kafka's key is the node), in arrival order
            for i in range(0, len(chunks), case["batch"]):
                part = chunks[i:i + case["batch"]]
                for w, worker in enumerate(workers):
                    mine = [c for c in part if int(_node(c)[-1]) % 2 == w]
                    if mine:
                        worker.write(mine)
                write_batch(single, chunks_batch(part, 0, i), single_ids)
        with store.connect(target, read_only=True) as reader:
            assert kept_current(reader, *NOVEMBER)
            assert reader.execute("SELECT count(*) FROM kept_gpu_hour").fetchone()[0] == \
                single.execute("SELECT count(*) FROM kept_gpu_hour").fetchone()[0]
            corrections = 0
            for basis in BASES:
                for idle in IDLE_POLICIES:
                    for share in SHARES:
                        kept = compute_bill(reader, "2026-11", basis, idle, share, PRICES)
                        assert kept.total > 0
                        _same_bill(kept, _from_scratch(workers[1].con, basis, idle, share))
                        _same_bill(kept, compute_bill(single, "2026-11", basis, idle, share, PRICES))
                        corrections += int((kept.detail["charge_class"] == "Correction").sum())
            assert corrections > 0     # October's late Ticks after its close
    finally:
        single.close()
        for worker in workers:
            worker.con.close()
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES_FILE_TEXT)
    files = _export(target, tmp_path / "kept-out", prices)
    assert len(files) == 5
    with store.connect(target) as con:
        forget_kept(con)
        assert not kept_current(con, *NOVEMBER)
    assert files == _export(target, tmp_path / "scratch-out", prices)


class _HeldBeforeKeeping:
    """A lake connection whose next keeping statement waits (after the batch's appends, in
    its transaction) until `go` is set: another worker commits in between."""

    def __init__(self, con):
        self._con, self.reached, self.go = con, threading.Event(), threading.Event()

    def execute(self, query, *args):
        if query == store.sql_text("lake/keep_money.sql") and not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(60)
        return self._con.execute(query, *args)

    def __getattr__(self, name):
        return getattr(self._con, name)


def test_a_gpu_hour_two_workers_kept_at_once_is_billed_from_the_rollups_until_kept_again(lake_db):
    """Two workers that touch one GPU-hour at once (a partition changing hands) each keep
    what their own transaction sees: the later commit's kept row misses the other's samples.
    The month is then not current, its bill is computed from the rollups (the right money),
    and keeping the hours again makes it current."""
    target, _ = lake_db
    chunks = [c for c in kept_case_chunks({"seed": 5, "nvml_down": set(), "move_at": 14})
              if _node(c) == "gpu-node-0" and c[0] in (6, 7)]          # Nov 1, 00:00-00:40
    a, b = Worker(store.connect(target), 0), Worker(store.connect(target), 1)
    try:
        add_tenants(a.con)
        held = _HeldBeforeKeeping(a.con)
        a.con = held
        writer = threading.Thread(target=a.write, args=([chunks[0]],))
        writer.start()
        assert held.reached.wait(60)
        b.write([chunks[1]])                      # commits while a's transaction is open
        held.go.set()
        writer.join(60)
        assert not writer.is_alive()
        a.con = held._con
        with store.connect(target, read_only=True) as reader:
            assert reader.execute("SELECT count(*) FROM kept_gpu_hour").fetchone()[0] == 2   # 2 GPUs, 1 hour
            assert not kept_current(reader, *NOVEMBER)
            samples = reader.execute("SELECT sum(sample_count) FROM slice_hour").fetchone()[0]
            assert samples == sum(c[2].num_rows for c in chunks)      # both batches are in the rollups
            from_rollups = compute_bill(reader, "2026-11", prices=PRICES)
        assert main(["keep", "--db", target, "--month", "2026-11"]) == 0   # beside the workers
        with store.connect(target, read_only=True) as reader:
            assert kept_current(reader, *NOVEMBER)
            _same_bill(compute_bill(reader, "2026-11", prices=PRICES), from_rollups)
    finally:
        a.con.close()
        b.con.close()
