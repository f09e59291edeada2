"""Byte-exact writer of HAMi-core shared regions (the per-container `.cache` files).

HAMi-core (libvgpu.so) mmaps one region per container and every CUDA process in the
container writes its own slot. We write the same bytes from outside, per HAMi-core version
(x86-64 offsets of src/multiprocess/multiprocess_memory_limit.h):

- `1.2` (V1, today's): sizeof 2,008,952, version 1.2; `1.1` the same offsets, version 1.1;
- `v0` (before the version fields): sizeof 1,197,896, narrower slots, no seqlock, no
  last_kernel_time;
- `1.1-2026-03`: HAMi-core main of March 2026, never released: seqlock after hostpid,
  sem_postinit after sem, sizeof 2,008,984 (to show that it is refused, not misread).

Every file is sizeof + 1 bytes: HAMi-core creates it by writing one byte at offset sizeof.

Updates are in place: the file is created once, then each tick pwrites the header fields
and the changed slots. A slot is written with the seqlock protocol HAMi-core uses (bump
to odd, write, bump to even), so a reader racing the writer sees an odd or moved seqlock
and retries.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path

MAGIC = 19920718
MAX_DEVICES = 16
MAX_PROCS = 1024
UUID_LEN = 96


@dataclass(frozen=True)
class Layout:
    name: str
    sizeof: int
    file_size: int
    version: tuple[int, int] | None      # (major, minor) written at @4/@8, v1 only
    sm_init_flag: int
    owner_pid: int
    device_num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    slot_size: int
    used_stride: int                     # one device's memory record in a slot
    monitorused: int                     # offsets inside a slot from here on
    device_util: int
    util_stride: int
    status: int
    seqlock: int | None
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None
    slot_used: int = 8                   # used[16] inside a slot


V1 = Layout(
    name="v1", sizeof=2_008_952, file_size=2_008_953, version=(1, 2), sm_init_flag=12, owner_pid=16,
    device_num=56, uuids=64, limit=1600, sm_limit=1728, procs=1856, slot_size=1960, used_stride=64,
    monitorused=1032, device_util=1160, util_stride=48, status=1928, seqlock=1936,
    proc_num=2_008_896, utilization_switch=2_008_900, recent_kernel=2_008_904, priority=2_008_908,
    last_kernel_time=2_008_912,
)
V1_1 = replace(V1, name="v1", version=(1, 1))
V0 = Layout(
    name="v0", sizeof=1_197_896, file_size=1_197_897, version=None, sm_init_flag=4, owner_pid=8,
    device_num=48, uuids=56, limit=1592, sm_limit=1720, procs=1848, slot_size=1168, used_stride=40,
    monitorused=648, device_util=776, util_stride=24, status=1160, seqlock=None,
    proc_num=1_197_880, utilization_switch=1_197_884, recent_kernel=1_197_888, priority=1_197_892,
    last_kernel_time=None,
)
# every field from sem_postinit (after sem) on 32 bytes later; in the slot the seqlock first
MOVED_1_1 = Layout(
    name="1.1-2026-03", sizeof=2_008_984, file_size=2_008_985, version=(1, 1), sm_init_flag=12, owner_pid=16,
    device_num=88, uuids=96, limit=1632, sm_limit=1760, procs=1888, slot_size=1960, used_stride=64,
    monitorused=1040, device_util=1168, util_stride=48, status=1936, seqlock=8,
    proc_num=2_008_928, utilization_switch=2_008_932, recent_kernel=2_008_936, priority=2_008_940,
    last_kernel_time=2_008_944, slot_used=16,
)
# by HAMi-core version (scenario key `hami_core`)
LAYOUTS = {"v0": V0, "1.1": V1_1, "1.2": V1, "1.1-2026-03": MOVED_1_1}


@dataclass
class ProcSlot:
    pid: int                              # PID inside the container
    hostpid: int                          # PID on the host (NVML's view)
    used: list[tuple[int, int, int]]      # per vdevice: (context, module, data) bytes
    monitorused: list[int]                # per vdevice: bytes NVML attributes to the process
    sm_util: list[int]                    # per vdevice: percent of the GPU's SMs
    status: int = 1
    killed: bool = False                  # its writer died mid-update: the seqlock stays odd


@dataclass
class RegionState:
    uuids: list[str]
    limits: list[int]                     # bytes per vdevice
    sm_limits: list[int]                  # percent per vdevice (HAMi-core writes 100 for no limit)
    procs: list[ProcSlot] = field(default_factory=list)
    owner_pid: int = 0
    last_kernel_time: int = 0             # Unix seconds (HAMi-core stores time(NULL))
    recent_kernel: int = 0
    priority: int = 1
    utilization_switch: int = 1
    sm_init_flag: int = 1


def _header(layout: Layout, st: RegionState) -> list[tuple[int, bytes]]:
    """(offset, bytes) pieces of everything outside the process slots."""
    n = len(st.uuids)
    if n > MAX_DEVICES:
        raise ValueError(f"{n} devices: a region holds at most {MAX_DEVICES}")
    uuids = b"".join(u.encode()[: UUID_LEN - 1].ljust(UUID_LEN, b"\0") for u in st.uuids).ljust(
        UUID_LEN * MAX_DEVICES, b"\0")
    pad = [0] * (MAX_DEVICES - n)
    parts = [
        (0, struct.pack("<i", MAGIC)),
        (layout.sm_init_flag, struct.pack("<i", st.sm_init_flag)),
        (layout.owner_pid, struct.pack("<Q", st.owner_pid)),
        (layout.device_num, struct.pack("<Q", n)),
        (layout.uuids, uuids),
        (layout.limit, struct.pack("<16Q", *st.limits, *pad)),
        (layout.sm_limit, struct.pack("<16Q", *st.sm_limits, *pad)),
        (layout.proc_num, struct.pack("<iiii", len(st.procs), st.utilization_switch, st.recent_kernel, st.priority)),
    ]
    if layout.version:
        parts.append((4, struct.pack("<II", *layout.version)))
    if layout.last_kernel_time is not None:
        parts.append((layout.last_kernel_time, struct.pack("<q", st.last_kernel_time)))
    return parts


def _slot_body(layout: Layout, p: ProcSlot) -> bytes:
    """A slot's bytes up to the status (the seqlock's 8 bytes inside it, if any, left 0)."""
    buf = bytearray(layout.status + 4)
    struct.pack_into("<ii", buf, 0, p.pid, p.hostpid)
    for d, (ctx, mod, data) in enumerate(p.used):
        struct.pack_into("<5Q", buf, layout.slot_used + d * layout.used_stride, ctx, mod, data, 0, ctx + mod + data)
    for d, v in enumerate(p.monitorused):
        struct.pack_into("<Q", buf, layout.monitorused + d * 8, v)
    for d, sm in enumerate(p.sm_util):
        struct.pack_into("<3Q", buf, layout.device_util + d * layout.util_stride, 0, 0, sm)
    struct.pack_into("<i", buf, layout.status, p.status)
    return bytes(buf)


def encode_region(layout: Layout, st: RegionState, seq: int = 2) -> bytes:
    """The whole file as HAMi-core leaves it (stable: every live seqlock even)."""
    if len(st.procs) > MAX_PROCS:
        raise ValueError(f"{len(st.procs)} processes: a region holds at most {MAX_PROCS}")
    buf = bytearray(layout.file_size)
    for off, b in _header(layout, st):
        buf[off:off + len(b)] = b
    for i, p in enumerate(st.procs):
        base = layout.procs + i * layout.slot_size
        body = _slot_body(layout, p)
        buf[base:base + len(body)] = body
        if layout.seqlock is not None:
            struct.pack_into("<Q", buf, base + layout.seqlock, seq + 1 if p.killed else seq)
    return bytes(buf)


def _pwrite_body(fd: int, lay: Layout, body: bytes, base: int) -> None:
    """The slot's fields, around the seqlock where the layout puts it inside them."""
    if lay.seqlock is not None and lay.seqlock < len(body):
        os.pwrite(fd, body[: lay.seqlock], base)
        os.pwrite(fd, body[lay.seqlock + 8 :], base + lay.seqlock + 8)
    else:
        os.pwrite(fd, body, base)


class RegionWriter:
    """One container's region file, created once and then updated in place."""

    def __init__(self, path: Path, layout: Layout):
        self.path = Path(path)
        self.layout = layout
        self._slots: list[bytes] = []          # last body written per slot (skip unchanged ones)

    def write(self, st: RegionState) -> None:
        lay = self.layout
        try:
            fresh = os.path.getsize(self.path) != lay.file_size
        except OSError:
            fresh = True
        if fresh:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(encode_region(lay, st))
            os.replace(tmp, self.path)     # a reader never sees a half-created file
            self._slots = [_slot_body(lay, p) for p in st.procs]
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            for i, p in enumerate(st.procs):
                body = _slot_body(lay, p)
                if i < len(self._slots) and self._slots[i] == body:
                    continue
                base = lay.procs + i * lay.slot_size
                if lay.seqlock is None:
                    os.pwrite(fd, body, base)
                else:
                    (seq,) = struct.unpack("<Q", os.pread(fd, 8, base + lay.seqlock))
                    if p.killed:   # bumped to odd, fields half written, never bumped back
                        if seq % 2 == 0:
                            os.pwrite(fd, struct.pack("<Q", seq + 1), base + lay.seqlock)
                            _pwrite_body(fd, lay, body, base)
                    else:
                        seq += seq & 1                   # a slot reused after a killed writer
                        os.pwrite(fd, struct.pack("<Q", seq + 1), base + lay.seqlock)
                        _pwrite_body(fd, lay, body, base)
                        os.pwrite(fd, struct.pack("<Q", seq + 2), base + lay.seqlock)
                if i < len(self._slots):
                    self._slots[i] = body
                else:
                    self._slots.append(body)
            for i in range(len(st.procs), len(self._slots)):   # exited processes: slot cleared
                os.pwrite(fd, bytes(lay.slot_size), lay.procs + i * lay.slot_size)
            del self._slots[len(st.procs):]
            for off, b in _header(lay, st):
                os.pwrite(fd, b, off)
        finally:
            os.close(fd)
