"""Build HAMi region bytes for tests from the layout description (independent of the simulator)."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from exporter.hami import LAYOUT_V0, LAYOUT_V1, MAGIC, Layout

MiB = 1 << 20


@dataclass
class Proc:
    pid: int
    hostpid: int
    mem: list[tuple[int, int, int]]          # per device (context, module, buffer) bytes
    sm_util: list[int] = field(default_factory=list)
    status: int = 1
    seq: int = 0


def build_region(
    layout: Layout = LAYOUT_V1,
    devices: list[tuple[str, int, int]] = (),   # (uuid, limit bytes, sm_limit %)
    procs: list[Proc] = (),
    proc_num: int | None = None,
    last_kernel_time: int = 0,
    major: int = 1,
    minor: int = 2,
    size: int | None = None,
) -> bytearray:
    buf = bytearray(layout.size if size is None else size)
    struct.pack_into("<i", buf, 0, MAGIC)
    if layout.has_version:
        struct.pack_into("<II", buf, 4, major, minor)
    struct.pack_into("<Q", buf, layout.num_off, len(devices))
    for d, (uuid, limit, sm_limit) in enumerate(devices):
        raw = uuid.encode() if isinstance(uuid, str) else uuid
        buf[layout.uuids_off + 96 * d : layout.uuids_off + 96 * d + len(raw)] = raw
        struct.pack_into("<Q", buf, layout.limit_off + 8 * d, limit)
        struct.pack_into("<Q", buf, layout.sm_limit_off + 8 * d, sm_limit)
    for i, p in enumerate(procs):
        base = layout.procs_off + i * layout.slot_size
        struct.pack_into("<ii", buf, base, p.pid, p.hostpid)
        for d, (ctx, mod, data) in enumerate(p.mem):
            struct.pack_into("<5Q", buf, base + 8 + 8 * layout.used_stride * d, ctx, mod, data, 0, ctx + mod + data)
            struct.pack_into("<Q", buf, base + layout.monitor_off + 8 * d, ctx + mod + data)
        for d, util in enumerate(p.sm_util):
            struct.pack_into("<Q", buf, base + layout.util_off + 8 * layout.util_stride * d + 16, util)
        struct.pack_into("<i", buf, base + layout.status_off, p.status)
        if layout.seq_off is not None:
            struct.pack_into("<Q", buf, base + layout.seq_off, p.seq)
    struct.pack_into("<i", buf, layout.tail_off, len(procs) if proc_num is None else proc_num)
    if layout.has_version:
        struct.pack_into("<q", buf, layout.tail_off + 16, last_kernel_time)
    return buf


__all__ = ["LAYOUT_V0", "LAYOUT_V1", "MiB", "Proc", "build_region"]
