import struct

import pyarrow as pa
import pytest

from slicemeter import tick as wire
from slicemeter.tick import GpuReading, SliceReading, Tick, TickDecodeError


def sample_tick(ts_ms=1_700_000_000_000, node="node-a"):
    return Tick(
        node=node, cluster="https://tenant-a.kamaji.example:6443", ts_ms=ts_ms, interval_ms=10_000,
        gpus=[GpuReading("GPU-1111", 0, "NVIDIA A100-SXM4-80GB", 80 * 2**30, 12 * 2**30, 0.375, 0.125, 210.5, 1.5e6, 2)],
        slices=[
            SliceReading("uid-1", "trainer", "GPU-1111", pod="train-0", namespace="ml", vdevice_index=0,
                         hami_memory_limit_bytes=20 * 2**30, hami_memory_used_bytes=10 * 2**30,
                         hami_context_bytes=2**28, hami_module_bytes=2**27, hami_buffer_bytes=9 * 2**30,
                         sm_limit_ratio=0.25, sm_util_ratio=0.1875, last_kernel_age_s=0.5, process_count=1,
                         nvml_memory_used_bytes=10 * 2**30, alloc_memory_bytes=20 * 2**30,
                         alloc_cores_ratio=0.25, whole_gpu=False, source="hami"),
            SliceReading("uid-2", "idle", "GPU-1111", pod="notebook", namespace="ds", source="annotation"),
        ],
    )


def test_round_trip_preserves_every_field():
    ticks = [sample_tick(), sample_tick(ts_ms=1_700_000_010_000)]
    batch = wire.decode(wire.encode_ticks(ticks))
    assert batch.sample_count == 6
    assert batch.minor == wire.SCHEMA_MINOR
    assert wire.batch_to_ticks(batch) == ticks


def test_round_trip_keeps_float_values_and_nulls():
    batch = wire.decode(wire.encode_ticks([sample_tick()]))
    row = batch.slices.to_pylist()[1]
    assert row["pod"] == "notebook" and row["hami_memory_used_bytes"] is None and row["whole_gpu"] is None
    assert batch.gpus.column("power_watts").to_pylist() == [pytest.approx(210.5)]


def test_a_message_carries_one_node():
    with pytest.raises(ValueError, match="one node"):
        wire.encode_ticks([sample_tick(node="a"), sample_tick(node="b")])


def test_unknown_major_version_is_rejected():
    payload = bytearray(wire.encode_ticks([sample_tick()]))
    struct.pack_into("<H", payload, 4, wire.SCHEMA_MAJOR + 1)
    with pytest.raises(TickDecodeError, match="unsupported Tick schema major version 2"):
        wire.decode(bytes(payload))


def test_newer_minor_with_extra_column_is_read():
    gpus, slices = wire.ticks_to_tables([sample_tick()])
    gpus = gpus.append_column("board_humidity_ratio", pa.array([0.5], pa.float32()))
    g, s = wire._ipc_bytes(gpus), wire._ipc_bytes(slices)
    payload = struct.pack("<4sHH", b"SMTK", wire.SCHEMA_MAJOR, wire.SCHEMA_MINOR + 3) + struct.pack("<I", len(g)) + g + struct.pack("<I", len(s)) + s
    batch = wire.decode(payload)
    assert batch.minor == wire.SCHEMA_MINOR + 3
    assert "board_humidity_ratio" not in batch.gpus.column_names
    assert batch.gpus.column("gpu_uuid").to_pylist() == ["GPU-1111"]


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"", "shorter than"),
        (b"JSON{}..", "bad magic"),
        (b"SMTK\x01\x00\x00\x00", "truncated message: no length"),
        (b"SMTK\x01\x00\x00\x00\xff\x00\x00\x00abc", "truncated message: gpu table claims 255 bytes"),
        (b"SMTK\x01\x00\x00\x00\x03\x00\x00\x00abc", "malformed gpu table"),
    ],
)
def test_malformed_payloads_name_the_problem(payload, reason):
    with pytest.raises(TickDecodeError, match=reason):
        wire.decode(payload)


def test_trailing_garbage_is_rejected():
    with pytest.raises(TickDecodeError, match="trailing"):
        wire.decode(wire.encode_ticks([sample_tick()]) + b"x")


def test_missing_required_column_is_rejected():
    gpus, slices = wire.ticks_to_tables([sample_tick()])
    gpus = gpus.drop_columns(["gpu_uuid"])
    g, s = wire._ipc_bytes(gpus), wire._ipc_bytes(slices)
    payload = struct.pack("<4sHH", b"SMTK", 1, 0) + struct.pack("<I", len(g)) + g + struct.pack("<I", len(s)) + s
    with pytest.raises(TickDecodeError, match="required column 'gpu_uuid' is missing"):
        wire.decode(payload)


def test_a_1_0_message_without_usage_verified_decodes_as_unknown():
    """An exporter of Tick 1.0 sends no usage_verified column: the slice's check is unknown
    (null), neither verified nor flagged."""
    gpus, slices = wire.ticks_to_tables([sample_tick()])
    slices = slices.drop_columns(["usage_verified"])
    g, s = wire._ipc_bytes(gpus), wire._ipc_bytes(slices)
    payload = struct.pack("<4sHH", b"SMTK", 1, 0) + struct.pack("<I", len(g)) + g + struct.pack("<I", len(s)) + s
    batch = wire.decode(payload)
    assert batch.minor == 0 and wire.SCHEMA_VERSION == "1.3"
    assert batch.slices.column("usage_verified").to_pylist() == [None] * slices.num_rows


def test_a_1_1_message_without_dra_or_health_columns_decodes_as_unknown():
    """A 1.1 exporter sends no claim, driver, share or health columns: all null, read as a
    device-plugin slice and a GPU of unknown health."""
    gpus, slices = wire.ticks_to_tables([sample_tick()])
    new_gpu = [f.name for f in wire.GPU_SCHEMA][wire.GPU_SCHEMA.get_field_index("driver"):]
    new_slice = [f.name for f in wire.SLICE_SCHEMA][wire.SLICE_SCHEMA.get_field_index("claim"):]
    g, s = wire._ipc_bytes(gpus.drop_columns(new_gpu)), wire._ipc_bytes(slices.drop_columns(new_slice))
    payload = struct.pack("<4sHH", b"SMTK", 1, 1) + struct.pack("<I", len(g)) + g + struct.pack("<I", len(s)) + s
    batch = wire.decode(payload)
    assert batch.minor == 1 and len(new_gpu) == 19 + 1 and len(new_slice) == 5   # + 1.3's device_health
    for name in new_gpu:
        assert batch.gpus.column(name).to_pylist() == [None] * gpus.num_rows, name
    for name in new_slice:
        assert batch.slices.column(name).to_pylist() == [None] * slices.num_rows, name


def test_a_1_2_message_without_device_health_decodes_as_not_reported():
    """A 1.2 exporter does not read Kubernetes' device health: null, never Healthy."""
    tick = sample_tick()
    tick.gpus[0].device_health = 1
    gpus, slices = wire.ticks_to_tables([tick])
    assert gpus.column("device_health").to_pylist()[0] == 1
    g, s = wire._ipc_bytes(gpus.drop_columns(["device_health"])), wire._ipc_bytes(slices)
    payload = struct.pack("<4sHH", b"SMTK", 1, 2) + struct.pack("<I", len(g)) + g + struct.pack("<I", len(s)) + s
    batch = wire.decode(payload)
    assert batch.minor == 2 and batch.gpus.column("device_health").to_pylist() == [None] * gpus.num_rows
    assert wire.decode(wire.encode_ticks([tick])).gpus.column("device_health").to_pylist()[0] == 1
