"""Build HAMi-core shared-region bytes for tests from HAMi-core's own struct definitions.

Offsets are not copied from the exporter or the simulator: each layout below is the field
list of `shrreg_proc_slot_t` / `shared_region_t` in HAMi-core's
src/multiprocess/multiprocess_memory_limit.h at the commit named, laid out with the x86-64
System V rules (each field at its alignment, the struct padded to its largest alignment;
glibc's sem_t is 32 bytes, 8-aligned).

- "v0"        7a9c88b97c183be4223d13374e9c0d925b821122 (2024-04): no version fields, 5-word
              memory and 3-word utilization records, no seqlock, no last_kernel_time.
- "1.1"       1988c5dadd3e0dd49dc7c6f97c8014401b9f0f55 (2026-01): major 1 minor 1, seqlock in
              the slot's first spare word (9b464040..., 2024-08, had the same bytes, spare = 0).
- "1.1-moved" e200da2c2ace17207accf106030715c787ce8e54 (2026-03): seqlock moved after hostpid,
              sem_postinit after sem; never released, 2,008,984 bytes.
- "1.2"       b69b1eab768690b1e423e69dad26257fcc7a780f (2026-04, still so at 8f3a89c6...):
              the 1.1 offsets again, sem_postinit in the former spare words at the end.

HAMi-core creates the file by seeking to sizeof(shared_region_t) and writing one byte
(multiprocess_memory_limit.c, `lseek(fd, SHARED_REGION_SIZE_MAGIC, SEEK_SET)` then
`write(fd, "\\0", 1)`), so a real file is sizeof + 1 bytes: `file_size(layout)`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from slicemeter.common import MiB
MAGIC = 19920718          # MULTIPROCESS_SHARED_REGION_MAGIC_FLAG
DEVS, PROCS, UUID_LEN = 16, 1024, 96

# x86-64: (size, alignment)
_PRIM = {"i32": (4, 4), "u32": (4, 4), "u64": (8, 8), "size_t": (8, 8), "sem_t": (32, 8), "char": (1, 1)}


@dataclass(frozen=True)
class CStruct:
    size: int
    align: int
    offsets: dict[str, int]


def c_struct(fields: list[tuple[str, object, int]]) -> CStruct:
    """(name, primitive name or CStruct, array length) -> offsets per the x86-64 ABI."""
    off, align, offsets = 0, 1, {}
    for name, typ, count in fields:
        size, al = (typ.size, typ.align) if isinstance(typ, CStruct) else _PRIM[typ]
        off = (off + al - 1) // al * al
        offsets[name] = off
        off += size * count
        align = max(align, al)
    return CStruct((off + align - 1) // align * align, align, offsets)


def _mem(words: int) -> CStruct:
    names = ["context_size", "module_size", "data_size", "offset", "total"]
    return c_struct([(n, "u64", 1) for n in names] + ([("unused", "u64", words - 5)] if words > 5 else []))


def _util(words: int) -> CStruct:
    return c_struct([(n, "u64", 1) for n in ("dec_util", "enc_util", "sm_util")]
                    + ([("unused", "u64", words - 3)] if words > 3 else []))


def _slot(mem: CStruct, util: CStruct, seq_first: bool, seq: bool, spare: int) -> CStruct:
    f = [("pid", "i32", 1), ("hostpid", "i32", 1)]
    if seq_first:
        f.append(("seqlock", "u64", 1))
    f += [("used", mem, DEVS), ("monitorused", "u64", DEVS), ("device_util", util, DEVS), ("status", "i32", 1)]
    if seq and not seq_first:
        f.append(("seqlock", "u64", 1))
    if spare:
        f.append(("unused", "u64", spare))
    return c_struct(f)


def _region(slot: CStruct, versioned: bool, postinit_after_sem: bool, tail: list) -> CStruct:
    f = [("initialized_flag", "i32", 1)]
    if versioned:
        f += [("major_version", "u32", 1), ("minor_version", "u32", 1)]
    f += [("sm_init_flag", "i32", 1), ("owner_pid", "size_t", 1), ("sem", "sem_t", 1)]
    if postinit_after_sem:
        f.append(("sem_postinit", "sem_t", 1))
    f += [("device_num", "u64", 1), ("uuids", "char", DEVS * UUID_LEN), ("limit", "u64", DEVS),
          ("sm_limit", "u64", DEVS), ("procs", slot, PROCS), ("proc_num", "i32", 1),
          ("utilization_switch", "i32", 1), ("recent_kernel", "i32", 1), ("priority", "i32", 1)] + tail
    return c_struct(f)


@dataclass(frozen=True)
class HamiLayout:
    key: str
    version: tuple[int, int] | None
    region: CStruct
    slot: CStruct
    mem: CStruct
    util: CStruct

    def at(self, name: str) -> int:
        return self.region.offsets[name]

    def slot_at(self, i: int, name: str = "pid") -> int:
        return self.region.offsets["procs"] + i * self.slot.size + self.slot.offsets[name]


def _layout(key, version, mem_words, util_words, seq_first, seq, spare, postinit_after_sem, tail) -> HamiLayout:
    mem, util = _mem(mem_words), _util(util_words)
    slot = _slot(mem, util, seq_first, seq, spare)
    return HamiLayout(key, version, _region(slot, version is not None, postinit_after_sem, tail), slot, mem, util)


_TAIL_11 = [("last_kernel_time", "u64", 1), ("unused", "u64", 4)]
_TAIL_12 = [("last_kernel_time", "u64", 1), ("sem_postinit", "sem_t", 1)]
LAYOUTS: dict[str, HamiLayout] = {
    "v0": _layout("v0", None, 5, 3, False, False, 0, False, []),
    "1.1": _layout("1.1", (1, 1), 8, 6, False, True, 2, False, _TAIL_11),
    "1.1-moved": _layout("1.1-moved", (1, 1), 8, 6, True, True, 2, True, _TAIL_11),
    "1.2": _layout("1.2", (1, 2), 8, 6, False, True, 2, False, _TAIL_12),
}


def hami_layout(layout: object) -> HamiLayout:
    """A HamiLayout from its key, or from an exporter Layout by name (v0; v1 = HAMi-core 1.2)."""
    if isinstance(layout, HamiLayout):
        return layout
    if isinstance(layout, str):
        return LAYOUTS[layout]
    return LAYOUTS[{"v0": "v0", "v1": "1.2"}[layout.name]]


def file_size(layout: object) -> int:
    return hami_layout(layout).region.size + 1


@dataclass
class Proc:
    pid: int
    hostpid: int
    mem: list[tuple[int, int, int]]          # per device (context, module, buffer) bytes
    sm_util: list[int] = field(default_factory=list)
    status: int = 1
    seq: int = 0


def build_region(
    layout: object = "1.2",
    devices: list[tuple[str | bytes, int, int]] = (),   # (uuid, limit bytes, sm_limit %)
    procs: list[Proc] = (),
    proc_num: int | None = None,
    last_kernel_time: int = 0,
    major: int | None = None,
    minor: int | None = None,
    size: int | None = None,
) -> bytearray:
    """A region as HAMi-core leaves it; `size` defaults to sizeof (pass file_size() for the real file)."""
    lay = hami_layout(layout)
    buf = bytearray(lay.region.size if size is None else size)
    struct.pack_into("<i", buf, 0, MAGIC)
    if lay.version is not None:
        struct.pack_into("<II", buf, lay.at("major_version"), major if major is not None else lay.version[0],
                         minor if minor is not None else lay.version[1])
    struct.pack_into("<Q", buf, lay.at("device_num"), len(devices))
    for d, (uuid, limit, sm_limit) in enumerate(devices):
        raw = uuid.encode() if isinstance(uuid, str) else uuid
        off = lay.at("uuids") + UUID_LEN * d
        buf[off : off + len(raw)] = raw
        struct.pack_into("<Q", buf, lay.at("limit") + 8 * d, limit)
        struct.pack_into("<Q", buf, lay.at("sm_limit") + 8 * d, sm_limit)
    m, u = lay.mem.offsets, lay.util.offsets
    for i, p in enumerate(procs):
        struct.pack_into("<ii", buf, lay.slot_at(i, "pid"), p.pid, p.hostpid)
        for d, (ctx, mod, data) in enumerate(p.mem):
            rec = lay.slot_at(i, "used") + d * lay.mem.size
            for name, v in (("context_size", ctx), ("module_size", mod), ("data_size", data), ("total", ctx + mod + data)):
                struct.pack_into("<Q", buf, rec + m[name], v)
            struct.pack_into("<Q", buf, lay.slot_at(i, "monitorused") + 8 * d, ctx + mod + data)
        for d, util in enumerate(p.sm_util):
            struct.pack_into("<Q", buf, lay.slot_at(i, "device_util") + d * lay.util.size + u["sm_util"], util)
        struct.pack_into("<i", buf, lay.slot_at(i, "status"), p.status)
        if "seqlock" in lay.slot.offsets:
            struct.pack_into("<Q", buf, lay.slot_at(i, "seqlock"), p.seq)
    struct.pack_into("<i", buf, lay.at("proc_num"), len(procs) if proc_num is None else proc_num)
    if "last_kernel_time" in lay.region.offsets:
        struct.pack_into("<q", buf, lay.at("last_kernel_time"), last_kernel_time)
    return buf


__all__ = ["LAYOUTS", "MAGIC", "MiB", "Proc", "build_region", "c_struct", "file_size", "hami_layout"]
