"""Fuzz the HAMi reader: >= 10,000 mutated and truncated regions, no exception escapes and
nothing outside physical bounds is reported (HAMi's own monitor crashes on these)."""
from __future__ import annotations

import os
import random
import re
import struct

from slicemeter.exporter.sources.hami import LAYOUT_V0, LAYOUT_V1, Region, RegionError, parse_region
from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.exporter.sources.pods import PodCache
from slicemeter.exporter.assemble.tick_builder import TickBuilder
from slicemeter.testkit.hami_bytes import MiB, Proc, build_region

GPUS = ["GPU-11111111-2222-3333-4444-555555555555", "GPU-11111111-2222-3333-4444-666666666666"]
DEV_MEM = {g: 80 * 1024 * MiB for g in GPUS}
NOW = 1_795_000_000
UUID_OK = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+$")


def seed_region(layout):
    procs = [Proc(pid=10 + i, hostpid=5000 + i, mem=[(300 * MiB, 10 * MiB, (i + 1) * 100 * MiB), (MiB, 0, MiB)],
                  sm_util=[10 + i, 5], seq=2 * i) for i in range(6)]
    return build_region(layout, devices=[(GPUS[0], 20480 * MiB, 30), (GPUS[1], 8192 * MiB, 50)], procs=procs,
                        last_kernel_time=NOW - 5)


def _fields(lay):
    """Offsets worth hitting: every header field, the tail, the first slots' fields."""
    offs = [0, 4, 8, 12, 16, lay.num_off, lay.uuids_off, lay.uuids_off + 96, lay.limit_off, lay.limit_off + 8,
            lay.sm_limit_off, lay.sm_limit_off + 8, lay.tail_off, lay.tail_off + 4, lay.tail_off + 16]
    for i in range(6):
        b = lay.procs_off + i * lay.slot_size
        offs += [b, b + 4, b + 8, b + 16, b + 24, b + 32, b + lay.monitor_off, b + lay.util_off + 16, b + lay.status_off]
        if lay.seq_off is not None:
            offs.append(b + lay.seq_off)
    return offs


def mutate(rng, buf, lay, fields):
    """Apply one random mutation in place; return [(offset, original bytes)] to undo it."""
    kind = rng.randrange(9)
    if kind == 0:   # random bytes anywhere in the parts we read
        off = rng.choice([rng.randrange(0, lay.header_len), rng.randrange(lay.procs_off, lay.procs_off + 6 * lay.slot_size),
                          rng.randrange(lay.tail_off, lay.tail_off + 24)])
        data = rng.randbytes(rng.randint(1, 64))
    elif kind == 1:   # huge / negative proc_num
        off, data = lay.tail_off, struct.pack("<i", rng.choice([1025, 2**31 - 1, -1, -2**31, rng.randint(-2**31, 2**31 - 1), 7]))
    elif kind == 2:   # device_num anything
        off, data = lay.num_off, struct.pack("<Q", rng.choice([17, 2**64 - 1, rng.getrandbits(64), 3, 0]))
    elif kind == 3:   # negative values in signed and unsigned fields
        off = rng.choice(fields)
        data = rng.choice([struct.pack("<i", -1), struct.pack("<q", -rng.randint(1, 2**62)), b"\xff" * 8, struct.pack("<i", -2**31)])
    elif kind == 4:   # non-UTF-8 / non-ASCII / unterminated UUIDs
        off = lay.uuids_off + 96 * rng.randrange(2) + rng.randrange(0, 40)
        data = rng.choice([b"\xff\xfe\xfd", "GPU-é".encode(), rng.randbytes(96 - (off - lay.uuids_off) % 96), b"MIG-\x80\x81"])
    elif kind == 5:   # wrong magic
        off, data = 0, struct.pack("<i", rng.choice([0, 19920719, -19920718, rng.getrandbits(31)]))
    elif kind == 6:   # odd seqlock (writer stuck mid-write) or wrong version
        off = lay.procs_off + lay.seq_off if lay.seq_off is not None else 4
        data = struct.pack("<Q", rng.getrandbits(64) | 1)
    elif kind == 7:   # memory values beyond the device
        off = rng.choice(fields)
        data = struct.pack("<Q", rng.choice([81 * 1024**3, 2**63, 2**64 - 1, 1 << 40]))
    else:   # several mutations at once
        undo = []
        for _ in range(rng.randint(2, 5)):
            undo += mutate(rng, buf, lay, fields)
        return undo
    data = data[: len(buf) - off]
    undo = [(off, bytes(buf[off : off + len(data)]))]
    buf[off : off + len(data)] = data
    return undo


def assert_bounded(r: Region, dev_mem) -> None:
    assert 0 <= r.device_num <= 16 and 0 <= r.proc_num <= 1024
    assert len(r.devices) + len(r.device_errors) == r.device_num
    assert {d.index for d in r.devices}.isdisjoint(i for i, _ in r.device_errors)
    assert all(0 <= i < r.proc_num for i in r.stuck_slots)
    assert r.last_kernel_time is None or 0 < r.last_kernel_time <= NOW + 300
    for d in r.devices:
        cap = dev_mem.get(d.uuid, 1 << 40)
        assert UUID_OK.match(d.uuid) and d.uuid.isascii()
        assert d.limit_bytes is None or 0 < d.limit_bytes <= cap
        assert d.sm_limit_pct is None or 0 < d.sm_limit_pct <= 100
        assert 0 <= d.used_bytes <= cap and min(d.context_bytes, d.module_bytes, d.buffer_bytes) >= 0
        assert 0 <= d.sm_util_pct <= 100 and 0 <= d.processes <= r.proc_num
    for p in r.procs:
        assert p.pid >= 0 and p.hostpid >= 0 and p.status > 0


def test_fuzz_10000_regions():
    rng = random.Random(20261129)
    outcomes = {"ok": 0}
    n = 0
    for lay in (LAYOUT_V1, LAYOUT_V0):
        buf = seed_region(lay)
        fields = _fields(lay)
        for _ in range(6000):
            undo = mutate(rng, buf, lay, fields)
            # truncation (and over-long files) without copying 2 MB per case
            size = len(buf) if rng.random() < 0.7 else rng.choice([0, 3, 11, 100, lay.header_len, lay.tail_off, len(buf) - 1,
                                                                   rng.randrange(len(buf)), len(buf) + rng.randint(1, 9000)])
            visible = min(size, len(buf))
            r = parse_region(lambda off, k: bytes(buf[off : min(off + k, visible)]), size, DEV_MEM, now_s=NOW)
            n += 1
            if isinstance(r, Region):
                assert_bounded(r, DEV_MEM)
                outcomes["ok"] += 1
                for _, err in r.device_errors:   # a bad device costs that device
                    outcomes["device:" + err.reason] = outcomes.get("device:" + err.reason, 0) + 1
                if r.stuck_slots:                # a slot stuck odd costs that slot
                    outcomes["slot:stuck"] = outcomes.get("slot:stuck", 0) + 1
            else:
                assert isinstance(r, RegionError) and r.reason and r.detail
                outcomes[r.reason] = outcomes.get(r.reason, 0) + 1
            for off, old in reversed(undo):
                buf[off : off + len(old)] = old
    assert n >= 10_000
    # the fuzzer really reached both sides and most rejection paths
    assert outcomes["ok"] > 500
    for reason in ("bad_magic", "bad_proc_num", "bad_device_num", "bad_value", "truncated", "bad_size",
                   "device:bad_uuid", "device:bad_value", "slot:stuck"):
        assert outcomes.get(reason, 0) > 0, (reason, outcomes)


class _OneGpuNvml:
    """Minimal pynvml stand-in (the GPU is the one thing tests may fake): two GPUs, no processes."""

    class _Mem:
        total, used = 80 * 1024 * MiB, 10 * 1024 * MiB

    class _Util:
        gpu, memory = 40, 20

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return GPUS[h]

    def nvmlDeviceGetName(self, h):
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._Mem()

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._Util()

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return []


def test_fuzz_files_through_the_builder(tmp_path):
    """Mutated files, links and junk names in a HAMi dir: the Tick stays within physical bounds."""
    rng = random.Random(7)
    hami_dir = tmp_path / "hami"
    uid = "6f1c2a4e-9b7d-4c3e-8a21-0d9e8f7a6b5c"
    names = [f"{uid}_c{i}" for i in range(4)]
    paths = []
    for i, name in enumerate(names):
        d = hami_dir / "containers" / name
        d.mkdir(parents=True)
        p = d / "vgpu.cache"
        p.write_bytes(bytes(seed_region(LAYOUT_V1 if i % 2 == 0 else LAYOUT_V0)))
        paths.append(p)
    secret = tmp_path / "secret.cache"
    secret.write_bytes(bytes(seed_region(LAYOUT_V1)))
    (hami_dir / "containers" / f"{uid}_linked").mkdir()
    (hami_dir / "containers" / f"{uid}_linked" / "vgpu.cache").symlink_to(secret)
    (hami_dir / "containers" / f"{uid}_dirlink").symlink_to(tmp_path)
    (hami_dir / "containers" / "not-a-pod_x").mkdir()
    pods = {"items": [{"metadata": {"uid": uid, "name": "p", "namespace": "n"},
                       "spec": {"containers": [{"name": n.split("_")[1]} for n in names + [f"{uid}_linked"]]},
                       "status": {"phase": "Running"}}]}
    cache = PodCache(lambda: pods)
    cache.refresh()
    builder = TickBuilder("n1", "c", NvmlReader(_OneGpuNvml(), initialised=True), str(hami_dir), cache, proc_root=None)
    ok_slices = 0
    for _ in range(300):
        p = paths[rng.randrange(len(paths))]
        lay = LAYOUT_V1 if paths.index(p) % 2 == 0 else LAYOUT_V0
        fd = os.open(p, os.O_RDWR)
        try:
            region = bytearray(os.pread(fd, lay.procs_off + 6 * lay.slot_size, 0))
            tail = os.pread(fd, 24, lay.tail_off)
            work = bytearray(lay.size)
            work[: len(region)] = region
            work[lay.tail_off : lay.tail_off + 24] = tail
            undo = mutate(rng, work, lay, _fields(lay))
            for off, _old in undo:
                os.pwrite(fd, bytes(work[off : off + len(_old)]), off)
            res = builder.build(NOW * 1000)
            for off, old in undo:
                os.pwrite(fd, old, off)
        finally:
            os.close(fd)
        assert {e.reason for *_, e in res.region_errors} >= {"symlink", "bad_name"}
        for s in res.tick.slices:
            assert s.gpu_uuid in GPUS
            if s.hami_memory_used_bytes is not None:
                assert 0 <= s.hami_memory_used_bytes <= 80 * 1024 * MiB
                ok_slices += s.source == "hami"
            assert s.sm_util_ratio is None or 0.0 <= s.sm_util_ratio <= 1.0
            assert s.sm_limit_ratio is None or 0.0 < s.sm_limit_ratio <= 1.0
            assert s.last_kernel_age_s is None or s.last_kernel_age_s >= 0
            assert s.container != "linked" or s.source != "hami"   # never read through the link
    assert ok_slices > 0
