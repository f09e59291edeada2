"""HAMi region files, byte by byte at the documented offsets (testkit/hami_reader.py)."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from slicemeter.testkit.hami_reader import V0_FILE_SIZE, V1_FILE_SIZE, read_region
from slicemeter.simulator.hami_region import V0, V1, ProcSlot, RegionState, RegionWriter
from slicemeter.common import GiB, MiB
from slicemeter.simulator.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent


def _state(n_procs: int = 2, sm: int = 30) -> RegionState:
    return RegionState(
        uuids=["GPU-aaaaaaaa-0000-0000-0000-000000000001", "GPU-bbbbbbbb-0000-0000-0000-000000000002"],
        limits=[10 * GiB, 12 * GiB],
        sm_limits=[25, 40],
        procs=[ProcSlot(pid=7 + i, hostpid=4000 + i, used=[(300 * MiB, 60 * MiB, (i + 1) * GiB), (0, 0, 0)],
                        monitorused=[(i + 1) * GiB + 360 * MiB, 0], sm_util=[sm + i, 0]) for i in range(n_procs)],
        owner_pid=7,
        last_kernel_time=1_790_000_000,
        recent_kernel=2,
    )


@pytest.mark.parametrize("layout", [V1, V0], ids=["v1", "v0"])
def test_region_fields_at_documented_offsets(tmp_path, layout):
    path = tmp_path / "r.cache"
    RegionWriter(path, layout).write(_state())
    data = path.read_bytes()
    assert len(data) == (V1_FILE_SIZE if layout is V1 else V0_FILE_SIZE)
    assert struct.unpack_from("<i", data, 0)[0] == 19920718
    r = read_region(data)
    assert r["layout"] == layout.name
    if layout is V1:
        assert r["version"] == (1, 2)
        assert r["last_kernel_time"] == 1_790_000_000
    assert r["device_num"] == 2 and r["sm_init_flag"] == 1 and r["owner_pid"] == 7
    assert r["uuids"] == ["GPU-aaaaaaaa-0000-0000-0000-000000000001", "GPU-bbbbbbbb-0000-0000-0000-000000000002"]
    assert r["limit"][:3] == [10 * GiB, 12 * GiB, 0] and r["sm_limit"][:3] == [25, 40, 0]
    assert (r["proc_num"], r["utilization_switch"], r["recent_kernel"], r["priority"]) == (2, 1, 2, 1)
    p0, p1 = r["procs"]
    assert (p0["pid"], p0["hostpid"], p0["status"]) == (7, 4000, 1)
    assert (p1["pid"], p1["hostpid"]) == (8, 4001)
    assert p1["used"][0] == {"context": 300 * MiB, "module": 60 * MiB, "data": 2 * GiB, "offset": 0,
                             "total": 360 * MiB + 2 * GiB}
    assert p1["used"][1]["total"] == 0
    assert p1["monitorused"] == [2 * GiB + 360 * MiB, 0]
    assert p0["sm_util"] == [30, 0] and p1["sm_util"] == [31, 0]
    if layout is V1:
        assert p0["seqlock"] % 2 == 0 and p0["seqlock"] > 0
    # the slot after the live ones is empty
    o = layout.procs + 2 * layout.slot_size
    assert data[o:o + layout.slot_size] == bytes(layout.slot_size)


def test_update_in_place_bumps_seqlock_and_clears_exited_slots(tmp_path):
    path = tmp_path / "r.cache"
    w = RegionWriter(path, V1)
    w.write(_state(n_procs=2, sm=30))
    ino = os.stat(path).st_ino
    before = read_region(path.read_bytes())
    w.write(_state(n_procs=1, sm=55))                 # one process left, busier
    after = read_region(path.read_bytes())
    assert os.stat(path).st_ino == ino, "updated in place, not replaced"
    assert after["proc_num"] == 1 and after["procs"][0]["sm_util"][0] == 55
    assert after["procs"][0]["seqlock"] == before["procs"][0]["seqlock"] + 2   # odd during the write, even after
    data = path.read_bytes()
    o = V1.procs + V1.slot_size
    assert data[o:o + V1.slot_size] == bytes(V1.slot_size)
    # an unchanged slot is not rewritten: its seqlock stays
    w.write(_state(n_procs=1, sm=55))
    assert read_region(path.read_bytes())["procs"][0]["seqlock"] == after["procs"][0]["seqlock"]


def test_writer_recovers_a_wrong_sized_file(tmp_path):
    path = tmp_path / "r.cache"
    path.write_bytes(b"garbage")
    RegionWriter(path, V1).write(_state())
    assert read_region(path.read_bytes())["proc_num"] == 2


def test_simulate_cli_writes_the_regions_the_demo_scenario_implies(tmp_path):
    hami, pods_dir = tmp_path / "hami", tmp_path / "pods"
    res = subprocess.run(
        [str(Path(sys.executable).parent / "slicemeter"), "simulate", "--scenario", str(REPO / "examples/demo.yaml"),
         "--hami-dir", str(hami), "--pods-dir", str(pods_dir), "--ticks", "3", "--start", "2026-11-02T14:00:00Z"],
        capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    scenario = load_scenario(REPO / "examples/demo.yaml")
    v1_files = 0
    for node in scenario.nodes:
        pods = json.loads((pods_dir / f"{node.name}.json").read_text())
        assert pods["kind"] == "PodList"
        gpus = {g.uuid: g for g in node.gpus}
        seen = set()
        for pod in pods["items"]:
            alloc = pod["metadata"]["annotations"].get("hami.io/vgpu-devices-allocated")
            if not alloc:
                continue
            assert pod["metadata"]["annotations"]["hami.io/vgpu-node"] == node.name
            spec = next(p for p in node.pods if pod["metadata"]["name"].startswith(p.name))
            entries = alloc.split(";")[:-1]          # `;` after every entry
            inits = pod["spec"].get("initContainers", [])
            # HAMi >= 2.9 (the default): one entry per init container first; 2.8: containers only
            if node.hami_version == "2.8":
                assert len(entries) == len(pod["spec"]["containers"])
            else:
                assert len(entries) == len(inits) + len(pod["spec"]["containers"])
                entries = entries[len(inits):]
            for c, entry in zip(pod["spec"]["containers"], entries):
                c_spec = next(x for x in spec.containers if x.name == c["name"])
                if not c_spec.has_gpu:
                    assert entry == ""
                    continue
                d = hami / node.name / "containers" / f"{pod['metadata']['uid']}_{c['name']}"
                files = list(d.glob("*.cache"))
                assert len(files) == 1, d
                data = files[0].read_bytes()
                assert len(data) == (V1_FILE_SIZE if node.layout == "v1" else V0_FILE_SIZE)
                assert struct.unpack_from("<i", data, 0)[0] == 19920718
                v1_files += node.layout == "v1"
                r = read_region(data)
                devs = [x.split(",") for x in entry.split(":") if x]
                assert r["uuids"] == [x[0] for x in devs] and all(u in gpus for u in r["uuids"])
                assert r["limit"][: len(devs)] == [int(x[2]) * MiB for x in devs]
                # HAMi-core stores 100 where the pod has no core limit (gpucores 0)
                assert r["sm_limit"][: len(devs)] == [int(x[3]) or 100 for x in devs]
                assert r["proc_num"] == c_spec.processes
                assert all(p["status"] == 1 and p["hostpid"] > 0 for p in r["procs"])
                if node.layout == "v1":
                    assert all(p["seqlock"] % 2 == 0 for p in r["procs"])
                for i in range(len(devs)):
                    used = sum(p["used"][i]["total"] for p in r["procs"])
                    assert 0 < used <= r["limit"][i]
                seen.add(d.name)
        on_disk = {p.name for p in (hami / node.name / "containers").glob("*")}   # none on a DRA-only node
        assert on_disk == seen, "every region directory belongs to a live pod container"
    assert v1_files >= 10
