from __future__ import annotations

import json
import os
import struct
import time

import pytest

from slicemeter.exporter.sources import hami
from slicemeter.exporter.sources.hami import LAYOUT_V0, LAYOUT_V1, Region, RegionError, discover, parse_region_bytes, read_region_file
from slicemeter.testkit.hami_bytes import MiB, Proc, build_region

GPU0 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
GPU1 = "GPU-0a1b2c3d-0000-1111-2222-666677778888"
UID = "6f1c2a4e-9b7d-4c3e-8a21-0d9e8f7a6b5c"
DEV_MEM = {GPU0: 80 * 1024 * MiB, GPU1: 80 * 1024 * MiB}


def two_device_region(layout=LAYOUT_V1, **kw):
    return build_region(
        layout,
        devices=[(GPU0, 4096 * MiB, 25), (GPU1, 2048 * MiB, 50)],
        procs=[
            Proc(pid=7, hostpid=4107, mem=[(300 * MiB, 20 * MiB, 1000 * MiB), (0, 0, 0)], sm_util=[20, 0]),
            Proc(pid=8, hostpid=4108, mem=[(0, 0, 0), (300 * MiB, 10 * MiB, 500 * MiB)], sm_util=[0, 45]),
        ],
        last_kernel_time=1_790_000_000,
        **kw,
    )


@pytest.mark.parametrize("layout", [LAYOUT_V0, LAYOUT_V1])
def test_parses_both_layouts(layout):
    r = parse_region_bytes(two_device_region(layout), DEV_MEM, now_s=1_790_000_010)
    assert isinstance(r, Region), r
    assert r.layout == layout.name and r.device_num == 2 and r.proc_num == 2
    d0, d1 = r.devices
    assert (d0.uuid, d0.limit_bytes, d0.sm_limit_pct) == (GPU0, 4096 * MiB, 25)
    assert d0.used_bytes == 1320 * MiB and d0.context_bytes == 300 * MiB and d0.buffer_bytes == 1000 * MiB
    assert d0.sm_util_pct == 20 and d0.processes == 1 and d0.hostpids == [4107]
    assert (d1.used_bytes, d1.sm_util_pct, d1.hostpids) == (810 * MiB, 45, [4108])
    assert r.last_kernel_time == (1_790_000_000 if layout is LAYOUT_V1 else None)
    assert (r.major, r.minor) == ((1, 2) if layout is LAYOUT_V1 else (None, None))


def test_reads_only_header_and_live_slots():
    buf = two_device_region()
    reads = []

    def read_at(off, n):
        reads.append((off, n))
        return bytes(buf[off : off + n])

    r = hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_010)
    assert isinstance(r, Region)
    total = sum(n for _, n in reads)
    assert total < 10_000 < len(buf), reads
    assert r.bytes_read <= total


def test_four_reads_in_seqlock_order_for_any_number_of_processes():
    """The tail (proc_num), the live slots' sequence words, the header with the live slots
    (adjacent in the file), the sequence words again: each slot's copy sits between two
    reads of its sequence word, and five processes cost no more reads than one."""
    lay = LAYOUT_V1
    procs = [Proc(pid=i + 1, hostpid=4000 + i, mem=[(MiB, 0, MiB), (0, 0, 0)], sm_util=[1, 0]) for i in range(5)]
    buf = build_region(devices=[(GPU0, 0, 0), (GPU1, 0, 0)], procs=procs)
    reads = []

    def read_at(off, n):
        reads.append((off, n))
        return bytes(buf[off : off + n])

    r = hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_010)
    assert isinstance(r, Region) and [p.pid for p in r.procs] == [1, 2, 3, 4, 5], r
    sequences = (lay.procs_off + lay.seq_off, 4 * lay.slot_size + 8)
    assert reads == [(lay.tail_off, 24), sequences, (0, lay.procs_off + 5 * lay.slot_size), sequences]
    assert r.bytes_read == sum(n for _, n in reads)


def test_dead_slots_ignored_and_status_zero_skipped():
    buf = build_region(
        devices=[(GPU0, 0, 0)],
        procs=[Proc(1, 11, [(MiB, 0, MiB)], [5], status=0), Proc(2, 12, [(MiB, 0, 2 * MiB)], [7]),
               Proc(3, 13, [(MiB, 0, 50 * MiB)], [9])],
        proc_num=2,   # slot 2 is beyond proc_num: stale memory must not count
    )
    r = parse_region_bytes(buf, DEV_MEM)
    assert isinstance(r, Region)
    assert [p.pid for p in r.procs] == [2]
    assert r.devices[0].used_bytes == 3 * MiB and r.devices[0].limit_bytes is None


def test_sm_util_sum_is_capped():
    buf = build_region(devices=[(GPU0, 0, 100)], procs=[Proc(1, 11, [(MiB, 0, 0)], [80]), Proc(2, 12, [(MiB, 0, 0)], [70])])
    r = parse_region_bytes(buf, DEV_MEM)
    assert r.devices[0].sm_util_pct == 100


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda b: struct.pack_into("<i", b, 0, 1234), "bad_magic"),
        (lambda b: struct.pack_into("<I", b, 4, 7), "bad_version"),
        (lambda b: struct.pack_into("<Q", b, LAYOUT_V1.num_off, 17), "bad_device_num"),
        (lambda b: struct.pack_into("<i", b, LAYOUT_V1.tail_off, 5000), "bad_proc_num"),
        (lambda b: struct.pack_into("<i", b, LAYOUT_V1.tail_off, -1), "bad_proc_num"),
        (lambda b: struct.pack_into("<Q", b, LAYOUT_V1.procs_off + 8, 2**64 - 5), "bad_value"),
        (lambda b: struct.pack_into("<i", b, LAYOUT_V1.procs_off, -3), "bad_value"),
        (lambda b: struct.pack_into("<q", b, LAYOUT_V1.tail_off + 16, -9), "bad_value"),
    ],
)
def test_rejects_with_reason(mutate, reason):
    buf = two_device_region()
    mutate(buf)
    r = parse_region_bytes(buf, DEV_MEM, now_s=1_790_000_010)
    assert isinstance(r, RegionError) and r.reason == reason, r


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda b: b.__setitem__(slice(LAYOUT_V1.uuids_off, LAYOUT_V1.uuids_off + 4), b"\xff\xfe\x00\x01"), "bad_uuid"),
        (lambda b: b.__setitem__(slice(LAYOUT_V1.uuids_off, LAYOUT_V1.uuids_off + 1), b"\0"), "uuid_unset"),
        (lambda b: struct.pack_into("<Q", b, LAYOUT_V1.limit_off, 200 * 1024**3), "bad_value"),
    ],
)
def test_a_bad_device_costs_that_device(mutate, reason):
    buf = two_device_region()
    mutate(buf)
    r = parse_region_bytes(buf, DEV_MEM, now_s=1_790_000_010)
    assert isinstance(r, Region), r
    assert [(i, e.reason) for i, e in r.device_errors] == [(0, reason)]
    (d1,) = r.devices
    assert (d1.index, d1.uuid, d1.used_bytes, d1.sm_util_pct, d1.hostpids) == (1, GPU1, 810 * MiB, 45, [4108])


def test_truncated_and_wrong_size():
    buf = two_device_region()
    assert parse_region_bytes(bytes(buf[:100])).reason == "truncated"
    assert parse_region_bytes(bytes(buf) + b"\0" * 10_000).reason == "bad_size"
    assert isinstance(parse_region_bytes(bytes(buf) + b"\0", DEV_MEM, now_s=1_790_000_010), Region)  # HAMi-core's +1 byte


def test_seqlock_retries_a_slot_mid_write():
    buf = two_device_region()
    seq_at = LAYOUT_V1.procs_off + LAYOUT_V1.seq_off
    struct.pack_into("<Q", buf, seq_at, 5)   # odd: writer inside
    calls = {"n": 0}

    def read_at(off, n):
        calls["n"] += 1
        if calls["n"] == 4:   # the writer finishes while we wait
            struct.pack_into("<Q", buf, seq_at, 6)
        return bytes(buf[off : off + n])

    r = hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_010)
    assert isinstance(r, Region) and r.devices[0].used_bytes == 1320 * MiB

    struct.pack_into("<Q", buf, seq_at, 7)   # a writer that never finishes costs its slot only
    r = parse_region_bytes(buf, DEV_MEM, now_s=1_790_000_010)
    assert isinstance(r, Region) and r.stuck_slots == [0] and [p.pid for p in r.procs] == [8]
    assert r.devices[0].used_bytes == 0 and r.devices[1].used_bytes == 810 * MiB


def test_seqlock_moved_during_read_rereads():
    buf = two_device_region()
    seq_at = LAYOUT_V1.procs_off + LAYOUT_V1.seq_off
    data_at = LAYOUT_V1.procs_off + 8 + 16
    copied = []

    def read_at(off, n):
        out = bytes(buf[off : off + n])
        if off <= data_at < off + n and not copied:
            # a write completes right after our copy of the slot: new data, sequence +2
            copied.append(off)
            struct.pack_into("<Q", buf, data_at, 5 * MiB)
            struct.pack_into("<Q", buf, seq_at, struct.unpack_from("<Q", buf, seq_at)[0] + 2)
        return out

    r = hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_010)
    assert isinstance(r, Region) and copied
    assert r.devices[0].buffer_bytes == 5 * MiB   # the re-read value, not the stale copy


def test_a_region_read_as_it_was_is_not_parsed_again():
    buf = two_device_region()
    last = hami.LastParse()

    def read_at(off, n):
        return bytes(buf[off : off + n])

    first = hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_010, last=last)
    assert isinstance(first, Region), first
    assert hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_020, last=last) is first
    seq_at = LAYOUT_V1.procs_off + LAYOUT_V1.seq_off
    struct.pack_into("<Q", buf, LAYOUT_V1.procs_off + 8 + 16, 5 * MiB)   # a write: new data and sequence + 2
    struct.pack_into("<Q", buf, seq_at, struct.unpack_from("<Q", buf, seq_at)[0] + 2)
    again = hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_030, last=last)
    assert again is not first and again.devices[0].buffer_bytes == 5 * MiB
    # the same bytes can still give another answer: an earlier clock, a GPU with less memory
    earlier = hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_789_999_000, last=last)
    assert isinstance(earlier, RegionError) and "future" in earlier.detail
    assert hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_030, last=last).devices[0].buffer_bytes == 5 * MiB
    smaller = {GPU0: 1024 * MiB, GPU1: DEV_MEM[GPU1]}
    r = hami.parse_region(read_at, len(buf), smaller, now_s=1_790_000_030, last=last)
    assert [(i, e.reason) for i, e in r.device_errors] == [(0, "bad_value")]


def test_a_parse_that_read_a_slot_again_is_not_kept():
    buf = two_device_region()
    struct.pack_into("<Q", buf, LAYOUT_V1.procs_off + LAYOUT_V1.seq_off, 7)   # a writer that died mid-update
    last, reads = hami.LastParse(), []

    def read_at(off, n):
        reads.append(n)
        return bytes(buf[off : off + n])

    first = hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_010, last=last)
    once = len(reads)
    second = hami.parse_region(read_at, len(buf), DEV_MEM, now_s=1_790_000_020, last=last)
    assert first.stuck_slots == second.stuck_slots == [0] and second is not first and len(reads) == 2 * once


def _write_container(root, name, data, cache="vgpu.cache"):
    d = root / "containers" / name
    d.mkdir(parents=True)
    (d / cache).write_bytes(bytes(data))
    return d / cache


def test_discover_and_read_files_read_only(tmp_path):
    path = _write_container(tmp_path, f"{UID}_trainer", two_device_region())
    _write_container(tmp_path, "../../etc_passwd" .replace("/", "x"), b"x")
    os.chmod(path, 0o444)   # a writer would fail: we only ever read
    files, errors = discover(str(tmp_path))
    assert [(f.pod_uid, f.container) for f in files] == [(UID, "trainer")]
    assert [e.reason for _, e in errors] == ["bad_name"]
    r = read_region_file(files[0].path, str(tmp_path), DEV_MEM, now_s=1_790_000_010)
    assert isinstance(r, Region) and r.devices[1].used_bytes == 810 * MiB


def test_symlinks_are_refused(tmp_path):
    outside = tmp_path / "outside.cache"
    outside.write_bytes(bytes(two_device_region()))
    hami_dir = tmp_path / "hami"
    d = hami_dir / "containers" / f"{UID}_web"
    d.mkdir(parents=True)
    (d / "vgpu.cache").symlink_to(outside)
    files, _ = discover(str(hami_dir))
    r = read_region_file(str(d / "vgpu.cache"), str(hami_dir), DEV_MEM)
    assert isinstance(r, RegionError) and r.reason in ("outside_dir", "symlink")
    # a link to a file inside the dir is still refused by O_NOFOLLOW
    inside = hami_dir / "real.cache"
    inside.write_bytes(bytes(two_device_region()))
    (d / "vgpu.cache").unlink()
    (d / "vgpu.cache").symlink_to(inside)
    r = read_region_file(str(d / "vgpu.cache"), str(hami_dir), DEV_MEM)
    assert isinstance(r, RegionError) and r.reason == "symlink"
    # a linked container directory is refused at discovery
    (hami_dir / "containers" / f"{UID}_evil").symlink_to(tmp_path)
    files, errors = discover(str(hami_dir))
    assert ("symlink" in [e.reason for _, e in errors]) and all(f.container != "evil" for f in files)


def _scan(tmp_path, listings):
    files, errors = discover(str(tmp_path), listings)
    return sorted(f.cache_name for f in files), sorted(e.reason for _, e in errors)


def test_listings_list_a_directory_again_only_when_it_changed(tmp_path, monkeypatch):
    d = _write_container(tmp_path, f"{UID}_trainer", two_device_region()).parent
    listed = []
    real_listdir = os.listdir
    monkeypatch.setattr(hami.os, "listdir", lambda p: listed.append(p) or real_listdir(p))
    later = hami.Listings(clock_ns=lambda: time.time_ns() + 10 * hami.Listings.RACY_NS)
    assert _scan(tmp_path, later) == (["vgpu.cache"], []) and len(listed) == 1
    assert _scan(tmp_path, later) == (["vgpu.cache"], []) and len(listed) == 1   # unchanged: kept
    st = d.stat()
    (d / "second.cache").write_bytes(b"x")
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))   # mtime set back: the ctime still moved
    assert _scan(tmp_path, later) == ([], ["ambiguous"]) and len(listed) == 2


def test_a_listing_as_young_as_the_directory_is_not_kept(tmp_path, monkeypatch):
    _write_container(tmp_path, f"{UID}_trainer", two_device_region())
    listed = []
    real_listdir = os.listdir
    monkeypatch.setattr(hami.os, "listdir", lambda p: listed.append(p) or real_listdir(p))
    now = hami.Listings()   # the directory changed just now: within the timestamp granularity
    _scan(tmp_path, now)
    _scan(tmp_path, now)
    assert len(listed) == 2


def test_region_source_parses_a_file_again_only_when_its_bytes_changed(tmp_path):
    path = _write_container(tmp_path, f"{UID}_trainer", two_device_region())
    src = hami.RegionSource(str(tmp_path))
    files, _ = src.scan()
    ((_, first),) = src.read(files, DEV_MEM, 1_790_000_010)
    ((_, same),) = src.read(files, DEV_MEM, 1_790_000_020)
    assert isinstance(first, Region) and same is first
    buf = bytearray(path.read_bytes())
    seq_at = LAYOUT_V1.procs_off + LAYOUT_V1.seq_off
    struct.pack_into("<Q", buf, LAYOUT_V1.procs_off + 8 + 16, 5 * MiB)
    struct.pack_into("<Q", buf, seq_at, struct.unpack_from("<Q", buf, seq_at)[0] + 2)
    path.write_bytes(bytes(buf))
    ((_, changed),) = src.read(files, DEV_MEM, 1_790_000_030)
    assert changed.devices[0].buffer_bytes == 5 * MiB


def test_a_young_directory_listed_again_follows_its_renamed_file(tmp_path):
    d = _write_container(tmp_path, f"{UID}_trainer", two_device_region()).parent
    young = hami.Listings()   # each scan lists the directory again; its file may change meanwhile
    first, _ = discover(str(tmp_path), young)
    again, _ = discover(str(tmp_path), young)
    assert [f.cache_name for f in first] == [f.cache_name for f in again] == ["vgpu.cache"]
    (d / "vgpu.cache").rename(d / "renamed.cache")
    (renamed,), errors = discover(str(tmp_path), young)
    assert renamed.cache_name == "renamed.cache" and renamed.path.endswith("renamed.cache") and not errors
    assert isinstance(read_region_file(renamed.path, str(tmp_path), DEV_MEM, now_s=1_790_000_010), Region)


def test_dir_name_validation():
    assert hami.parse_dir_name(f"{UID}_c-1") == (UID, "c-1")
    for bad in ["", "x_y", f"{UID}_", f"{UID}_UPPER", f"{UID}_a/b", f"{UID}_..", f"{UID}_c\x00"]:
        assert hami.parse_dir_name(bad) is None, bad


def test_hami_dump_prints_json(tmp_path, capsys):
    from slicemeter.exporter import hami_dump
    from slicemeter.cli import main

    path = _write_container(tmp_path, f"{UID}_trainer", two_device_region(LAYOUT_V0))
    assert main(["hami-dump", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"] == "v0" and out["devices"][0]["uuid"] == GPU0
    assert out["devices"][0]["used_bytes"] == 1320 * MiB and len(out["procs"]) == 2
    bad = tmp_path / "bad.cache"
    bad.write_bytes(b"\0" * 64)
    assert main(["hami-dump", str(bad)]) == 1
    assert "bad_magic" in capsys.readouterr().err
    assert hami_dump is not None


def test_hami_dump_names_skipped_devices_and_slots(tmp_path, capsys):
    from slicemeter.cli import main

    buf = two_device_region()
    buf[LAYOUT_V1.uuids_off : LAYOUT_V1.uuids_off + 96] = bytes(96)
    struct.pack_into("<Q", buf, LAYOUT_V1.procs_off + LAYOUT_V1.slot_size + LAYOUT_V1.seq_off, 9)
    path = _write_container(tmp_path, f"{UID}_trainer", bytes(buf) + b"\0")
    assert main(["hami-dump", str(path)]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["stuck_slots"] == [1] and out["device_errors"][0][0] == 0
    assert out["device_errors"][0][1]["reason"] == "uuid_unset"
    assert "device 0 skipped: uuid_unset" in cap.err and "slot 1 skipped" in cap.err


def _settled_source(tmp_path, **kw):
    """A RegionSource whose listings see every directory as settled (older than RACY_NS)."""
    later = hami.Listings(clock_ns=lambda: time.time_ns() + 10 * hami.Listings.RACY_NS)
    return hami.RegionSource(str(tmp_path), listings=later, **kw)


def _tick(src, now_s=1_790_000_010):
    files, _ = src.scan()
    return {f.container: r for f, r in src.read(files, DEV_MEM, now_s)}


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_a_settled_region_file_stays_open_and_is_not_opened_again(tmp_path, monkeypatch):
    _write_container(tmp_path, f"{UID}_trainer", two_device_region())
    src = _settled_source(tmp_path)
    assert isinstance(_tick(src)["trainer"], Region) and src.open_files == 1
    opened = []
    real_open = os.open
    monkeypatch.setattr(hami.os, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    assert isinstance(_tick(src)["trainer"], Region) and opened == [] and src.open_files == 1
    src.close()
    assert src.open_files == 0


def test_a_replaced_region_file_is_read_from_its_new_inode_next_tick(tmp_path):
    path = _write_container(tmp_path, f"{UID}_trainer", two_device_region())
    src = _settled_source(tmp_path)
    assert _tick(src)["trainer"].devices[0].buffer_bytes == 1000 * MiB
    fresh = two_device_region()
    struct.pack_into("<Q", fresh, LAYOUT_V1.procs_off + 8 + 16, 5 * MiB)
    (path.parent / "new.tmp").write_bytes(bytes(fresh))
    os.replace(path.parent / "new.tmp", path)   # same name, another inode: the kept one is stale
    assert _tick(src)["trainer"].devices[0].buffer_bytes == 5 * MiB


def test_a_young_directory_keeps_no_file_open(tmp_path):
    _write_container(tmp_path, f"{UID}_trainer", two_device_region())
    src = hami.RegionSource(str(tmp_path))   # the directory changed just now: its file may be replaced unseen
    assert isinstance(_tick(src)["trainer"], Region) and src.open_files == 0


def test_a_deleted_containers_file_is_closed_in_the_next_tick(tmp_path):
    import shutil

    before = _open_fds()
    _write_container(tmp_path, f"{UID}_trainer", two_device_region())
    keep = _write_container(tmp_path, f"{UID}_web", two_device_region())
    src = _settled_source(tmp_path)
    assert sorted(_tick(src)) == ["trainer", "web"] and src.open_files == 2 and _open_fds() == before + 2
    shutil.rmtree(tmp_path / "containers" / f"{UID}_trainer")
    assert sorted(_tick(src)) == ["web"] and src.open_files == 1 and _open_fds() == before + 1
    files, _ = src.scan()
    src.read([f for f in files if f.path != str(keep)], DEV_MEM, 1_790_000_030)   # a file not read is closed
    assert src.open_files == 0 and _open_fds() == before


def test_region_files_kept_open_are_capped(tmp_path):
    names = ["a", "b", "c"]
    for n in names:
        _write_container(tmp_path, f"{UID}_{n}", two_device_region())
    src = _settled_source(tmp_path, max_open=2)
    for now in (1_790_000_010, 1_790_000_020, 1_790_000_030):
        regions = _tick(src, now)
        assert sorted(regions) == names and all(isinstance(r, Region) for r in regions.values())
        assert src.open_files == 2


def test_a_kept_file_is_not_reused_without_a_scan_in_between(tmp_path, monkeypatch):
    _write_container(tmp_path, f"{UID}_trainer", two_device_region())
    src = _settled_source(tmp_path)
    files, _ = src.scan()
    src.read(files, DEV_MEM, 1_790_000_010)
    opened = []
    real_open = os.open
    monkeypatch.setattr(hami.os, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    src.read(files, DEV_MEM, 1_790_000_020)   # nothing looked at the directory since the file was opened
    assert "vgpu.cache" in opened
