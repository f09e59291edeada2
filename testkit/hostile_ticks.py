"""Records a hostile publisher can put on the Ticks topic, built from real encodings and
patched where Arrow would refuse to write the lie: a column claiming more nulls than rows,
compressed buffers that unpack to gigabytes, names of 64 KiB, random bytes."""
from __future__ import annotations

import io
import struct

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from slicemeter.tick import GPU_SCHEMA, MAGIC, SCHEMA_MAJOR, SCHEMA_MINOR, SLICE_SCHEMA, Tick, encode_ticks

_I64 = struct.Struct("<q")
_PAIR = struct.Struct("<qq")
_RECORD_BATCH = 3      # Message.fbs: MessageHeader.RecordBatch


def _slot(buf, table: int, slot: int) -> int | None:
    """Where field `slot` of the FlatBuffers table at `table` lies; None: absent (default)."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    if 4 + 2 * slot >= struct.unpack_from("<H", buf, vtable)[0]:
        return None
    return table + struct.unpack_from("<H", buf, vtable + 4 + 2 * slot)[0] or None


def _ref(buf, table: int, slot: int) -> int:
    at = _slot(buf, table, slot)
    return at + struct.unpack_from("<I", buf, at)[0]


def _messages(stream: bytes):
    """(header start, header length, body start, body length) of each IPC message, with
    the header's root table, its type and its batch table (Message.fbs)."""
    pos = 0
    while pos + 8 <= len(stream):
        meta_len = struct.unpack_from("<i", stream, pos + 4)[0]
        if meta_len == 0:
            return
        meta = stream[pos + 8 : pos + 8 + meta_len]
        root = struct.unpack_from("<I", meta, 0)[0]
        at = _slot(meta, root, 3)
        body_len = 0 if at is None else _I64.unpack_from(meta, at)[0]
        kind = meta[_slot(meta, root, 1)]
        yield pos + 8, meta_len, pos + 8 + meta_len, body_len, root, kind
        pos += 8 + meta_len + body_len


def _put(buf: bytearray, at: int, fmt: struct.Struct, *values) -> None:
    fmt.pack_into(buf, at, *values)


def _vector_start(buf, table: int, slot: int) -> int:
    return _ref(buf, table, slot) + 4


def _envelope(gpu_section: bytes, slice_section: bytes) -> bytes:
    return b"".join([struct.pack("<4sHH", MAGIC, SCHEMA_MAJOR, SCHEMA_MINOR),
                     struct.pack("<I", len(gpu_section)), gpu_section,
                     struct.pack("<I", len(slice_section)), slice_section])


def _stream(table: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema, options=ipc.IpcWriteOptions(**options)) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _sections(message: bytes) -> tuple[bytes, bytes]:
    gpu_len = struct.unpack_from("<I", message, 8)[0]
    gpu = message[12 : 12 + gpu_len]
    return gpu, message[16 + gpu_len :]


def null_count_lie(t: Tick, column: str = "sm_util_ratio", extra: int = 5) -> bytes:
    """`t` encoded, its GPU table's `column` claiming `extra` more nulls than it has rows."""
    gpu, slices = _sections(encode_ticks([t]))
    patched = bytearray(gpu)
    index = GPU_SCHEMA.get_field_index(column)
    for meta_at, _, _, _, root, kind in _messages(gpu):
        if kind == _RECORD_BATCH:
            node = meta_at + _vector_start(gpu[meta_at:], _ref(gpu[meta_at:], root, 2), 1) + index * _PAIR.size
            rows = _PAIR.unpack_from(patched, node)[0]
            _put(patched, node, _PAIR, rows, rows + extra)
    return _envelope(bytes(patched), slices)


def decompression_bomb(rows: int, columns: int = 1, chunk: int = 8 << 20) -> bytes:
    """A message whose GPU section holds `columns` float64 columns of `rows` zeros, zstd
    compressed: a few hundred bytes per 8 MiB it unpacks to."""
    template = _stream(pa.table({f"c{i}": pa.array([0.0]) for i in range(columns)}), compression="zstd")
    out = bytearray()
    for meta_at, meta_len, body_at, body_len, root, kind in _messages(template):
        meta = bytearray(template[meta_at - 8 : meta_at + meta_len])
        if kind != _RECORD_BATCH:
            out += meta + template[body_at : body_at + body_len]
            continue
        frame = pa.compress(b"\0" * chunk, codec="zstd", asbytes=True)
        size = rows * 8
        data = _I64.pack(size) + frame * (size // chunk) + pa.compress(b"\0" * (size % chunk), codec="zstd",
                                                                        asbytes=True)
        padded = data + b"\0" * (-len(data) % 8)
        header = bytes(meta[8:])
        batch = _ref(header, root, 2)
        _put(meta, 8 + _slot(header, batch, 0), _I64, rows)
        nodes, buffers = 8 + _vector_start(header, batch, 1), 8 + _vector_start(header, batch, 2)
        for i in range(columns):
            _put(meta, nodes + i * _PAIR.size, _PAIR, rows, 0)
            _put(meta, buffers + 2 * i * _PAIR.size, _PAIR, i * len(padded), 0)             # no validity
            _put(meta, buffers + (2 * i + 1) * _PAIR.size, _PAIR, i * len(padded), len(data))
        _put(meta, 8 + _slot(header, root, 3), _I64, columns * len(padded))
        out += meta + padded * columns
    out += struct.pack("<iI", -1, 0)
    empty_slices = _stream(SLICE_SCHEMA.empty_table())
    return _envelope(bytes(out), empty_slices)


def random_junk(size: int, seed: int) -> bytes:
    return np.random.default_rng(seed).bytes(size)


# ---- Kafka record batches (message format v2) built byte by byte --------------------------

CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_BATCH_HEADER = 61         # base offset .. record count (DefaultRecordBatch.HEADER_STRUCT)
_ATTRIBUTES_AT = 21        # the CRC covers the attributes and all after them


def record_batch(records, codec: int, compress=None, payload: bytes | None = None) -> bytes:
    """A v2 record batch of (key, value) `records` flagged with Kafka codec number `codec`,
    its records section `compress(records section)`, or `payload` as it is (a lie)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.util import calc_crc32c

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=None, key=key, value=value, headers=[])
    plain = bytes(builder.build())
    body = payload if payload is not None else compress(plain[_BATCH_HEADER:])
    out = bytearray(plain[:_BATCH_HEADER] + body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    attributes = struct.unpack_from(">h", out, _ATTRIBUTES_AT)[0]
    struct.pack_into(">h", out, _ATTRIBUTES_AT, (attributes & ~0x07) | codec)
    struct.pack_into(">I", out, 17, calc_crc32c(bytes(out[_ATTRIBUTES_AT:])))
    return bytes(out)


def zeros_gzip(size: int, member: int = 64 << 20) -> bytes:
    """gzip members whose concatenation unpacks to `size` zero bytes."""
    import gzip

    one = gzip.compress(b"\0" * member, compresslevel=9, mtime=0)
    return one * (size // member)


def zeros_zstd(size: int, frame: int = 64 << 20) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(b"\0" * frame) * (size // frame)


def zeros_lz4(size: int, chunk: int = 16 << 20) -> bytes:
    """One lz4 frame of `size` zero bytes, compressed a chunk at a time."""
    import lz4.frame

    c = lz4.frame.LZ4FrameCompressor()
    zeros = b"\0" * chunk
    return c.begin() + b"".join(c.compress(zeros) for _ in range(size // chunk)) + c.flush()


def produce_raw_batch(bootstrap: str, topic: str, partition: int, batch: bytes, timeout_s: float = 30.0) -> None:
    """Send one record batch as it is, in a Produce request (v3) written by hand: a
    producer that compresses its own batches, whatever the client library would do."""
    import socket

    def string(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    body = (struct.pack(">hhi", 0, 3, 1) + string("hostile-producer")             # api key, version, correlation
            + struct.pack(">hhi", -1, -1, int(timeout_s * 1000))                   # no transaction, acks=all
            + struct.pack(">i", 1) + string(topic) + struct.pack(">ii", 1, partition)
            + struct.pack(">i", len(batch)) + batch)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
        conn.sendall(struct.pack(">i", len(body)) + body)
        answer = b""
        while len(answer) < 4 or len(answer) < 4 + struct.unpack_from(">i", answer)[0]:
            chunk = conn.recv(65536)
            assert chunk, "the broker closed the connection"
            answer += chunk
    # size, correlation id, [topic: name, [partition: index, error code, ...]]
    at = 8 + 4
    at += 2 + struct.unpack_from(">h", answer, at)[0] + 4
    index, error = struct.unpack_from(">ih", answer, at)
    assert (index, error) == (partition, 0), f"produce refused: partition {index}, error code {error}"
