"""A tiny HAMi shared-region reader for tests, written from the documented offsets
(HAMi-core's shared_region_t for v1; HAMi's pkg/monitor/nvidia/v0/spec.go with x86-64 alignment for v0),
independent of the simulator's writer and of the exporter's reader."""
from __future__ import annotations

import struct

V1_SIZE = 2_008_952
# HAMi-core writes one byte at offset sizeof when it creates the file
V1_FILE_SIZE = V1_SIZE + 1
V0_FILE_SIZE = 1_197_897

# name: (sm_init, owner, devnum, uuids, limit, sm_limit, procs, slot, used_stride, monitorused,
#        device_util, util_stride, status, seqlock, proc_num, last_kernel_time)
OFFSETS = {
    "v1": dict(sm_init=12, owner=16, devnum=56, uuids=64, limit=1600, sm_limit=1728, procs=1856, slot=1960,
               used_stride=64, monitorused=1032, device_util=1160, util_stride=48, status=1928, seqlock=1936,
               proc_num=2_008_896, last_kernel_time=2_008_912),
    "v0": dict(sm_init=4, owner=8, devnum=48, uuids=56, limit=1592, sm_limit=1720, procs=1848, slot=1168,
               used_stride=40, monitorused=648, device_util=776, util_stride=24, status=1160, seqlock=None,
               proc_num=1_197_880, last_kernel_time=None),
}


def u64(b: bytes, off: int) -> int:
    return struct.unpack_from("<Q", b, off)[0]


def i32(b: bytes, off: int) -> int:
    return struct.unpack_from("<i", b, off)[0]


def read_region(data: bytes) -> dict:
    assert i32(data, 0) == 19920718, "magic"
    if len(data) == V0_FILE_SIZE:
        layout = "v0"
    else:
        assert len(data) == V1_FILE_SIZE and struct.unpack_from("<I", data, 4)[0] == 1
        layout = "v1"
    o = OFFSETS[layout]
    n = u64(data, o["devnum"])
    out = {
        "layout": layout,
        "version": struct.unpack_from("<II", data, 4) if layout == "v1" else None,
        "sm_init_flag": i32(data, o["sm_init"]),
        "owner_pid": u64(data, o["owner"]),
        "device_num": n,
        "uuids": [data[o["uuids"] + 96 * i: o["uuids"] + 96 * (i + 1)].split(b"\0")[0].decode() for i in range(n)],
        "limit": [u64(data, o["limit"] + 8 * i) for i in range(16)],
        "sm_limit": [u64(data, o["sm_limit"] + 8 * i) for i in range(16)],
        "proc_num": i32(data, o["proc_num"]),
        "utilization_switch": i32(data, o["proc_num"] + 4),
        "recent_kernel": i32(data, o["proc_num"] + 8),
        "priority": i32(data, o["proc_num"] + 12),
        "last_kernel_time": struct.unpack_from("<q", data, o["last_kernel_time"])[0] if o["last_kernel_time"] else None,
        "procs": [],
    }
    for i in range(out["proc_num"]):
        base = o["procs"] + i * o["slot"]
        slot = {
            "pid": i32(data, base), "hostpid": i32(data, base + 4),
            "status": i32(data, base + o["status"]),
            "seqlock": u64(data, base + o["seqlock"]) if o["seqlock"] else None,
            "used": [], "monitorused": [], "sm_util": [],
        }
        for d in range(n):
            u = base + 8 + d * o["used_stride"]
            slot["used"].append({"context": u64(data, u), "module": u64(data, u + 8), "data": u64(data, u + 16),
                                 "offset": u64(data, u + 24), "total": u64(data, u + 32)})
            slot["monitorused"].append(u64(data, base + o["monitorused"] + 8 * d))
            slot["sm_util"].append(u64(data, base + o["device_util"] + d * o["util_stride"] + 16))
        out["procs"].append(slot)
    return out
