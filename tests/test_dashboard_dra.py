"""The GPUs and Waste pages name how a slice was granted: the DRA driver and the ResourceClaim,
"device plugin" for HAMi's annotation; a device no reader measures says so instead of 0 %.
Rollups are written here directly (as ingest would keep them), on the generated fleet."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from slicemeter.dashboard import fmt
from slicemeter.testkit.dashboard_app import metric, run_app
from slicemeter.testkit.fleet_fixture import build_fleet_db

HAMI = "hami-core-gpu.project-hami.io"
ASCEND = "ascend.project-hami.io"
DRA_GPU = "GPU-d4a00000-0000-4000-8000-000000000001"
NPU = "gpu-node-dra-0"
NOV = "hour >= TIMESTAMP '2026-11-01' AND hour < TIMESTAMP '2026-12-01'"


@pytest.fixture(scope="module")
def dra_db(tmp_path_factory) -> Path:
    db = build_fleet_db(tmp_path_factory.mktemp("dra") / "fleet.duckdb", "2026-11", days=3)
    con = duckdb.connect(str(db))
    try:
        # a GPU of HAMi's DRA driver and an NPU of its Ascend driver (no NVML readings),
        # hour by hour beside the fleet's first GPU
        first = "(SELECT min(gpu_uuid) FROM gpu_hour)"
        con.execute(f"""INSERT INTO gpu_hour BY NAME SELECT * REPLACE (
            '{DRA_GPU}' AS gpu_uuid, 'gpu-node-dra' AS node, '{HAMI}' AS driver) FROM gpu_hour WHERE gpu_uuid = {first}""")
        con.execute(f"""INSERT INTO gpu_hour BY NAME SELECT * REPLACE (
            '{NPU}' AS gpu_uuid, 'gpu-node-dra' AS node, '910B3' AS model, '{ASCEND}' AS driver,
            NULL AS sm_util_s, NULL AS memory_used_byte_s, NULL AS energy_joules)
            FROM gpu_hour WHERE gpu_uuid = {first}""")
        # on the DRA GPU: a claim's slice and a device-plugin slice; on the NPU: a claim's
        for pod, gpu, claim, driver, like in (("train", DRA_GPU, "train-trainer-x7k2p", HAMI, "embed-0"),
                                              ("legacy", DRA_GPU, None, None, "embed-1"),
                                              ("npu-job", NPU, "npu-job-app-s89sl", ASCEND, "embed-2")):
            con.execute("""INSERT INTO slice_hour BY NAME SELECT * REPLACE (
                ? AS gpu_uuid, 'gpu-node-dra' AS node, ? AS pod, ? || '-uid' AS pod_uid, ?::VARCHAR AS claim,
                ?::VARCHAR AS driver) FROM slice_hour WHERE pod = ?""", [gpu, pod, pod, claim, driver, like])
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return db


def _pick(at, uuid: str):
    label = f"gpu-node-dra · {uuid[4:12]}"
    assert label in at.selectbox(key="gpu_pick").options
    at.selectbox(key="gpu_pick").set_value(label).run()
    assert not at.exception, at.exception


def _table(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns and "pod" in d.value.columns)


def test_gpus_page_shows_each_slices_driver_and_claim(dra_db, monkeypatch):
    at = run_app(dra_db, monkeypatch, "gpus")
    gpus = next(d.value for d in at.dataframe if "max_slices" in d.value.columns).set_index("gpu")
    drivers = {label.split(" · ")[1]: d for label, d in gpus["driver"].items() if label.startswith("gpu-node-dra")}
    assert drivers == {DRA_GPU[4:12]: HAMI, NPU[4:12]: ASCEND}
    assert set(gpus[~gpus.index.str.startswith("gpu-node-dra")]["driver"]) == {"device plugin"}
    _pick(at, DRA_GPU)
    slices = _table(at, "driver").set_index("pod")
    assert slices.loc["train", ["driver", "claim"]].tolist() == [HAMI, "train-trainer-x7k2p"]
    assert slices.loc["legacy", "driver"] == "device plugin" and slices.loc["legacy", "claim"] == ""   # blank, not None
    con = duckdb.connect(str(dra_db), read_only=True)
    used = con.execute(f"SELECT sum(sm_util_s) / sum(metered_s) FROM gpu_hour WHERE gpu_uuid = ? AND {NOV}",
                       [DRA_GPU]).fetchone()[0]
    con.close()
    assert metric(at, "SM utilization") == fmt.pct(used)


def test_a_device_without_a_reader_says_so_instead_of_zero(dra_db, monkeypatch):
    at = run_app(dra_db, monkeypatch, "gpus")
    _pick(at, NPU)
    assert metric(at, "SM utilization") == "no reader"
    assert any("No usage reader" in i.value and ASCEND in i.value for i in at.info)
    slices = _table(at, "claim").set_index("pod")
    assert slices.loc["npu-job", ["driver", "claim"]].tolist() == [ASCEND, "npu-job-app-s89sl"]


def test_waste_page_lists_the_driver_and_claim_of_a_slice(dra_db, monkeypatch):
    at = run_app(dra_db, monkeypatch, "waste")
    at.slider(key="waste_top").set_value(50).run()    # the fixture's slices all fit in the longest list
    assert not at.exception, at.exception
    waste = next(d.value for d in at.dataframe if "unused_gpu_h" in d.value.columns)
    rows = waste[waste["node"] == "gpu-node-dra"].set_index("pod")
    assert rows.loc["train", ["driver", "claim"]].tolist() == [HAMI, "train-trainer-x7k2p"]
    assert rows.loc["legacy", "driver"] == "device plugin"
