"""Read HAMi-core shared regions (`<hook>/containers/<podUID>_<container>/*.cache`, and
`<hook>/claims/<claimUID>/<uuid>.cache` of HAMi's DRA driver).

The file is written by libvgpu.so from inside the tenant's container, so every byte is
untrusted: this reader never writes to it (O_RDONLY, no mmap), never follows a link out of
the HAMi directory, reads only the header and the live process slots with pread, honours
the per-slot seqlock, and validates every field it reports. A bad file becomes a
`RegionError` with a short machine-readable `reason`; nothing here raises on bad bytes.

Layouts (x86-64, little-endian) are described as data in `LAYOUT_V0` / `LAYOUT_V1`, so the
parser is one function for both. Only layouts known by size and version are read (HAMi-core
creates the file as sizeof + 1 bytes); anything else is rejected with its reason, never guessed.
What costs what: a bad header costs the region; a device whose UUID is unset or invalid costs
that device (HAMi's monitor skips it too); a slot whose seqlock stays odd (its writer was
killed mid-update) costs that slot.
"""
from __future__ import annotations

import errno
import functools
import os
import re
import stat
import struct
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from slicemeter import clock
from slicemeter.common import DNS_LABEL, GPU_UUID_RE

MAGIC = 19920718
MAX_DEVICES = 16
MAX_PROCS = 1024
UUID_LEN = 96
# Used when the device's real memory is unknown (hami-dump, a GPU NVML did not report):
# no GPU sold has more than this, so anything above is corrupt.
ABS_MAX_DEVICE_BYTES = 1 << 40
SEQLOCK_RETRIES = 8
# A region's last_kernel_time may be slightly ahead of ours (clock read order).
CLOCK_SLACK_S = 300

# Kubernetes pod UIDs are RFC 4122 UUIDs; container names are DNS-1123 labels.
_DIR_RE = re.compile(
    r"^(?P<uid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})_(?P<container>" + DNS_LABEL + ")$"
)
_CACHE_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}\.cache$")


@dataclass(frozen=True, slots=True)
class Layout:
    name: str
    size: int                # sizeof(shared_region_t)
    has_version: bool
    header_len: int          # bytes from 0 up to procs[]
    num_off: int             # device_num u64
    uuids_off: int
    limit_off: int
    sm_limit_off: int
    procs_off: int
    tail_off: int            # proc_num i32, utilization_switch, recent_kernel, priority[, last_kernel_time]
    slot_size: int
    used_stride: int         # u64 words per device memory record
    util_stride: int         # u64 words per device utilization record
    monitor_off: int
    util_off: int
    status_off: int
    seq_off: int | None      # None: layout without a seqlock
    versions: frozenset[tuple[int, int]] = frozenset()   # (major, minor) read at @4/@8; empty: none

    @property
    def tail_len(self) -> int:
        return 24 if self.has_version else 16   # last_kernel_time came with the version fields


LAYOUT_V1 = Layout(
    name="v1", size=2_008_952, has_version=True, header_len=1856, num_off=56, uuids_off=64,
    limit_off=1600, sm_limit_off=1728, procs_off=1856, tail_off=2_008_896, slot_size=1960,
    used_stride=8, util_stride=6, monitor_off=1032, util_off=1160, status_off=1928, seq_off=1936,
    # 1.1 (2024-08; the seqlock took the slot's first spare word, 0 before) and 1.2 share these offsets
    versions=frozenset({(1, 1), (1, 2)}),
)
# v0 (HAMi-core before the version fields): 5-word memory records, 3-word utilization
# records, no seqlock, 1168-byte slots; header fields 8 bytes earlier.
LAYOUT_V0 = Layout(
    name="v0", size=1_197_896, has_version=False, header_len=1848, num_off=48, uuids_off=56,
    limit_off=1592, sm_limit_off=1720, procs_off=1848, tail_off=1_197_880, slot_size=1168,
    used_stride=5, util_stride=3, monitor_off=648, util_off=776, status_off=1160, seq_off=None,
)
# HAMi-core creates the file by writing one byte at offset sizeof: sizeof + 1 on disk.
FILE_SLACK = 1
# HAMi-core main of March-April 2026 (version 1.1 again) moved the seqlock after hostpid and
# put sem_postinit after sem: every field from device_num on sits elsewhere. Never released.
MOVED_1_1_SIZE = 2_008_984


@dataclass(slots=True)
class ProcSlot:
    slot: int
    pid: int
    hostpid: int
    status: int
    # per device index: (context, module, buffer, total) bytes
    memory: list[tuple[int, int, int, int]]
    monitor_used: list[int]
    sm_util: list[int]       # percent, per device


@dataclass(slots=True)
class DeviceView:
    """One vdevice of a region, summed over the live process slots."""

    index: int
    uuid: str
    limit_bytes: int | None  # None: no limit set (0 in the file)
    sm_limit_pct: int | None  # None: no core limit (0 or >= 100 in the file)
    context_bytes: int = 0
    module_bytes: int = 0
    buffer_bytes: int = 0
    sm_util_pct: int = 0     # capped at 100
    processes: int = 0
    hostpids: list[int] = field(default_factory=list)

    @property
    def used_bytes(self) -> int:
        return self.context_bytes + self.module_bytes + self.buffer_bytes


@dataclass(frozen=True, slots=True)
class RegionError:
    reason: str    # short label value for slicemeter_hami_region_errors_total
    detail: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass(slots=True)
class Region:
    layout: str
    major: int | None
    minor: int | None
    file_size: int
    device_num: int
    proc_num: int
    devices: list[DeviceView]
    procs: list[ProcSlot]
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None   # epoch seconds; None: never (or layout without it)
    bytes_read: int = 0
    device_errors: list[tuple[int, RegionError]] = field(default_factory=list)   # devices skipped
    stuck_slots: list[int] = field(default_factory=list)   # slots skipped: seqlock odd on every read

    def to_json_dict(self) -> dict:
        from dataclasses import asdict

        d = asdict(self)
        for dev, view in zip(d["devices"], self.devices):
            dev["used_bytes"] = view.used_bytes
        return d


class _Bad(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


ReadAt = Callable[[int, int], bytes]   # (offset, length) -> bytes (may be short)

_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_TAIL = struct.Struct("<iiii")
_I64 = struct.Struct("<q")
_VERSION = struct.Struct("<II")


def _exact(read_at: ReadAt, off: int, n: int) -> bytes:
    b = read_at(off, n)
    if len(b) != n:
        raise _Bad("truncated", f"wanted {n} bytes at {off}, got {len(b)}")
    return b


# file size -> the only layout such a file can hold (its header confirms it)
_BY_SIZE = {size: lay for lay in (LAYOUT_V1, LAYOUT_V0) for size in range(lay.size, lay.size + FILE_SLACK + 1)}


def pick_layout(head: bytes, file_size: int) -> Layout:
    """The layout by file size, then (v1) the version fields; only known pairs are read.

    HAMi's monitor (pkg/monitor/nvidia/cudevshr.go) takes any size >= v1's with major 1 as
    v1, so it misreads HAMi-core's 2,008,984-byte layout; that one is named and refused here.
    """
    if len(head) < 12:
        raise _Bad("truncated", f"file of {file_size} bytes has no header")
    (magic,) = _I32.unpack_from(head, 0)
    if magic != MAGIC:
        raise _Bad("bad_magic", f"initialized_flag {magic} != {MAGIC}")
    lay = _BY_SIZE.get(file_size)
    if lay is LAYOUT_V1:
        version = _VERSION.unpack_from(head, 4)
        if version not in LAYOUT_V1.versions:
            known = ", ".join(f"{a}.{b}" for a, b in sorted(LAYOUT_V1.versions))
            raise _Bad("bad_version", f"version {version[0]}.{version[1]} in a v1-sized file (known: {known})")
    if lay is not None:
        return lay
    if MOVED_1_1_SIZE <= file_size <= MOVED_1_1_SIZE + FILE_SLACK:
        raise _Bad("unsupported_layout", f"file of {file_size} bytes: HAMi-core's unreleased 1.1 layout of "
                   f"March 2026 (sizeof {MOVED_1_1_SIZE}, seqlock and sem_postinit moved); upgrade HAMi-core")
    if file_size < LAYOUT_V0.size:
        raise _Bad("truncated", f"file of {file_size} bytes is smaller than any known layout")
    raise _Bad("bad_size", f"file size {file_size} matches no known layout "
               f"(v0 {LAYOUT_V0.size}, v1 {LAYOUT_V1.size}, each + {FILE_SLACK})")


def _uuid(raw: bytes, index: int) -> str:
    known = _UUIDS.get(raw)
    if known is not None:
        return known
    if raw[:1] == b"\0":
        # HAMi-core fills the UUIDs after creating the region; HAMi's monitor skips the device meanwhile
        raise _Bad("uuid_unset", f"device {index}: UUID not written yet")
    text = raw.split(b"\0", 1)[0]
    try:
        s = text.decode("ascii")
    except UnicodeDecodeError:
        raise _Bad("bad_uuid", f"device {index}: UUID bytes are not ASCII") from None
    if not GPU_UUID_RE.match(s):
        raise _Bad("bad_uuid", f"device {index}: {s[:40]!r} is not a GPU/MIG UUID")
    if len(_UUIDS) >= _UUIDS_KEPT:
        _UUIDS.clear()
    _UUIDS[raw] = s
    return s


# The same 96 bytes are the same valid UUID every tick: decoded and matched once.
_UUIDS: dict[bytes, str] = {}
_UUIDS_KEPT = 4096
_SLOTS: dict[tuple[str, int], struct.Struct] = {}   # (layout, devices) -> a slot's unpack


def _slot_struct(lay: Layout, n: int) -> struct.Struct:
    """One unpack of a slot's fields for its region's n devices: pid, hostpid, n memory
    records, n monitor words, n utilization records, status (the other 16 - n are skipped)."""
    st = _SLOTS.get((lay.name, n))
    if st is None:
        used_end = 8 + 8 * n * lay.used_stride
        monitor_end = lay.monitor_off + 8 * n
        util_end = lay.util_off + 8 * n * lay.util_stride
        st = _SLOTS[(lay.name, n)] = struct.Struct(
            f"<ii{n * lay.used_stride}Q{lay.monitor_off - used_end}x{n}Q{lay.util_off - monitor_end}x"
            f"{n * lay.util_stride}Q{lay.status_off - util_end}xi")
    return st


def _parse_slot(buf: bytes, base: int, lay: Layout, dev_max: list[int | None], slot: int) -> ProcSlot:
    """`dev_max[d]`: device d's memory bound, None for a skipped device (its values are ignored)."""
    n = len(dev_max)
    fields = _slot_struct(lay, n).unpack_from(buf, base)
    pid, hostpid, status = fields[0], fields[1], fields[-1]
    if pid < 0 or hostpid < 0 or status < 0:
        raise _Bad("bad_value", f"slot {slot}: negative pid/hostpid/status ({pid}, {hostpid}, {status})")
    used_stride, util_stride = lay.used_stride, lay.util_stride
    mon_at = 2 + n * used_stride
    util_at = mon_at + n
    memory, monitor, sm = [], [], []
    for d, cap in enumerate(dev_max):
        if cap is None:
            memory.append((0, 0, 0, 0))
            monitor.append(0)
            sm.append(0)
            continue
        at = 2 + d * used_stride
        ctx, mod, data, total, mon = fields[at], fields[at + 1], fields[at + 2], fields[at + 4], fields[mon_at + d]
        if ctx > cap or mod > cap or data > cap or total > cap or mon > cap:
            for what, v in (("context", ctx), ("module", mod), ("buffer", data), ("total", total), ("monitorused", mon)):
                if v > cap:
                    raise _Bad("bad_value", f"slot {slot} device {d}: {what} {v} bytes exceeds the device's {cap}")
        if ctx + mod + data > cap:
            raise _Bad("bad_value", f"slot {slot} device {d}: memory sum exceeds the device's {cap} bytes")
        su = fields[util_at + d * util_stride + 2]
        if su > 100:
            raise _Bad("bad_value", f"slot {slot} device {d}: sm_util {su} % > 100")
        memory.append((ctx, mod, data, total))
        monitor.append(mon)
        sm.append(su)
    return ProcSlot(slot=slot, pid=pid, hostpid=hostpid, status=status, memory=memory, monitor_used=monitor, sm_util=sm)


def parse_region(
    read_at: ReadAt,
    file_size: int,
    device_memory: Mapping[str, int] | None = None,
    now_s: float | None = None,
    *,
    last: LastParse | None = None,
) -> Region | RegionError:
    """Parse a region through `read_at`; never raises on bad bytes.

    `device_memory` maps GPU UUID -> physical memory bytes (from NVML) to bound values.
    `last`: the file's last parse; when the same bytes are read again its Region is returned
    (shared, read-only) instead of a new one, and `last` keeps this parse otherwise.
    """
    now_s = clock.time_s() if now_s is None else now_s
    device_memory = device_memory or {}
    try:
        raw = _Reads(read_at, file_size)
        if last is not None and last.gives(raw, file_size, device_memory, now_s):
            return last.region
        region = _parse(raw, file_size, device_memory, now_s)
    except _Bad as bad:
        region = RegionError(bad.reason, bad.detail)
    except (struct.error, ValueError, OverflowError, OSError) as exc:   # defensive: report, never raise
        region = RegionError("unreadable", f"{type(exc).__name__}: {exc}")
    if last is not None:
        last.keep(raw if isinstance(region, Region) and not raw.reread else None, file_size, device_memory, now_s, region)
    return region


class LastParse:
    """One file's last parse: the bytes it read and the Region they gave.

    A parse is a pure function of those bytes, the file size and the GPUs' memory, so the
    same bytes give the same Region; only its one check against the clock (last_kernel_time
    not in the future) can change, and it only passes more as the clock moves on. So a
    container whose region has not changed since the last tick (an idle one: its writers
    bump the sequence words on every update) is not parsed again. A parse that needed a
    seqlock re-read, or that failed, is made again next tick."""

    __slots__ = ("reads", "file_size", "device_memory", "now_s", "region")

    def __init__(self) -> None:
        self.reads: tuple[bytes, bytes, bytes | None, bytes | None] | None = None
        self.file_size = 0
        self.device_memory: Mapping[str, int] = {}
        self.now_s = 0.0
        self.region: Region | RegionError | None = None

    def gives(self, raw: _Reads, file_size: int, device_memory: Mapping[str, int], now_s: float) -> bool:
        return (self.reads is not None and self.reads == (raw.tail, raw.head, raw.before, raw.after)
                and file_size == self.file_size and now_s >= self.now_s
                and (device_memory is self.device_memory or device_memory == self.device_memory))

    def keep(self, raw: _Reads | None, file_size: int, device_memory: Mapping[str, int], now_s: float,
             region: Region | RegionError) -> None:
        """`device_memory` is kept as it is: the caller never changes a mapping it passed."""
        self.reads = None if raw is None else (raw.tail, raw.head, raw.before, raw.after)
        self.file_size, self.device_memory, self.now_s, self.region = file_size, device_memory, now_s, region


def _device(head: bytes, lay: Layout, d: int, seen: set[str], device_memory: Mapping[str, int]) -> tuple[DeviceView, int]:
    off = lay.uuids_off + d * UUID_LEN
    uuid = _uuid(head[off : off + UUID_LEN], d)
    if uuid in seen:
        raise _Bad("bad_uuid", f"device {d}: UUID {uuid} listed twice")
    cap = min(device_memory.get(uuid, ABS_MAX_DEVICE_BYTES), ABS_MAX_DEVICE_BYTES)
    (limit,) = _U64.unpack_from(head, lay.limit_off + 8 * d)
    (sm_limit,) = _U64.unpack_from(head, lay.sm_limit_off + 8 * d)
    if limit > cap:
        raise _Bad("bad_value", f"device {d} ({uuid}): memory limit {limit} exceeds the device's {cap} bytes")
    # HAMi-core stores 100 when CUDA_DEVICE_SM_LIMIT is 0 or unset, and its watcher throttles
    # only 0 < limit < 100: anything else is "no core limit", never a grant of the whole GPU.
    core_limit = sm_limit if 0 < sm_limit < 100 else None
    return DeviceView(index=d, uuid=uuid, limit_bytes=limit or None, sm_limit_pct=core_limit), cap


class _Reads:
    """A region's bytes in four reads, in the order HAMi-core's seqlock asks of a reader:

    1. the tail: proc_num, how many slots are live;
    2. the live slots' sequence words;
    3. the header and the live slots, adjacent in the file: one read;
    4. the sequence words again.

    A slot's copy is consistent when its two sequence words agree and are even; a slot
    still odd after SEQLOCK_RETRIES single-slot re-reads is reported stuck (its writer
    died mid-update). Nothing is validated here: a short read is reported by the parse
    where its field is checked, so a bad header is named before a bad tail."""

    def __init__(self, read_at: ReadAt, file_size: int):
        self.read_at = read_at
        lay = self.lay = _BY_SIZE.get(file_size)
        self.before = self.after = None
        self.reread = False   # a slot was read again (its sequence moved or stayed odd)
        if lay is None:                      # no layout of this size: pick_layout names why
            self.tail, self.live, self.head = b"", 0, read_at(0, 12)
            self.nread = len(self.head)
            return
        self.tail = read_at(lay.tail_off, lay.tail_len)
        live = _I32.unpack_from(self.tail)[0] if len(self.tail) >= 4 else 0
        self.live = live if 0 < live <= MAX_PROCS else 0   # a bad proc_num is refused after the header
        if self.live and lay.seq_off is not None:
            self.before = self._sequences()
        self.head = read_at(0, lay.procs_off + self.live * lay.slot_size)
        if self.before is not None:
            self.after = self._sequences()
        self.nread = len(self.tail) + len(self.head) + 2 * len(self.before or b"")

    def _sequences(self) -> bytes:
        """Every live slot's sequence word in one read: from slot 0's to the last live one's."""
        lay = self.lay
        return self.read_at(lay.procs_off + lay.seq_off, (self.live - 1) * lay.slot_size + 8)

    def _seq(self, i: int) -> int:
        self.reread = True
        self.nread += 8
        return _U64.unpack(_exact(self.read_at, self.lay.procs_off + i * self.lay.slot_size + self.lay.seq_off, 8))[0]

    def slots(self) -> list[tuple[int, bytes | None, int]]:
        """(index, buffer, offset of the slot in it) per consistent live slot, (index, None, 0) per stuck one."""
        lay, n, size = self.lay, self.live, self.lay.slot_size
        if lay.seq_off is None:
            return [(i, self._block(), lay.procs_off + i * size) for i in range(n)]
        want = (n - 1) * size + 8
        if len(self.before) != want:
            raise _Bad("truncated", f"wanted {want} bytes at {lay.procs_off + lay.seq_off}, got {len(self.before)}")
        block = self._block()
        if len(self.after) != want:
            raise _Bad("truncated", f"wanted {want} bytes at {lay.procs_off + lay.seq_off}, got {len(self.after)}")
        out = []
        for i in range(n):
            (s1,), (s2,) = _U64.unpack_from(self.before, i * size), _U64.unpack_from(self.after, i * size)
            buf, base = block, lay.procs_off + i * size
            attempt = 0
            while s1 != s2 or s1 & 1:
                attempt += 1
                if attempt > SEQLOCK_RETRIES:
                    buf = None
                    break
                s1 = self._seq(i)
                buf, base = _exact(self.read_at, lay.procs_off + i * size, size), 0
                self.nread += size
                s2 = self._seq(i)
            out.append((i, buf, base))
        return out

    def _block(self) -> bytes:
        lay, want = self.lay, self.live * self.lay.slot_size
        if len(self.head) < lay.procs_off + want:
            raise _Bad("truncated", f"wanted {want} bytes at {lay.procs_off}, got {max(0, len(self.head) - lay.procs_off)}")
        return self.head


def _parse(raw: _Reads, file_size: int, device_memory: Mapping[str, int], now_s: float) -> Region:
    head, tail = raw.head, raw.tail
    lay = pick_layout(head, file_size)
    if len(head) < lay.header_len:
        raise _Bad("truncated", f"wanted {lay.header_len} bytes at 0, got {len(head)}")
    if len(tail) != lay.tail_len:
        raise _Bad("truncated", f"wanted {lay.tail_len} bytes at {lay.tail_off}, got {len(tail)}")
    major = minor = None
    if lay.has_version:
        major, minor = _VERSION.unpack_from(head, 4)
    (n_dev,) = _U64.unpack_from(head, lay.num_off)
    if n_dev > MAX_DEVICES:
        raise _Bad("bad_device_num", f"device_num {n_dev} > {MAX_DEVICES}")
    proc_num, util_switch, recent_kernel, priority = _TAIL.unpack_from(tail, 0)
    if not 0 <= proc_num <= MAX_PROCS:
        raise _Bad("bad_proc_num", f"proc_num {proc_num} outside 0..{MAX_PROCS}")
    last_kernel = None
    if lay.has_version:
        (lk,) = _I64.unpack_from(tail, 16)
        if lk < 0 or lk > now_s + CLOCK_SLACK_S:
            raise _Bad("bad_value", f"last_kernel_time {lk} is negative or in the future")
        last_kernel = lk or None
    devices: list[DeviceView] = []
    dev_max: list[int | None] = []
    device_errors: list[tuple[int, RegionError]] = []
    seen: set[str] = set()
    for d in range(n_dev):
        try:
            view, cap = _device(head, lay, d, seen, device_memory)
        except _Bad as bad:
            device_errors.append((d, RegionError(bad.reason, bad.detail)))
            dev_max.append(None)
            continue
        devices.append(view)
        seen.add(view.uuid)
        dev_max.append(cap)
    procs: list[ProcSlot] = []
    stuck: list[int] = []
    if proc_num:
        for i, buf, base in raw.slots():
            if buf is None:
                stuck.append(i)
                continue
            (status,) = _I32.unpack_from(buf, base + lay.status_off)
            if status != 0:   # 0: the process exited (HAMi's monitor skips it as well)
                procs.append(_parse_slot(buf, base, lay, dev_max, i))
    _add_procs(devices, procs)   # the views are this parse's own: summed in place
    for view in devices:
        cap = dev_max[view.index]
        if view.used_bytes > cap:
            raise _Bad("bad_value", f"device {view.index}: processes use {view.used_bytes} bytes, more than the device's {cap}")
    return Region(
        layout=lay.name, major=major, minor=minor, file_size=file_size, device_num=n_dev, proc_num=proc_num,
        devices=devices, procs=procs, utilization_switch=util_switch, recent_kernel=recent_kernel,
        priority=priority, last_kernel_time=last_kernel, bytes_read=raw.nread, device_errors=device_errors,
        stuck_slots=stuck,
    )


def aggregate(devices: list[DeviceView], procs: list[ProcSlot]) -> list[DeviceView]:
    """Per-device sums over `procs` (fresh views; pass a subset to drop exited processes)."""
    out = [DeviceView(index=d.index, uuid=d.uuid, limit_bytes=d.limit_bytes, sm_limit_pct=d.sm_limit_pct) for d in devices]
    _add_procs(out, procs)
    return out


def _add_procs(views: list[DeviceView], procs: list[ProcSlot]) -> None:
    for p in procs:
        memory, sm_util, hostpid = p.memory, p.sm_util, p.hostpid
        for view in views:
            ctx, mod, data, _total = memory[view.index]
            sm = sm_util[view.index]
            if ctx or mod or data or sm:
                view.processes += 1
                if hostpid:
                    view.hostpids.append(hostpid)
            view.context_bytes += ctx
            view.module_bytes += mod
            view.buffer_bytes += data
            view.sm_util_pct = min(100, view.sm_util_pct + sm)


def parse_region_bytes(buf: bytes, device_memory: Mapping[str, int] | None = None, now_s: float | None = None) -> Region | RegionError:
    """Parse an in-memory region (tests, fuzzing)."""
    mv = memoryview(buf)
    return parse_region(lambda off, n: bytes(mv[off : off + n]), len(buf), device_memory, now_s)


# ---------------------------------------------------------------- files (I/O edge)

@dataclass(frozen=True, slots=True)
class RegionFile:
    pod_uid: str
    container: str
    dir_name: str     # <podUID>_<container>, validated
    cache_name: str   # *.cache, validated
    path: str         # for logs and hami-dump; reading goes through openat (open_region_entry)


@functools.lru_cache(maxsize=4096)   # the same directories are named every scan
def parse_dir_name(name: str) -> tuple[str, str] | None:
    """`<podUID>_<container>` -> (uid, container), or None for anything else."""
    m = _DIR_RE.match(name)
    return (m.group("uid"), m.group("container")) if m else None


def containers_dir(hami_dir: str) -> str:
    return os.path.join(os.path.realpath(hami_dir), "containers")


_Outcome = tuple[RegionFile | None, RegionError | None]   # a directory's region file, or why none


class Listings:
    """What each container directory held, looked at again only when the directory changed.

    Any entry added, removed or renamed in a directory moves its ctime, and so does a utime
    that could set its mtime back; ctime cannot be set from user space, and a directory
    replaced by another (or by a link) has another inode. A look taken while the directory's
    ctime is younger than RACY_NS is not trusted (git's racy-index rule): the directory is
    listed again next scan, so a change within the same timestamp tick is never hidden
    behind an equal ctime."""

    RACY_NS = 2_000_000_000

    def __init__(self, clock_ns: Callable[[], int] = time.time_ns):   # file times are real time, never simulated
        self.clock_ns = clock_ns
        # name -> (directory key, its look, whether the look is settled: older than RACY_NS)
        self._kept: dict[str, tuple[tuple[int, int, int, int], _Outcome, bool]] = {}
        self._next: dict[str, tuple[tuple[int, int, int, int], _Outcome, bool]] = {}
        self._unchanged: set[str] = set()   # the last scan's directories whose settled look was kept
        self._unchanged_next: set[str] = set()
        self.scans = 0

    def outcome(self, root: str, entry: os.DirEntry, uid: str, container: str) -> _Outcome:
        st = entry.stat(follow_symlinks=False)
        key = (st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns)
        kept = self._kept.get(entry.name)
        if kept is not None and kept[0] == key and kept[2]:
            self._next[entry.name] = kept
            self._unchanged_next.add(entry.name)
            return kept[1]
        found = _look(root, entry, uid, container, kept[1] if kept is not None else None)
        self._next[entry.name] = (key, found, self.clock_ns() - st.st_ctime_ns > self.RACY_NS)
        return found

    def end_scan(self) -> None:
        """Forget the directories this scan did not see."""
        self._kept, self._next = self._next, {}
        self._unchanged, self._unchanged_next = self._unchanged_next, set()
        self.scans += 1

    def settled(self, name: str) -> bool:
        """Whether the last scan's look at directory `name` is settled: until the directory
        changes, its entries name the files they named when the look was taken."""
        kept = self._kept.get(name)
        return kept is not None and kept[2]

    def unchanged(self, name: str) -> bool:
        """Whether the last scan found directory `name` as the scan before left it, settled."""
        return name in self._unchanged


def _look(root: str, entry: os.DirEntry, uid: str, container: str, previous: _Outcome | None = None) -> _Outcome:
    """The one `*.cache` file of a container directory; (None, None): none yet. `previous`
    (the last look) is returned as it is when the directory still holds the same file."""
    if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
        return None, RegionError("symlink", f"{entry.name} is a link or not a directory")
    caches = sorted(n for n in os.listdir(entry.path) if _CACHE_RE.match(n))
    if not caches:
        return None, None     # the container has not initialised CUDA yet
    if len(caches) > 1:
        return None, RegionError("ambiguous", f"{len(caches)} .cache files")
    path = os.path.join(root, entry.name, caches[0])
    if previous is not None and previous[0] is not None and previous[0].path == path:
        return previous
    return RegionFile(uid, container, entry.name, caches[0], path), None


def discover(hami_dir: str, listings: Listings | None = None) -> tuple[list[RegionFile], list[tuple[str, RegionError]]]:
    """List region files; returns (files, [(entry name, error)]) and never raises."""
    root = containers_dir(hami_dir)
    files: list[RegionFile] = []
    errors: list[tuple[str, RegionError]] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return files, errors     # no HAMi on this node (yet): not an error
    for entry in entries:
        parsed = parse_dir_name(entry.name)
        if parsed is None:
            errors.append((entry.name, RegionError("bad_name", f"directory name {entry.name[:80]!r} is not <podUID>_<container>")))
            continue
        try:
            found, err = (listings.outcome(root, entry, *parsed) if listings is not None
                          else _look(root, entry, *parsed))
        except OSError as exc:
            found, err = None, RegionError("unreadable", str(exc))
        if err is not None:
            errors.append((entry.name, err))
        elif found is not None:
            files.append(found)
    if listings is not None:
        listings.end_scan()
    return files, errors


_RO = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _open_error(what: str, exc: OSError) -> RegionError:
    # ELOOP: O_NOFOLLOW met a link; ENOTDIR: a link or file where a directory should be
    reason = "symlink" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else "unreadable"
    return RegionError(reason, f"open {what}: {exc.strerror}")


def _read_fd(fd: int, name: str, device_memory: Mapping[str, int] | None, now_s: float | None,
             last: LastParse | None = None) -> Region | RegionError:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return RegionError("not_regular", f"{name} is not a regular file")
    return parse_region(lambda off, n: os.pread(fd, n, off), st.st_size, device_memory, now_s, last=last)


def open_region_entry(root_fd: int, rf: RegionFile | ClaimRegionFile) -> int | RegionError:
    """Open `<containers>/<dir>/<cache>` component by component (openat, no links followed),
    so nothing outside the HAMi directory can be reached whatever the tenant renames."""
    try:
        dfd = os.open(rf.dir_name, _RO | os.O_DIRECTORY, dir_fd=root_fd)
    except OSError as exc:
        return _open_error(rf.dir_name, exc)
    try:
        return os.open(rf.cache_name, _RO | os.O_NONBLOCK, dir_fd=dfd)
    except OSError as exc:
        return _open_error(f"{rf.dir_name}/{rf.cache_name}", exc)
    finally:
        os.close(dfd)


def open_containers_dir(hami_dir: str) -> int | None:
    try:
        return os.open(containers_dir(hami_dir), os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def read_region_file(
    path: str,
    hami_dir: str,
    device_memory: Mapping[str, int] | None = None,
    now_s: float | None = None,
) -> Region | RegionError:
    """One file by path (hami-dump): must resolve inside `hami_dir`; the file itself may not be a link."""
    root = os.path.realpath(hami_dir)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        return RegionError("outside_dir", f"{path} resolves outside {root}")
    try:
        fd = os.open(path, _RO | os.O_NONBLOCK)
    except OSError as exc:
        return _open_error(os.path.basename(path), exc)
    try:
        return _read_fd(fd, os.path.basename(path), device_memory, now_s)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- claims (HAMi's DRA driver)

# HAMi's DRA driver gives each prepared claim `<hook>/claims/<claimUID>/<random uuid>.cache`,
# emptying the directory at each prepare: one file, shared by every container of the claim.
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_CLAIM_DIR_RE = re.compile(rf"^{_UUID}$")
_CLAIM_CACHE_RE = re.compile(rf"^{_UUID}\.cache$")


@dataclass(frozen=True, slots=True)
class ClaimRegionFile:
    claim_uid: str
    dir_name: str     # the claim's UID, validated
    cache_name: str   # <uuid>.cache, validated
    path: str         # for logs; reading goes through openat (open_region_entry)


def claims_dir(hami_dir: str) -> str:
    return os.path.join(os.path.realpath(hami_dir), "claims")


def discover_claims(hami_dir: str) -> tuple[list[ClaimRegionFile], list[tuple[str, RegionError]]]:
    """The claims' region files; (entry, error) for each name that is not a claim UID's
    directory or a `<uuid>.cache` in one (each costs only itself), and for a claim with
    two regions (its use is unknown). Never raises."""
    root = claims_dir(hami_dir)
    files: list[ClaimRegionFile] = []
    errors: list[tuple[str, RegionError]] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return files, errors     # no claim prepared on this node (yet): not an error
    for entry in entries:
        if not _CLAIM_DIR_RE.match(entry.name):
            errors.append((entry.name[:80], RegionError("bad_name", f"directory name {entry.name[:80]!r} is not a claim UID")))
            continue
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            errors.append((entry.name, RegionError("symlink", f"{entry.name} is a link or not a directory")))
            continue
        try:
            names = sorted(os.listdir(entry.path))
        except OSError as exc:
            errors.append((entry.name, RegionError("unreadable", str(exc))))
            continue
        caches = [n for n in names if _CLAIM_CACHE_RE.match(n)]
        errors += [(f"{entry.name}/{n[:80]}", RegionError("bad_name", f"file name {n[:80]!r} is not <uuid>.cache"))
                   for n in names if not _CLAIM_CACHE_RE.match(n)]
        if len(caches) > 1:
            errors.append((entry.name, RegionError("ambiguous", f"{len(caches)} .cache files")))
        elif caches:
            files.append(ClaimRegionFile(entry.name, entry.name, caches[0], os.path.join(root, entry.name, caches[0])))
    return files, errors


def read_claim_regions(hami_dir: str, files: list[ClaimRegionFile], device_memory: Mapping[str, int] | None,
                       now_s: float) -> list[tuple[ClaimRegionFile, Region | RegionError]]:
    """Each claim file's region (or why not), opened as the containers' are (openat, no links)."""
    if not files:
        return []
    try:
        root = os.open(claims_dir(hami_dir), os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return [(f, _open_error("claims", exc)) for f in files]
    try:
        out: list[tuple[ClaimRegionFile, Region | RegionError]] = []
        for f in files:
            fd = open_region_entry(root, f)
            if isinstance(fd, RegionError):
                out.append((f, fd))
                continue
            try:
                out.append((f, _read_fd(fd, f.cache_name, device_memory or {}, now_s)))
            finally:
                os.close(fd)
        return out
    finally:
        os.close(root)


# Region files kept open across ticks at most: a busy node has a few hundred GPU containers,
# and the exporter's other files and sockets need descriptors too.
MAX_OPEN_REGIONS = 1024


class RegionSource:
    """The HAMi source of a node: its region files, listed and read each tick.

    A file is kept open from one tick to the next while its directory stays as a settled
    look of `Listings` saw it (any rename, replacement or removal in the directory moves its
    ctime), so an unchanged container costs its fstat and four preads, not two opens and
    two closes as well. Every new open goes through `open_region_entry`; a file not read in
    a tick (its directory gone, its pod deleted) is closed in that tick."""

    def __init__(self, hami_dir: str, listings: Listings | None = None, max_open: int = MAX_OPEN_REGIONS):
        self.hami_dir = hami_dir
        self.listings = listings or Listings()
        self.max_open = max_open
        self._last: dict[str, LastParse] = {}   # path -> the file's last parse (the last tick's files)
        self._device_memory: dict[str, int] = {}   # never changed in place: LastParse keeps it
        self._open = _OpenFiles()
        self._open_scan = -1   # the listings' scan after which the kept files were opened

    def scan(self) -> tuple[list[RegionFile], list[tuple[str, RegionError]]]:
        return discover(self.hami_dir, self.listings)

    def read(self, files: list[RegionFile], device_memory: Mapping[str, int] | None,
             now_s: float) -> list[tuple[RegionFile, Region | RegionError]]:
        """Each file's region (or why not), through at most one open of the containers
        directory; a file read as it was last tick keeps its Region (`LastParse`)."""
        last, self._last = self._last, {}
        device_memory = device_memory or {}
        if device_memory != self._device_memory:   # else the last tick's mapping: LastParse compares it by identity
            self._device_memory = dict(device_memory)
        device_memory = self._device_memory
        was_open = self._open.take()
        if self.listings.scans != self._open_scan + 1:
            _close_all(was_open)   # no scan since they were opened: nothing says their directories stayed
        self._open_scan = self.listings.scans
        root = _ContainersDir(self.hami_dir)
        try:
            out = []
            for f in files:
                kept = self._last[f.path] = last.get(f.path) or LastParse()
                fd = self._descriptor(f, was_open, root)
                if isinstance(fd, RegionError):
                    out.append((f, fd))
                    continue
                try:
                    out.append((f, _read_fd(fd, f.cache_name, device_memory, now_s, kept)))
                finally:
                    self._keep_or_close(f, fd)
            return out
        finally:
            _close_all(was_open)   # directories gone, or not read this tick
            root.close()

    def _descriptor(self, f: RegionFile, was_open: dict[str, tuple[RegionFile, int]],
                    root: _ContainersDir) -> int | RegionError:
        """The file's descriptor of the last tick while its directory is unchanged, else a new one."""
        kept = was_open.pop(f.dir_name, None)
        if kept is not None:
            if (kept[0] is f or kept[0] == f) and self.listings.unchanged(f.dir_name):
                return kept[1]
            os.close(kept[1])
        return root.open(f)

    def _keep_or_close(self, f: RegionFile, fd: int) -> None:
        if self.listings.settled(f.dir_name) and len(self._open.fds) < self.max_open:
            self._open.fds[f.dir_name] = (f, fd)
        else:
            os.close(fd)

    @property
    def open_files(self) -> int:
        return len(self._open.fds)

    def close(self) -> None:
        _close_all(self._open.fds)


class _ContainersDir:
    """The containers directory, opened once per tick, and only when a file must be opened."""

    def __init__(self, hami_dir: str):
        self.hami_dir = hami_dir
        self.fd: int | None = None
        self.missing = False

    def open(self, f: RegionFile) -> int | RegionError:
        if self.fd is None and not self.missing:
            self.fd = open_containers_dir(self.hami_dir)
            self.missing = self.fd is None
        if self.fd is None:
            return RegionError("unreadable", "HAMi containers directory vanished")
        return open_region_entry(self.fd, f)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _close_all(fds: dict[str, tuple[RegionFile, int]]) -> None:
    for _, fd in fds.values():
        os.close(fd)
    fds.clear()


class _OpenFiles:
    """Directory name -> (its region file, the open descriptor); closed when dropped."""

    def __init__(self) -> None:
        self.fds: dict[str, tuple[RegionFile, int]] = {}

    def take(self) -> dict[str, tuple[RegionFile, int]]:
        fds, self.fds = self.fds, {}
        return fds

    def __del__(self) -> None:
        _close_all(self.fds)
