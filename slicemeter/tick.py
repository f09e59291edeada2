"""The Tick wire contract: the single seam between a node and the centre.

A Tick is everything one node saw at one instant: its GPUs and every container slice on
them. On the wire a message carries one or more Ticks *of one node* as two columnar Arrow
tables (GPU rows and slice rows); node-level fields (timestamp, node, cluster, interval)
are repeated per row so that ingest can append the tables to DuckDB without reshaping.
The live exporter sends one Tick per message; backfills batch many Ticks of a node into
one message, which is what lets ingest run at millions of samples per second.

Envelope (all integers little-endian):

    b"SMTK" | u16 major | u16 minor | u32 n_gpu | <gpu IPC stream> | u32 n_slice | <slice IPC stream>

A decoder accepts any minor of its own major (unknown columns are ignored, missing
optional columns become nulls) and rejects any other major.  docs/wire-format.md explains
the choice.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import math
import struct
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

MAGIC = b"SMTK"
SCHEMA_MAJOR = 1
SCHEMA_MINOR = 3
SCHEMA_VERSION = f"{SCHEMA_MAJOR}.{SCHEMA_MINOR}"
_HEADER = struct.Struct("<4sHH")
_LEN = struct.Struct("<I")

_DICT_STR = pa.dictionary(pa.int32(), pa.string())

# Columns shared by both tables: when, where and over which interval.
_TICK_FIELDS = [
    pa.field("ts_ms", pa.int64(), nullable=False),          # UTC epoch milliseconds
    pa.field("interval_ms", pa.int32(), nullable=False),    # time this sample stands for
    pa.field("node", _DICT_STR, nullable=False),
    pa.field("cluster", _DICT_STR, nullable=False),         # Kamaji tenant cluster identity
]

GPU_SCHEMA = pa.schema(
    _TICK_FIELDS
    + [
        pa.field("gpu_uuid", _DICT_STR, nullable=False),
        pa.field("gpu_index", pa.int16(), nullable=False),
        pa.field("model", _DICT_STR),
        pa.field("memory_total_bytes", pa.int64()),
        pa.field("memory_used_bytes", pa.int64()),
        pa.field("sm_util_ratio", pa.float32()),            # NVML utilization.gpu / 100
        pa.field("mem_util_ratio", pa.float32()),           # NVML utilization.memory / 100
        pa.field("power_watts", pa.float32()),
        pa.field("energy_joules", pa.float64()),            # NVML total energy counter, J
        pa.field("slice_count", pa.int16()),
        # 1.2: the DRA driver that published the device (null: not published through DRA); a
        # device no NVML reads (any vendor, metered by allocation) has only identity columns
        pa.field("driver", _DICT_STR),
        # 1.2: health, null where the board or NVML does not answer
        pa.field("temperature_celsius", pa.float32()),
        pa.field("memory_temperature_celsius", pa.float32()),
        pa.field("fan_speed_ratio", pa.float32()),
        pa.field("ecc_corrected_volatile", pa.int64()),
        pa.field("ecc_uncorrected_volatile", pa.int64()),
        pa.field("ecc_corrected_aggregate", pa.int64()),
        pa.field("ecc_uncorrected_aggregate", pa.int64()),
        pa.field("retired_pages_pending", pa.bool_()),
        pa.field("remapped_rows_pending", pa.bool_()),
        pa.field("remapped_rows_failed", pa.bool_()),
        pa.field("pcie_replay_total", pa.int64()),
        pa.field("clock_event_reasons", pa.int64()),          # NVML clocks event reasons bitmask
        pa.field("power_violation_seconds_total", pa.float64()),
        pa.field("thermal_violation_seconds_total", pa.float64()),
        pa.field("xid_events", pa.int32()),                   # Xid events since the previous Tick
        pa.field("xid_last_code", pa.int32()),                # the last of them
        pa.field("xid_critical_code", pa.int32()),            # the last of a critical class
        pa.field("gpu_lost", pa.bool_()),                     # NVML: fell off the bus / lost
        # 1.3: the device's health as Kubernetes reports it (pod status allocatedResourcesStatus,
        # ResourceClaim device conditions), any vendor: 0 Healthy, 1 Unhealthy, 2 Unknown;
        # null where nothing reports it (docs/health.md)
        pa.field("device_health", pa.int8()),
    ],
    metadata={b"slicemeter.table": b"gpu", b"slicemeter.schema": SCHEMA_VERSION.encode()},
)

SLICE_SCHEMA = pa.schema(
    _TICK_FIELDS
    + [
        pa.field("pod_uid", _DICT_STR, nullable=False),
        pa.field("pod", _DICT_STR),
        pa.field("namespace", _DICT_STR),
        pa.field("container", _DICT_STR, nullable=False),
        pa.field("gpu_uuid", _DICT_STR, nullable=False),
        pa.field("vdevice_index", pa.int16()),
        # HAMi's view (written from inside the tenant's container: untrusted)
        pa.field("hami_memory_limit_bytes", pa.int64()),
        pa.field("hami_memory_used_bytes", pa.int64()),
        pa.field("hami_context_bytes", pa.int64()),
        pa.field("hami_module_bytes", pa.int64()),
        pa.field("hami_buffer_bytes", pa.int64()),
        pa.field("sm_limit_ratio", pa.float32()),           # HAMi sm_limit / 100
        pa.field("sm_util_ratio", pa.float32()),
        pa.field("last_kernel_age_s", pa.float32()),        # null: never ran a kernel
        pa.field("process_count", pa.int16()),
        # NVML's view of the same processes (host PIDs joined with HAMi's slots)
        pa.field("nvml_memory_used_bytes", pa.int64()),
        # What HAMi granted (pod annotation hami.io/vgpu-devices-allocated)
        pa.field("alloc_memory_bytes", pa.int64()),
        pa.field("alloc_cores_ratio", pa.float32()),
        pa.field("whole_gpu", pa.bool_()),
        pa.field("source", _DICT_STR),                      # hami | annotation | cgroup
        # 1.1: whether the exporter could check the slice's usage against NVML's processes
        # (null: an older exporter, unknown)
        pa.field("usage_verified", pa.bool_()),
        # 1.2: a slice granted through a DRA ResourceClaim (null for the device plugin's): the
        # claim, its driver, and the slice's allocation share of the device by memory and by
        # cores (a device without those capacities: both its one share), after the split
        pa.field("claim", _DICT_STR),
        pa.field("claim_uid", _DICT_STR),
        pa.field("driver", _DICT_STR),
        pa.field("alloc_mem_share_ratio", pa.float64()),
        pa.field("alloc_cores_share_ratio", pa.float64()),
    ],
    metadata={b"slicemeter.table": b"slice", b"slicemeter.schema": SCHEMA_VERSION.encode()},
)


class TickDecodeError(ValueError):
    """A message that is not a Tick this decoder can read; the text says why."""


@dataclass(slots=True)
class GpuReading:
    gpu_uuid: str
    gpu_index: int
    model: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    sm_util_ratio: float | None = None
    mem_util_ratio: float | None = None
    power_watts: float | None = None
    energy_joules: float | None = None
    slice_count: int | None = None
    driver: str | None = None
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    fan_speed_ratio: float | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    pcie_replay_total: int | None = None
    clock_event_reasons: int | None = None
    power_violation_seconds_total: float | None = None
    thermal_violation_seconds_total: float | None = None
    xid_events: int | None = None
    xid_last_code: int | None = None
    xid_critical_code: int | None = None
    gpu_lost: bool | None = None
    device_health: int | None = None


@dataclass(slots=True)
class SliceReading:
    pod_uid: str
    container: str
    gpu_uuid: str
    pod: str | None = None
    namespace: str | None = None
    vdevice_index: int | None = None
    hami_memory_limit_bytes: int | None = None
    hami_memory_used_bytes: int | None = None
    hami_context_bytes: int | None = None
    hami_module_bytes: int | None = None
    hami_buffer_bytes: int | None = None
    sm_limit_ratio: float | None = None
    sm_util_ratio: float | None = None
    last_kernel_age_s: float | None = None
    process_count: int | None = None
    nvml_memory_used_bytes: int | None = None
    alloc_memory_bytes: int | None = None
    alloc_cores_ratio: float | None = None
    whole_gpu: bool | None = None
    source: str | None = None
    usage_verified: bool | None = None
    claim: str | None = None
    claim_uid: str | None = None
    driver: str | None = None
    alloc_mem_share_ratio: float | None = None
    alloc_cores_share_ratio: float | None = None


@dataclass(slots=True)
class Tick:
    node: str
    cluster: str
    ts_ms: int
    interval_ms: int
    gpus: list[GpuReading] = field(default_factory=list)
    slices: list[SliceReading] = field(default_factory=list)

    def to_json_dict(self) -> dict:
        return dataclasses.asdict(self) | {"schema": SCHEMA_VERSION}


@dataclass(slots=True)
class TickBatch:
    """Decoded message: columnar GPU and slice rows of one or more Ticks of one node."""

    gpus: pa.Table
    slices: pa.Table
    minor: int
    decoded_bytes: int = 0      # what its tables take in memory (the IPC bodies, decompressed)
    _node_instants: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def sample_count(self) -> int:
        return self.gpus.num_rows + self.slices.num_rows

    def node_instants(self) -> tuple[str | None, np.ndarray]:
        """The message's node and the instants (ts_ms, sorted, each once) it reports, from its
        GPU rows and its slice rows alike (a message of slice rows alone claims its instants
        too). Found once per message: ingest's duplicate check and its batch both read it."""
        if self._node_instants is None:
            table = self.gpus if self.gpus.num_rows else self.slices
            node = table.column("node")[0].as_py() if table.num_rows else None
            instants = np.union1d(self.gpus.column("ts_ms").to_numpy(), self.slices.column("ts_ms").to_numpy())
            self._node_instants = (node, instants)
        return self._node_instants


def _rows_table(schema: pa.Schema, ticks: Sequence[Tick], attr: str) -> pa.Table:
    names = [f.name for f in schema]
    columns: dict[str, list] = {n: [] for n in names}
    tick_names = ("ts_ms", "interval_ms", "node", "cluster")
    own_names = [n for n in names if n not in tick_names]
    for tick in ticks:
        for reading in getattr(tick, attr):
            columns["ts_ms"].append(tick.ts_ms)
            columns["interval_ms"].append(tick.interval_ms)
            columns["node"].append(tick.node)
            columns["cluster"].append(tick.cluster)
            for n in own_names:
                columns[n].append(getattr(reading, n))
    return pa.Table.from_pydict(columns, schema=schema)


def table_with_nulls(schema: pa.Schema, columns: dict[str, pa.Array] | list[pa.Array], rows: int) -> pa.Table:
    """A table in `schema` from the columns given (by name, or the first ones in order); every
    other column null: columnar producers (simulated history, test data) fill what they model."""
    if isinstance(columns, list):
        columns = {f.name: a for f, a in zip(schema, columns)}
    return pa.Table.from_arrays([columns[f.name] if f.name in columns else pa.nulls(rows, f.type) for f in schema],
                                schema=schema)


def _utf8_safe(value):
    """A string Arrow can encode: a lone surrogate (a pod or container name read as bytes
    with surrogateescape) becomes its backslash escape instead of failing the whole Tick."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _utf8_safe_tick(tick: Tick) -> Tick:
    def clean(reading):
        return dataclasses.replace(reading, **{f.name: _utf8_safe(getattr(reading, f.name))
                                               for f in dataclasses.fields(reading)})

    return Tick(node=_utf8_safe(tick.node), cluster=_utf8_safe(tick.cluster), ts_ms=tick.ts_ms,
                interval_ms=tick.interval_ms, gpus=[clean(g) for g in tick.gpus],
                slices=[clean(s) for s in tick.slices])


def ticks_to_tables(ticks: Sequence[Tick]) -> tuple[pa.Table, pa.Table]:
    if not ticks:
        raise ValueError("no Ticks to encode")
    nodes = {t.node for t in ticks}
    if len(nodes) != 1:
        raise ValueError(f"a message carries Ticks of one node, got {sorted(nodes)}")
    try:
        return _rows_table(GPU_SCHEMA, ticks, "gpus"), _rows_table(SLICE_SCHEMA, ticks, "slices")
    except UnicodeEncodeError:   # rare: clean every string only then
        ticks = [_utf8_safe_tick(t) for t in ticks]
        return _rows_table(GPU_SCHEMA, ticks, "gpus"), _rows_table(SLICE_SCHEMA, ticks, "slices")


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(table.num_rows, 1))
    return sink.getvalue()


def encode_tables(gpus: pa.Table, slices: pa.Table) -> bytes:
    """Encode columnar GPU and slice rows (already in GPU_SCHEMA / SLICE_SCHEMA)."""
    if not gpus.schema.equals(GPU_SCHEMA, check_metadata=False):
        gpus = gpus.cast(GPU_SCHEMA)
    if not slices.schema.equals(SLICE_SCHEMA, check_metadata=False):
        slices = slices.cast(SLICE_SCHEMA)
    g, s = _ipc_bytes(gpus), _ipc_bytes(slices)
    return b"".join(
        [_HEADER.pack(MAGIC, SCHEMA_MAJOR, SCHEMA_MINOR), _LEN.pack(len(g)), g, _LEN.pack(len(s)), s]
    )


def encode_ticks(ticks: Sequence[Tick]) -> bytes:
    return encode_tables(*ticks_to_tables(ticks))


# ---- what one message may make the decoder allocate -----------------------------------
# A message is untrusted until decoded, and Arrow believes the lengths, counts and
# compressed sizes it declares: these bounds are checked on the IPC headers themselves
# (`_ipc_body_bytes`) before Arrow allocates or decompresses anything, and the arrays are
# validated in full before anything reads them.

# Bytes a message's tables may take once decoded (decompressed), both sections together. A
# backfill message (simulator/backfill.py, at most ~50,000 rows) decodes to under 8 MiB.
MAX_DECODED_BYTES = 64 << 20
MAX_ROWS = 1 << 20          # rows of one table (and values of one dictionary) in a message
MAX_COLUMNS = 64            # columns of one table (this version has 35 slice columns)
# Longest value of each string column, in UTF-8 bytes: Kubernetes names (RFC 1123 subdomain
# 253, label 63), GPU UUIDs and models under the subdomain bound, a cluster's API server URL.
NAME_MAX_BYTES = {
    "node": 253, "pod": 253, "pod_uid": 253, "gpu_uuid": 253, "model": 253,
    "namespace": 63, "container": 63, "source": 63, "cluster": 1024,
    "driver": 253, "claim": 253, "claim_uid": 36,
}

_U32, _I32, _U16, _U8, _I64 = (struct.Struct("<I"), struct.Struct("<i"), struct.Struct("<H"), struct.Struct("<B"),
                               struct.Struct("<q"))
_NODE_OR_BUFFER = struct.Struct("<qq")      # FieldNode (length, null_count), Buffer (offset, length)
# Message.fbs: the header union's types, and each table's field slots
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3


class _FlatTable:
    """Just enough of a FlatBuffers reader for Arrow IPC message headers; every read is
    bounds-checked, so a lying header is a TickDecodeError, never a wild read."""

    def __init__(self, buf: memoryview, pos: int, what: str):
        self.buf, self.pos, self.what = buf, pos, what
        vtable = pos - self._read(_I32, pos)
        self.vtable, self.vtable_size = vtable, self._read(_U16, vtable)

    def _read(self, fmt: struct.Struct, pos: int):
        if pos < 0 or pos + fmt.size > len(self.buf):
            raise TickDecodeError(f"malformed {self.what} table: an IPC header points outside itself")
        return fmt.unpack_from(self.buf, pos)[0]

    def _field(self, slot: int) -> int | None:
        if 4 + 2 * slot + 2 > self.vtable_size:
            return None
        offset = self._read(_U16, self.vtable + 4 + 2 * slot)
        return self.pos + offset if offset else None

    def scalar(self, slot: int, fmt: struct.Struct, default: int = 0) -> int:
        pos = self._field(slot)
        return default if pos is None else self._read(fmt, pos)

    def table(self, slot: int) -> "_FlatTable | None":
        pos = self._field(slot)
        return None if pos is None else _FlatTable(self.buf, pos + self._read(_U32, pos), self.what)

    def structs(self, slot: int, fmt: struct.Struct, cap: int, name: str) -> list[tuple]:
        """A vector of structs, refused past `cap` entries before any is read."""
        pos = self._field(slot)
        if pos is None:
            return []
        start = pos + self._read(_U32, pos)
        count = self._read(_U32, start)
        if count > cap:
            raise TickDecodeError(f"{self.what} table: {count} {name}, over the maximum of {cap}")
        if start + 4 + count * fmt.size > len(self.buf):
            raise TickDecodeError(f"malformed {self.what} table: its {name} run past the IPC header")
        return [fmt.unpack_from(self.buf, start + 4 + i * fmt.size) for i in range(count)]

    def count(self, slot: int) -> int:
        pos = self._field(slot)
        return 0 if pos is None else self._read(_U32, pos + self._read(_U32, pos))


def _batch_bytes(batch: _FlatTable, body: memoryview, what: str) -> int:
    """Bytes a record (or dictionary) batch decodes to, from its declared buffers, after
    checking its row and null counts and that every buffer lies inside its body."""
    rows = batch.scalar(0, _I64)
    if not 0 <= rows <= MAX_ROWS:
        raise TickDecodeError(f"{what} table: a batch of {rows} rows, over the maximum of {MAX_ROWS}")
    for length, nulls in batch.structs(1, _NODE_OR_BUFFER, MAX_COLUMNS, "columns"):
        if not 0 <= length <= MAX_ROWS or not 0 <= nulls <= length:
            raise TickDecodeError(f"{what} table: a column claims {nulls} null(s) in {length} rows")
    compressed = batch.table(3) is not None
    total = 0
    for offset, length in batch.structs(2, _NODE_OR_BUFFER, 4 * MAX_COLUMNS, "buffers"):
        if offset < 0 or length < 0 or offset + length > len(body):
            raise TickDecodeError(f"{what} table: a buffer at {offset} of {length} bytes lies outside "
                                  f"its {len(body)}-byte body")
        if compressed and length:
            if length < _I64.size:
                raise TickDecodeError(f"{what} table: a compressed buffer of {length} bytes has no length prefix")
            declared = _I64.unpack_from(body, offset)[0]   # -1: stored uncompressed
            if declared < -1:
                raise TickDecodeError(f"{what} table: a compressed buffer declares {declared} bytes")
            total += length - _I64.size if declared == -1 else declared
        else:
            total += length
    return total


def _ipc_body_bytes(data: memoryview, what: str) -> int:
    """Bytes an IPC stream's batches decode to, from the headers alone (nothing allocated
    or decompressed); raises TickDecodeError past the bounds above."""
    pos, total = 0, 0
    while pos + _U32.size <= len(data):
        meta_len = _U32.unpack_from(data, pos)[0]
        pos += _U32.size
        if meta_len == 0xFFFFFFFF:      # continuation marker, then the length
            if pos + _I32.size > len(data):
                break
            meta_len = _U32.unpack_from(data, pos)[0]
            pos += _I32.size
        if meta_len == 0:               # end of stream
            break
        if pos + meta_len > len(data):
            raise TickDecodeError(f"malformed {what} table: an IPC header of {meta_len} bytes, "
                                  f"{len(data) - pos} left")
        meta = data[pos : pos + meta_len]
        pos += meta_len
        if meta_len < _U32.size:
            raise TickDecodeError(f"malformed {what} table: an IPC header of {meta_len} bytes")
        message = _FlatTable(meta, _U32.unpack_from(meta, 0)[0], what)
        kind, body_len = message.scalar(1, _U8), message.scalar(3, _I64)
        if body_len < 0 or pos + body_len > len(data):
            raise TickDecodeError(f"malformed {what} table: a body of {body_len} bytes, {len(data) - pos} left")
        body = data[pos : pos + body_len]
        pos += body_len
        header = message.table(2)
        if kind == _SCHEMA and header is not None:
            if (columns := header.count(1)) > MAX_COLUMNS:
                raise TickDecodeError(f"{what} table: {columns} columns, over the maximum of {MAX_COLUMNS}")
        elif kind == _DICTIONARY_BATCH and header is not None and (data_batch := header.table(1)) is not None:
            total += _batch_bytes(data_batch, body, what)
        elif kind == _RECORD_BATCH and header is not None:
            total += _batch_bytes(header, body, what)
        elif kind not in (_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH):
            raise TickDecodeError(f"{what} table: IPC message type {kind} is not a schema or batch")
        if total > MAX_DECODED_BYTES:
            raise TickDecodeError(f"{what} table decodes to over {total} bytes, over the maximum of "
                                  f"{MAX_DECODED_BYTES}")
    return total


def _read_section(buf: memoryview, pos: int, what: str, budget: int) -> tuple[pa.Table, int, int]:
    """(table, end position, decoded bytes) of one section; `budget`: the decoded bytes the
    message may still take."""
    if pos + _LEN.size > len(buf):
        raise TickDecodeError(f"truncated message: no length for the {what} table at byte {pos}")
    (n,) = _LEN.unpack_from(buf, pos)
    pos += _LEN.size
    if pos + n > len(buf):
        raise TickDecodeError(f"truncated message: {what} table claims {n} bytes, {len(buf) - pos} left")
    section = buf[pos : pos + n]
    decoded = _ipc_body_bytes(section, what)
    if decoded > budget:
        raise TickDecodeError(f"the message decodes to over {MAX_DECODED_BYTES} bytes (its {what} table "
                              f"{decoded}), over the maximum")
    try:
        table = ipc.open_stream(pa.py_buffer(section)).read_all()
        table.validate(full=True)
    # any of Arrow's errors (a type it cannot read is malformed too); ValueError: one whose
    # message quotes bytes that are not UTF-8
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TickDecodeError(f"malformed {what} table: {exc}") from None
    if table.num_rows > MAX_ROWS:
        raise TickDecodeError(f"{what} table: {table.num_rows} rows, over the maximum of {MAX_ROWS}")
    return table, pos + n, decoded


def _check_names(table: pa.Table, what: str) -> None:
    """Every string value within NAME_MAX_BYTES (a dictionary column: its dictionary)."""
    for name, cap in NAME_MAX_BYTES.items():
        if name not in table.schema.names:
            continue
        for chunk in table.column(name).chunks:
            values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
            if len(values) and (longest := pc.max(pc.binary_length(values)).as_py() or 0) > cap:
                raise TickDecodeError(f"{what}.{name}: a value of {longest} bytes, over the {cap}-byte maximum")


@functools.cache
def _required_columns(schema: pa.Schema) -> tuple[int, ...]:
    return tuple(i for i, f in enumerate(schema) if not f.nullable)


def _check_required(col: pa.ChunkedArray, f: pa.Field, what: str) -> None:
    if col.null_count:
        raise TickDecodeError(f"{what}.{f.name}: {col.null_count} null value(s) in a required column")


def _conform(table: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
    """Project a decoded table onto this version's schema (same major, any minor)."""
    if table.schema.equals(schema, check_metadata=False):
        # The common case, a sender of this very version: only the required columns' null
        # counts to check (projecting column by column cost more than the IPC read itself).
        for i in _required_columns(schema):
            _check_required(table.column(i), schema.field(i), what)
        return table.replace_schema_metadata(schema.metadata)
    present = {name: i for i, name in enumerate(table.column_names)}   # once: column_names builds a list
    columns = []
    for f in schema:
        if f.name in present:
            col = table.column(present[f.name])
            if not col.type.equals(f.type):
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise TickDecodeError(f"{what}.{f.name}: type {col.type} is not {f.type}: {exc}") from None
            if not f.nullable:
                _check_required(col, f, what)
        elif f.nullable:
            col = pa.nulls(table.num_rows, f.type)
        else:
            raise TickDecodeError(f"{what}: required column {f.name!r} is missing")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def decode(payload: bytes | memoryview) -> TickBatch:
    """Decode one message; raises TickDecodeError naming what is wrong."""
    buf = memoryview(payload)
    if len(buf) < _HEADER.size:
        raise TickDecodeError(f"message of {len(buf)} bytes is shorter than the {_HEADER.size}-byte header")
    magic, major, minor = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise TickDecodeError(f"bad magic {bytes(magic)!r}: not a slicemeter Tick")
    if major != SCHEMA_MAJOR:
        raise TickDecodeError(f"unsupported Tick schema major version {major}.{minor} (this decoder reads {SCHEMA_MAJOR}.x)")
    gpus, pos, gpu_bytes = _read_section(buf, _HEADER.size, "gpu", MAX_DECODED_BYTES)
    slices, pos, slice_bytes = _read_section(buf, pos, "slice", MAX_DECODED_BYTES - gpu_bytes)
    if pos != len(buf):
        raise TickDecodeError(f"{len(buf) - pos} trailing byte(s) after the slice table")
    gpus = _conform(gpus, GPU_SCHEMA, "gpu")
    slices = _conform(slices, SLICE_SCHEMA, "slice")
    _check_names(gpus, "gpu")
    _check_names(slices, "slice")
    nodes = set(gpus.column("node").unique().to_pylist()) | set(slices.column("node").unique().to_pylist())
    if len(nodes) > 1:
        raise TickDecodeError(f"a message must carry one node, this one carries {sorted(map(str, nodes))}")
    return TickBatch(gpus=gpus, slices=slices, minor=minor, decoded_bytes=gpu_bytes + slice_bytes)


def batch_to_ticks(batch: TickBatch) -> list[Tick]:
    """Back to Python objects (tests, `--once`, debugging); ingest stays columnar."""
    ticks: dict[int, Tick] = {}

    def tick_for(row: dict) -> Tick:
        ts = row["ts_ms"]
        if ts not in ticks:
            ticks[ts] = Tick(node=row["node"], cluster=row["cluster"], ts_ms=ts, interval_ms=row["interval_ms"])
        return ticks[ts]

    tick_names = {"ts_ms", "interval_ms", "node", "cluster"}
    for row in batch.gpus.to_pylist():
        tick_for(row).gpus.append(GpuReading(**{k: v for k, v in row.items() if k not in tick_names}))
    for row in batch.slices.to_pylist():
        tick_for(row).slices.append(SliceReading(**{k: v for k, v in row.items() if k not in tick_names}))
    return [ticks[ts] for ts in sorted(ticks)]



# ---- plausibility: what a decoded message may claim ----------------------------------

@dataclass(frozen=True)
class Limits:
    """Bounds a stored sample must meet (ingest checks every message against them)."""

    max_interval_ms: int = 3_600_000        # one sample never stands for more than an hour bucket
    max_age_ms: int = 36 * 86_400_000       # raw retention + slack: older samples are refused
    future_slack_ms: int = 600_000          # clock skew tolerated ahead of the ingest's clock


# (column, lowest, highest): float columns must also be finite; bounds None are open
_GPU_BOUNDS = (
    ("memory_total_bytes", 0, None), ("memory_used_bytes", 0, None), ("sm_util_ratio", 0.0, 1.0),
    ("mem_util_ratio", 0.0, 1.0), ("power_watts", 0.0, None), ("energy_joules", 0.0, None),
    ("slice_count", 0, None), ("device_health", 0, 2),
)
_SLICE_BOUNDS = (
    ("hami_memory_limit_bytes", 0, None), ("hami_memory_used_bytes", 0, None), ("hami_context_bytes", 0, None),
    ("hami_module_bytes", 0, None), ("hami_buffer_bytes", 0, None), ("sm_limit_ratio", 0.0, 1.0),
    ("sm_util_ratio", 0.0, 1.0), ("last_kernel_age_s", 0.0, None), ("process_count", 0, None),
    ("nvml_memory_used_bytes", 0, None), ("alloc_memory_bytes", 0, None), ("alloc_cores_ratio", 0.0, 1.0),
    ("vdevice_index", 0, None),
)
_GPU_KEY = ("gpu_uuid", "ts_ms")
_SLICE_KEY = ("pod_uid", "container", "gpu_uuid", "ts_ms")


def _out_of_bounds(table: pa.Table, name: str, low, high) -> str | None:
    col = table.column(name)
    if col.null_count == len(col):
        return None
    if pa.types.is_floating(col.type) and not math.isfinite(pc.sum(col).as_py()):
        # a NaN or an infinity makes the sum non-finite (min_max skips NaN); counted only then
        bad = pc.sum(pc.invert(pc.is_finite(col)).cast(pa.int64())).as_py()
        return f"{bad} non-finite value(s)"
    lo, hi = pc.min_max(col).values()
    if low is not None and lo.as_py() < low:
        return f"{lo.as_py()!r} below {low}"
    if high is not None and hi.as_py() > high:
        return f"{hi.as_py()!r} above {high}"
    return None


def _codes(col: pa.ChunkedArray) -> np.ndarray:
    """Integers equal where the column's values are (a dictionary column's indices)."""
    if pa.types.is_dictionary(col.type):
        if col.num_chunks != 1:
            col = pc.dictionary_encode(pc.dictionary_decode(col)).combine_chunks()
            return col.indices.to_numpy(zero_copy_only=False)
        return col.chunk(0).indices.to_numpy(zero_copy_only=False)
    return col.to_numpy()


def _repeated_key(table: pa.Table, key: tuple[str, ...]) -> tuple | None:
    if table.num_rows < 2:
        return None
    codes = [_codes(table.column(k)) for k in key]
    codes = [c - c.min() for c in codes]
    spans = [int(c.max()) + 1 for c in codes]
    if math.prod(spans) < 1 << 62:
        # one integer per row (mixed radix): one sort instead of a sort over every column
        combined = np.zeros(table.num_rows, dtype=np.int64)
        for c, span in zip(codes, spans):
            combined = combined * span + c
        order = np.argsort(combined, kind="stable")
        same = combined[order][1:] == combined[order][:-1]
    else:
        order = np.lexsort(codes)
        same = np.ones(table.num_rows - 1, dtype=bool)
        for c in codes:
            c = c[order]
            same &= c[1:] == c[:-1]
    if not same.any():
        return None
    at = int(order[int(np.argmax(same)) + 1])
    return tuple(table.column(k)[at].as_py() for k in key)


def repeated_key(batch: TickBatch) -> str | None:
    """Why a message repeats a sample's key (GPU: gpu_uuid, ts_ms; slice: pod_uid,
    container, gpu_uuid, ts_ms), or None."""
    for what, table, key in (("gpu", batch.gpus, _GPU_KEY), ("slice", batch.slices, _SLICE_KEY)):
        if repeated := _repeated_key(table, key):
            return f"{what} key {dict(zip(key, repeated))} repeated within the message"
    return None


def implausible(batch: TickBatch, limits: Limits, now_ms: int) -> str | None:
    """Why a decoded message cannot be stored as it stands, or None: the first impossible
    value found (non-finite or negative readings, shares outside [0, 1], an interval
    outside (0, max], a timestamp outside [now - max age, now + slack]; a repeated key:
    `repeated_key`). One bad value costs the whole message: its other rows came from
    the same reading and cannot be trusted either."""
    earliest, latest = now_ms - limits.max_age_ms, now_ms + limits.future_slack_ms
    for what, table, bounds in (("gpu", batch.gpus, _GPU_BOUNDS), ("slice", batch.slices, _SLICE_BOUNDS)):
        if not table.num_rows:
            continue
        lo, hi = (v.as_py() for v in pc.min_max(table.column("ts_ms")).values())
        if lo < earliest or hi > latest:
            bad = lo if lo < earliest else hi
            return (f"{what}.ts_ms {bad} outside the accepted window [{earliest}, {latest}] "
                    f"(now - {limits.max_age_ms} ms, now + {limits.future_slack_ms} ms)")
        lo, hi = (v.as_py() for v in pc.min_max(table.column("interval_ms")).values())
        if lo <= 0 or hi > limits.max_interval_ms:
            return f"{what}.interval_ms {lo if lo <= 0 else hi} outside (0, {limits.max_interval_ms}]"
        for name, low, high in bounds:
            if problem := _out_of_bounds(table, name, low, high):
                return f"{what}.{name}: {problem}"
    return None


def tick_instants(batch: TickBatch) -> set[int]:
    """The instants (ts_ms) a message reports for its node."""
    return set(pc.unique(batch.gpus.column("ts_ms")).to_pylist()) | set(pc.unique(batch.slices.column("ts_ms")).to_pylist())
