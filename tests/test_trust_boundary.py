"""The trust boundary between tenant clusters' exporters and ingest, against the real Tansu
broker and DuckDB: signed publishers, cluster-bound GPUs and nodes, impossible values,
duplicates, a replaced broker and a Tick the broker refuses (docs/security.md,
docs/ingest.md)."""
from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from slicemeter.exporter.ship.publisher import Publisher, Spool, kafka_producer
from slicemeter.ingest.bindings_cli import move_binding
from slicemeter.ingest.consumer import IngestConfig, Ingestor
from slicemeter.testkit.ingest_helpers import SLICEMETER, TOPIC, create_topic, produce_raw
from slicemeter import signing
from slicemeter.broker import TansuBroker
from slicemeter.tick import GpuReading, Limits, SliceReading, Tick, decode, encode_ticks, implausible
from slicemeter.testkit.synth_ticks import recent_midnight_ms
from slicemeter.common import GiB

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.broker
ACME, BETA = "https://acme.example:6443", "https://beta.example:6443"
T0 = recent_midnight_ms(days_ago=2) + 3_600_000 * 9


def tick(node="node-a", cluster=ACME, ts=T0, gpu="GPU-a0", interval_ms=10_000, **slice_fields) -> Tick:
    s = dict(hami_memory_limit_bytes=20 * GiB, hami_memory_used_bytes=8 * GiB, sm_limit_ratio=0.25,
             sm_util_ratio=0.2, alloc_memory_bytes=20 * GiB, alloc_cores_ratio=0.25, whole_gpu=False,
             source="hami") | slice_fields
    return Tick(node=node, cluster=cluster, ts_ms=ts, interval_ms=interval_ms,
                gpus=[GpuReading(gpu, 0, "NVIDIA A100-SXM4-80GB", 80 * GiB, 8 * GiB, 0.2, 0.1, 200.0, 1.0e6, 1)],
                slices=[SliceReading("uid-1", "main", gpu, pod="train-0", namespace="ml", **s)])




def ingest(bootstrap: str, db: Path, **cfg) -> Ingestor:
    ing = Ingestor(IngestConfig(bootstrap=bootstrap, db=db, group=None, until_idle_s=4, **cfg))
    ing.run()
    return ing


def dead_letters(ing: Ingestor) -> list[tuple[int, str]]:
    return ing.con.execute('SELECT "offset", error FROM dead_letters ORDER BY "offset"').fetchall()


# ---- wire encoding ----------------------------------------------------------------------

def test_a_lone_surrogate_in_a_pod_name_costs_only_that_name():
    t = tick()
    t.slices[0].pod = "train-\udcff"
    t.slices.append(SliceReading("uid-2", "side", "GPU-a0", pod="ok-pod", namespace="ml"))
    rows = decode(encode_ticks([t])).slices.to_pylist()
    assert [r["pod"] for r in rows] == ["train-\\udcff", "ok-pod"]
    assert rows[0]["hami_memory_used_bytes"] == 8 * GiB


# ---- impossible values ------------------------------------------------------------------

IMPOSSIBLE = {
    "inf power": (dict(gpu=dict(power_watts=math.inf)), "gpu.power_watts: 1 non-finite"),
    "NaN energy": (dict(gpu=dict(energy_joules=math.nan)), "gpu.energy_joules: 1 non-finite"),
    "negative energy": (dict(gpu=dict(energy_joules=-5.0)), "gpu.energy_joules: -5.0 below"),
    "negative bytes": (dict(slice=dict(hami_memory_used_bytes=-1)), "slice.hami_memory_used_bytes: -1 below"),
    "NaN share": (dict(slice=dict(alloc_cores_ratio=math.nan)), "slice.alloc_cores_ratio: 1 non-finite"),
    "share above 1": (dict(slice=dict(sm_limit_ratio=1.5)), "slice.sm_limit_ratio: 1.5 above 1.0"),
    "health code": (dict(gpu=dict(device_health=7)), "gpu.device_health: 7 above 2"),
    "negative interval": (dict(tick=dict(interval_ms=-10_000)), "interval_ms -10000 outside (0, 3600000]"),
    "huge interval": (dict(tick=dict(interval_ms=2**31 - 1)), "interval_ms 2147483647 outside"),
    "1970": (dict(tick=dict(ts=0)), "ts_ms 0 outside the accepted window"),
    "2100": (dict(tick=dict(ts=4_102_444_800_000)), "ts_ms 4102444800000 outside the accepted window"),
}


def _impossible_tick(change: dict, node: str) -> Tick:
    t = tick(node=node, gpu=f"GPU-{node}", **change.get("tick", {}))
    for k, v in change.get("gpu", {}).items():
        setattr(t.gpus[0], k, v)
    for k, v in change.get("slice", {}).items():
        setattr(t.slices[0], k, v)
    return t


@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_each_impossible_value_is_named(name):
    change, reason = IMPOSSIBLE[name]
    why = implausible(decode(encode_ticks([_impossible_tick(change, "n")])), Limits(), T0 + 60_000)
    assert why is not None and reason in why


def test_impossible_values_are_dead_letters_and_the_month_still_exports(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    good = [(f"good-{i}".encode(), encode_ticks([tick(node=f"good-{i}", gpu=f"GPU-good-{i}")]), None) for i in range(2)]
    bad = [(name.encode(), encode_ticks([_impossible_tick(change, f"bad-{i}")]), None)
           for i, (name, (change, _)) in enumerate(sorted(IMPOSSIBLE.items()))]
    repeated = tick(node="bad-repeat", gpu="GPU-bad-repeat")
    repeated.slices.append(repeated.slices[0])
    bad.append((b"repeated key", encode_ticks([repeated]), None))
    produce_raw(broker.bootstrap, good[:1] + bad + good[1:])
    db = tmp_path / "v.duckdb"
    ing = ingest(broker.bootstrap, db, clock_ms=lambda: T0 + 60_000)
    letters = dead_letters(ing)
    assert [o for o, _ in letters] == list(range(1, len(bad) + 1))
    for (_, error), (name, (_, reason)) in zip(letters, sorted(IMPOSSIBLE.items())):
        assert reason in error, (name, error)
    assert "repeated within the message" in letters[-1][1]
    assert ing.con.execute("SELECT DISTINCT node FROM raw_gpu ORDER BY 1").fetchall() == [("good-0",), ("good-1",)]
    ing.con.close()
    month = time.strftime("%Y-%m", time.gmtime(T0 / 1000))
    for command in (["export", "--db", str(db), "--month", month, "--out", str(tmp_path / "out")],
                    ["close", "--db", str(db), "--month", month]):
        done = subprocess.run([*SLICEMETER, *command], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    assert list((tmp_path / "out").iterdir())


# ---- duplicates -------------------------------------------------------------------------

def test_the_same_tick_sent_three_times_is_billed_once(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    once = encode_ticks([tick()])
    later = encode_ticks([tick(ts=T0 + 10_000)])
    produce_raw(broker.bootstrap, [(b"node-a", once, None)] * 3 + [(b"node-a", later, None)])
    db = tmp_path / "d.duckdb"
    ing = ingest(broker.bootstrap, db, clock_ms=lambda: T0 + 60_000)
    assert [e.split(":")[0] for _, e in dead_letters(ing)] == ["duplicate", "duplicate"]
    ing.con.close()
    produce_raw(broker.bootstrap, [(b"node-a", once, None)])   # resent after ingest restarted
    ing = ingest(broker.bootstrap, db, clock_ms=lambda: T0 + 60_000)
    assert len(dead_letters(ing)) == 3
    assert ing.con.execute("SELECT count(*) FROM raw_slice").fetchone() == (2,)
    assert ing.con.execute("SELECT sum(metered_s), sum(alloc_dominant_share_s) FROM slice_hour").fetchone() == (20, 5.0)


# ---- publishers, bindings ---------------------------------------------------------------

def _keys(tmp_path: Path) -> tuple[Path, bytes, bytes]:
    acme, beta = b"acme-secret-0123456789", b"beta-secret-0123456789"
    (tmp_path / "acme.key").write_bytes(acme + b"\n")
    (tmp_path / "beta.key").write_bytes(beta)
    config = tmp_path / "publishers.yaml"
    config.write_text("publishers:\n"
                      f"  - {{key_id: acme-1, key_file: acme.key, clusters: ['{ACME}']}}\n"
                      f"  - {{key_id: beta-1, key_file: beta.key, clusters: ['{BETA}']}}\n")
    return config, acme, beta


def signed(key_id: str, key: bytes, t: Tick) -> tuple[bytes, bytes, list]:
    value = encode_ticks([t])
    return t.node.encode(), value, signing.signed_headers(key_id, key, value)


def test_forged_cluster_and_stolen_gpu_are_dead_letters_until_an_operator_moves_it(broker, tmp_path):
    from slicemeter.ingest.trust import load_publishers

    config, acme, beta = _keys(tmp_path)
    publishers = load_publishers(config)
    create_topic(broker.bootstrap, partitions=1)
    forged_sig = signed("acme-1", acme, tick(node="node-a"))
    produce_raw(broker.bootstrap, [
        signed("acme-1", acme, tick(node="node-a", gpu="GPU-a0")),                       # 0 ok
        signed("beta-1", beta, tick(node="node-b", cluster=BETA, gpu="GPU-b0")),          # 1 ok
        signed("beta-1", beta, tick(node="node-b", cluster=ACME, gpu="GPU-b0", ts=T0 + 10_000)),  # 2 beta bills acme
        signed("beta-1", beta, tick(node="node-b", cluster=BETA, gpu="GPU-a0", ts=T0 + 20_000)),  # 3 acme's GPU
        signed("beta-1", beta, tick(node="node-a", cluster=BETA, gpu="GPU-new", ts=T0 + 30_000)), # 4 acme's node
        (b"node-a", encode_ticks([tick(ts=T0 + 40_000)]), None),                          # 5 unsigned
        (b"node-a", encode_ticks([tick(ts=T0 + 50_000)]), forged_sig[2]),                 # 6 signature of another value
        signed("acme-9", acme, tick(ts=T0 + 60_000)),                                     # 7 unknown key id
    ])
    db = tmp_path / "t.duckdb"
    ing = ingest(broker.bootstrap, db, publishers=publishers, clock_ms=lambda: T0 + 120_000)
    letters = dict(dead_letters(ing))
    assert sorted(letters) == [2, 3, 4, 5, 6, 7]
    assert "not one key id 'beta-1' may speak for" in letters[2]
    assert "gpu 'GPU-a0' belongs to cluster" in letters[3] and ACME in letters[3]
    assert "node 'node-a' belongs to cluster" in letters[4]
    assert "unsigned" in letters[5] and "bad signature" in letters[6] and "unknown signing key" in letters[7]
    assert ing.con.execute("SELECT cluster, count(*) FROM raw_gpu GROUP BY 1 ORDER BY 1").fetchall() == [(ACME, 1), (BETA, 1)]
    ing.con.close()

    # the GPU really moved to node-b: the operator moves its binding, and beta's Ticks for it count
    from slicemeter.store import connect
    con = connect(db)
    assert move_binding(con, "gpu", "GPU-a0", BETA) == ACME
    con.close()
    listed = subprocess.run([*SLICEMETER, "bindings", "list", "--db", str(db), "--cluster", BETA],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "gpu\tGPU-a0\t" + BETA in listed.stdout and f"moved from {ACME}" in listed.stdout
    produce_raw(broker.bootstrap, [signed("beta-1", beta, tick(node="node-b", cluster=BETA, gpu="GPU-a0", ts=T0 + 70_000))])
    ing = ingest(broker.bootstrap, db, publishers=publishers, clock_ms=lambda: T0 + 120_000)
    assert len(dead_letters(ing)) == 6
    assert ing.con.execute("SELECT cluster FROM raw_gpu WHERE ts_ms = ?", [T0 + 70_000]).fetchall() == [(BETA,)]


def test_a_cluster_spelt_another_way_is_still_its_keys_and_owns_its_gpus(broker, tmp_path):
    """The publishers file and the bindings compare clusters by cluster_key: a kubelet's
    other spelling of acme's address is acme (its key, its node, its GPU), and still not beta's."""
    from slicemeter.ingest.trust import load_publishers

    config, acme, beta = _keys(tmp_path)
    create_topic(broker.bootstrap, partitions=1)
    produce_raw(broker.bootstrap, [
        signed("acme-1", acme, tick(cluster=ACME)),                                        # 0 binds node-a, GPU-a0
        signed("acme-1", acme, tick(cluster="HTTPS://ACME.example.:6443/", ts=T0 + 10_000)),  # 1 acme, spelt otherwise
        signed("acme-1", acme, tick(cluster="https://acme.example", ts=T0 + 20_000)),     # 2 the default port left out
        signed("beta-1", beta, tick(cluster="https://ACME.example", ts=T0 + 30_000)),     # 3 beta speaking for acme
    ])
    ing = ingest(broker.bootstrap, tmp_path / "s.duckdb", publishers=load_publishers(config),
                 clock_ms=lambda: T0 + 120_000)
    letters = dead_letters(ing)
    assert [n for n, _ in letters] == [3] and "not one key id 'beta-1' may speak for" in letters[0][1]
    assert ing.con.execute("SELECT count(*) FROM raw_gpu").fetchall() == [(3,)]


# ---- a replaced broker ------------------------------------------------------------------

@pytest.mark.parametrize("after", [3, 8], ids=["new log shorter", "new log longer"])
def test_a_replaced_broker_is_detected_and_its_new_log_read_from_the_start(tmp_path, after):
    db = tmp_path / "r.duckdb"
    with TansuBroker(log_path=tmp_path / "tansu1.log") as first:
        port = first.port
        create_topic(first.bootstrap, partitions=1)
        produce_raw(first.bootstrap, [(b"node-a", encode_ticks([tick(ts=T0 + 10_000 * i)]), None) for i in range(5)])
        ing = ingest(first.bootstrap, db, clock_ms=lambda: T0 + 600_000)
        assert ing.con.execute("SELECT next_offset FROM ingest_offsets").fetchall() == [(5,)]
        ing.con.close()
    with TansuBroker(port=port, log_path=tmp_path / "tansu2.log") as second:   # memory storage: a new, empty log
        create_topic(second.bootstrap, partitions=1)
        produce_raw(second.bootstrap, [(b"node-a", encode_ticks([tick(ts=T0 + 10_000 * (5 + i))]), None)
                                   for i in range(after)])
        ing = ingest(second.bootstrap, db, clock_ms=lambda: T0 + 600_000)
    assert ing.con.execute("SELECT count(*) FROM raw_gpu").fetchone() == (5 + after,)
    assert ing.con.execute("SELECT next_offset FROM ingest_offsets").fetchall() == [(after,)]
    events = ing.con.execute("SELECT stored, resumed_at, reason FROM ingest_offset_events").fetchall()
    assert [(e[0], e[1]) for e in events] == [(5, 0)]
    assert ing.metrics.offset_resets.labels(partition="0", reason="log_replaced")._value.get() == 1
    assert not dead_letters(ing)


# ---- the exporter's publisher -----------------------------------------------------------

def test_a_tick_the_broker_refuses_does_not_block_the_ones_behind_it(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    spool = Spool(str(tmp_path / "spool"))
    pub = Publisher(spool, TOPIC, "node-a", lambda: kafka_producer(broker.bootstrap, max_request_size=64 << 10))
    big = tick(ts=T0 + 10_000)
    big.slices = [SliceReading(f"uid-{i}", f"c{i}", "GPU-a0", pod=f"pod-{i:05d}-" + "x" * 40, namespace="ml")
                  for i in range(3000)]
    payloads = [encode_ticks([t]) for t in (tick(ts=T0), big, tick(ts=T0 + 20_000))]
    assert len(payloads[1]) > 64 << 10 > len(payloads[0])
    for p in payloads:
        pub.submit(p)
    pub.start()
    try:
        deadline = time.monotonic() + 60
        while pub.stats()["published"] < 2:
            assert time.monotonic() < deadline, pub.stats()
            time.sleep(0.05)
    finally:
        pub.stop()
    assert pub.stats() | {"bytes": 0} == {"ticks": 0, "bytes": 0, "dropped": 0, "refused": 1, "published": 2}
    assert [f.read_bytes() for f in (tmp_path / "spool" / "refused").iterdir()] == [payloads[1]]
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = TopicPartition(TOPIC, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = [r.value for r in c]
    c.close()
    assert got == [payloads[0], payloads[2]]


# ---- authenticated end to end -----------------------------------------------------------

SCENARIO = f"""
tenants:
  - {{name: acme, display_name: ACME, kamaji: {{namespace: t-acme, name: acme}}, api_server: "{ACME}", cost_center: C1}}
nodes:
  - name: node-a
    tenant: acme
    gpus: [{{model: "NVIDIA L4", count: 1}}]
    pods:
      - name: web
        namespace: serving
        containers:
          - name: server
            resources: {{nvidia.com/gpumem: 4096, nvidia.com/gpucores: 30}}
            workload: {{pattern: steady-training, level: 0.5}}
"""


def _run_exporter(tmp_path: Path, bootstrap: str, key_file: Path, name: str, ticks: int) -> None:
    """The exporter CLI, signing with `key_file`, until the topic holds `ticks` Ticks."""
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    log = tmp_path / f"{name}.log"
    proc = subprocess.Popen([*SLICEMETER, "--log-level", "DEBUG", "exporter", "--simulate", str(scenario),
                             "--node", "node-a", "--kafka", bootstrap, "--port", "0", "--interval", "0.2",
                             "--hami-dir", str(tmp_path / f"hami-{name}"), "--spool-dir", str(tmp_path / f"spool-{name}"),
                             "--signing-key-file", str(key_file), "--signing-key-id", "acme-1"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=500)
        deadline = time.monotonic() + 60
        while not c.partitions_for_topic(TOPIC):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.1)
        tps = [TopicPartition(TOPIC, p) for p in c.partitions_for_topic(TOPIC)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        seen = 0
        while seen < ticks:
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-2000:]
            seen += sum(len(v) for v in c.poll(timeout_ms=200).values())
        c.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_signed_end_to_end_and_a_wrong_key_refused(broker, tmp_path):
    from slicemeter.ingest.trust import load_publishers

    config, _, _ = _keys(tmp_path)
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(b"not-acme-secret-0123456789")
    publishers = load_publishers(config)
    _run_exporter(tmp_path, broker.bootstrap, tmp_path / "acme.key", "right", 3)
    ing = ingest(broker.bootstrap, tmp_path / "e.duckdb", publishers=publishers)
    stored = ing.con.execute("SELECT count(*), min(cluster), max(cluster) FROM raw_gpu").fetchone()
    assert stored[0] >= 3 and stored[1:] == (ACME, ACME)
    assert not dead_letters(ing)
    sent = ing.con.execute("SELECT next_offset FROM ingest_offsets").fetchone()[0]
    ing.con.close()
    _run_exporter(tmp_path, broker.bootstrap, wrong, "wrong", sent + 3)
    ing = ingest(broker.bootstrap, tmp_path / "e.duckdb", publishers=publishers)
    letters = dead_letters(ing)
    assert len(letters) >= 3 and all("bad signature for key id 'acme-1'" in e for _, e in letters)
    assert ing.con.execute("SELECT count(*) FROM raw_gpu").fetchone()[0] == stored[0]


def test_an_authenticating_broker_refuses_a_wrong_credential(tmp_path, caplog):
    """SCRAM against Tansu with --authentication: the exchange runs and the broker refuses
    the user (its server-final message is an error, which kafka-python 3.0.12 takes for a
    lost connection); the Tick stays spooled, nothing is lost."""
    password = tmp_path / "password"
    password.write_text("not-the-password\n")
    with TansuBroker(authentication=True, log_path=tmp_path / "tansu.log") as b:
        from argparse import Namespace

        from slicemeter import kafka_security
        security = kafka_security.settings(Namespace(
            kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism="SCRAM-SHA-512", kafka_username="acme",
            kafka_password_file=str(password), kafka_ca_file=None, kafka_cert_file=None, kafka_key_file=None))
        errors: list[Exception] = []
        spool = Spool(str(tmp_path / "spool"))
        pub = Publisher(spool, TOPIC, "node-a", lambda: kafka_producer(b.bootstrap, security), on_error=errors.append,
                        send_timeout_s=5)
        pub.submit(encode_ticks([tick()]))
        pub.start()
        try:
            deadline = time.monotonic() + 60
            while not errors:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            pub.stop()
    assert pub.stats()["ticks"] == 1 and pub.stats()["published"] == 0 and pub.stats()["refused"] == 0
    assert any(r.name.startswith("kafka.net.sasl") for r in caplog.records)   # the SCRAM exchange ran
    assert list((tmp_path / "spool").glob("*.tick"))


def test_in_a_group_a_refused_batch_is_read_again_from_its_first_message(broker, tmp_path):
    """No stored offset yet (the group's start): the batch with a bad message is read again
    from its own first message, not from wherever the client had got to."""
    create_topic(broker.bootstrap, partitions=2)
    produce_raw(broker.bootstrap, [(f"n{i}".encode(), encode_ticks([tick(node=f"n{i}", gpu=f"GPU-n{i}",
                                                                     interval_ms=-1 if i == 3 else 10_000)]), None)
                               for i in range(8)])
    ing = Ingestor(IngestConfig(bootstrap=broker.bootstrap, db=tmp_path / "g.duckdb", group="g", until_idle_s=8,
                                session_timeout_ms=6000, heartbeat_interval_ms=2000, clock_ms=lambda: T0 + 60_000))
    ing.run()
    assert [e for _, e in dead_letters(ing)] == ["gpu.interval_ms -1 outside (0, 3600000]"]
    nodes = [n for (n,) in ing.con.execute("SELECT DISTINCT node FROM raw_gpu ORDER BY 1").fetchall()]
    assert nodes == [f"n{i}" for i in range(8) if i != 3]
