"""Kafka record batches that cannot stop or swell ingest.

A producer may compress a whole record batch (gzip, snappy, lz4, zstd). kafka-python
decompresses it with no limit, so a small batch of zeros unpacks to gigabytes; and a codec it
cannot decode, or a batch that fails its CRC or its decompression, raises inside `poll()` at
the same offset on every restart. `install()` swaps in, for ingest's consumers only, record
classes that decompress within MAX_BATCH_BYTES while decompressing, and turn a batch they
cannot read into one RefusedBatch record at the batch's last offset: the partition moves past
it, and ingest stores it as one dead letter (ingest/consumer.py). The decompressed bytes of
one poll stay within POLL_DECOMPRESSED_BYTES: past it, a fetch ends before its next
compressed batch, which the next poll fetches again.

Written against kafka-python 3.0.12: MemoryRecords.next_batch, DefaultRecordBatch's header
and `_maybe_uncompress`/`__next__`, and the fetcher reading `MemoryRecords` from its module's
globals. `install()` refuses to start if they are not there.
"""
from __future__ import annotations

import hashlib
import io
import struct
import zlib
from dataclasses import dataclass

import pyarrow as pa
from kafka.errors import CorruptRecordError

from slicemeter.common import ConfigError, MiB

# The largest honest batch: one 16 MiB message (the backfill's max_request_size,
# simulator/backfill.py), twice over for a producer's batch of smaller ones.
MAX_BATCH_BYTES = 32 * MiB
# Compressed batches one poll may decompress before the rest wait for the next poll.
POLL_DECOMPRESSED_BYTES = 32 * MiB
# A zstd frame may ask its decoder for a window this large, no larger (zstd's level 3, the
# Java producer's default, uses 2 to 8 MiB).
ZSTD_MAX_WINDOW = 16 * MiB
_CHUNK = MiB

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class BatchRefused(Exception):
    """Why a compressed batch cannot be read."""


@dataclass(frozen=True)
class RefusedBatch:
    """The one record a refused batch becomes: not bytes, so no producer can forge one."""

    first_offset: int
    last_offset: int
    codec: str
    reason: str
    payload: bytes           # the batch's records as the producer compressed them

    @property
    def identity(self) -> bytes:
        """Stands for the record's value where ingest digests records (the resume check)."""
        return b"refused batch " + hashlib.sha256(self.payload).digest()

    def describe(self, partition: int) -> str:
        return (f"record batch refused: partition {partition}, offsets {self.first_offset}-{self.last_offset}, "
                f"codec {self.codec}: {self.reason}")

    def __len__(self) -> int:
        return len(self.payload)


def _over(cap: int) -> BatchRefused:
    return BatchRefused(f"decompresses past the maximum of {cap} bytes")


def inflate_gzip(data, cap: int) -> bytearray:
    out = bytearray()
    pending = bytes(data)
    while True:
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        while True:
            out += d.decompress(pending, cap + 1 - len(out))
            if len(out) > cap:
                raise _over(cap)
            if d.eof or not d.unconsumed_tail:
                break
            pending = d.unconsumed_tail
        if not d.eof:
            raise BatchRefused("gzip stream ends early")
        pending = d.unused_data        # Kafka's gzip reader reads every member
        if not pending:
            return out


def inflate_lz4(data, cap: int) -> bytearray:
    import lz4.frame

    out = bytearray()
    pending = bytes(data)
    while pending:
        # a MiB at a time, into a bytearray: a decompressor allocates its max_length up
        # front, and returns bytes by copying (each five times slower for a 1 MiB frame)
        d = lz4.frame.LZ4FrameDecompressor(return_bytearray=True)
        chunk = d.decompress(pending, max_length=min(_CHUNK, cap + 1 - len(out)))
        out = out + chunk if out else chunk
        while not d.eof and len(out) <= cap and d.needs_input is False:
            out += d.decompress(b"", max_length=min(_CHUNK, cap + 1 - len(out)))
        if len(out) > cap:
            raise _over(cap)
        if not d.eof:
            raise BatchRefused("lz4 frame ends early")
        pending = d.unused_data
    return out


def inflate_zstd(data, cap: int) -> bytearray:
    import zstandard

    out = bytearray()
    reader = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(
        io.BytesIO(bytes(data)), read_across_frames=True)
    with reader:
        while chunk := reader.read(min(_CHUNK, cap + 1 - len(out))):
            out += chunk
            if len(out) > cap:
                raise _over(cap)
    return out


def _snappy_block(block, cap: int) -> bytes:
    size, shift, pos = 0, 0, 0
    while True:           # the uncompressed length, a varint, heads every raw snappy block
        if pos >= len(block) or pos > 4:
            raise BatchRefused("snappy block without a length")
        byte = block[pos]
        size |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            break
    if size > cap:
        raise _over(cap)
    return pa.decompress(bytes(block), decompressed_size=size, codec="snappy", asbytes=True)


def inflate_snappy(data, cap: int) -> bytes | bytearray:
    data = bytes(data)
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, cap)
    out, pos = bytearray(), 16      # magic, version, compatible version
    while pos < len(data):
        if pos + 4 > len(data):
            raise BatchRefused("snappy block length cut short")
        length, = struct.unpack_from(">i", data, pos)
        block = data[pos + 4: pos + 4 + length]
        if length < 0 or len(block) != length:
            raise BatchRefused("snappy block cut short")
        out += _snappy_block(block, cap - len(out))
        pos += 4 + length
    return out


_INFLATE = {1: inflate_gzip, 2: inflate_snappy, 3: inflate_lz4, 4: inflate_zstd}


def inflate(codec: int, data, cap: int = MAX_BATCH_BYTES) -> bytes | bytearray:
    """`data` decompressed by Kafka's codec number `codec`, never past `cap` bytes."""
    if codec not in _INFLATE:
        raise BatchRefused(f"unsupported codec {codec}")
    try:
        return _INFLATE[codec](data, cap)
    except BatchRefused:
        raise
    except ImportError as exc:
        raise BatchRefused(f"unsupported codec {CODECS[codec]} ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - a corrupt stream is refused, whatever the library raises
        raise BatchRefused(f"corrupt {CODECS[codec]} data: {exc}") from None


class _PollBudget:
    """The decompressed bytes of compressed batches since ingest's last poll began."""

    spent = 0


budget = _PollBudget()


def start_poll() -> None:
    budget.spent = 0


_MAGIC_AT = 16              # offset, length, then (v2) leader epoch or (magic 0/1) CRC
_LEGACY_ATTRIBUTES = 17     # after the magic byte of a magic 0/1 message


class _WholeRefusal:
    """A batch refused before it is read: a compressed message set of the magic 0/1 formats
    (before Kafka 0.11, its inner offsets known only by decompressing it; the wrapper's
    offset is the last of them), or one too short for its format."""

    magic = 1       # the fetcher's v2-only steps pass it by

    def __init__(self, buffer, record_class, codec: int, reason: str):
        offset, = struct.unpack_from(">q", buffer, 0)
        self.record = record_class(len(buffer), offset, -1, 0, None, RefusedBatch(
            offset, offset, CODECS.get(codec, str(codec)), reason, bytes(buffer)), [])

    def validate_crc(self):
        return True

    def __iter__(self):
        yield self.record


def _classes():
    """The kafka-python internals these classes build on; a clear error if absent."""
    try:
        import kafka
        from kafka.consumer import fetcher
        from kafka.record import default_records, memory_records
    except ImportError as exc:
        raise ConfigError(f"ingest needs kafka-python's record internals: {exc}") from None
    base, batch = memory_records.MemoryRecords, default_records.DefaultRecordBatch
    needs = [(fetcher, "MemoryRecords"), (base, "next_batch"), (base, "_next_slice"), (base, "MIN_SLICE"),
             (base, "_cache_next"), (batch, "_maybe_uncompress"), (batch, "__next__"), (batch, "_buffer"), (batch, "_pos"), (batch, "_decompressed"),
             (batch, "_next_record_index"), (batch, "HEADER_STRUCT"), (batch, "last_offset"),
             (batch, "validate_crc"), (default_records, "DefaultRecord")]
    missing = [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in needs if not hasattr(owner, name)]
    if missing:
        raise ConfigError(f"kafka-python {kafka.__version__} lacks {', '.join(missing)}: ingest bounds "
                           "record batch decompression through them (slicemeter/ingest/kafka_batches.py)")
    return fetcher, base, batch, default_records.DefaultRecord


def install() -> None:
    """Make every KafkaConsumer of this process read batches through the bounded classes."""
    fetcher, base, batch_class, record_class = _classes()
    if getattr(fetcher.MemoryRecords, "bounded", False):
        return
    header_size = batch_class.HEADER_STRUCT.size

    class BoundedRecordBatch(batch_class):
        __slots__ = ("_wire", "_refused", "_refused_sent")

        def __init__(self, buffer):
            super().__init__(buffer)
            self._wire = buffer        # a view of the fetched bytes: what a refusal keeps
            self._refused, self._refused_sent = None, False

        def _refuse(self, reason: str) -> None:
            self._refused = RefusedBatch(self.base_offset, self.last_offset, CODECS.get(self.compression_type,
                                         str(self.compression_type)), reason, bytes(self._wire[header_size:]))

        def validate_crc(self):
            # a batch that fails its CRC is refused, not raised on every poll
            if not super().validate_crc():
                self._refuse("CRC mismatch")
            return True

        def _maybe_uncompress(self):
            if not self._decompressed and self._refused is None and self.compression_type != self.CODEC_NONE:
                try:
                    self._buffer = inflate(self.compression_type, memoryview(self._buffer)[self._pos:])
                    self._pos = 0
                except BatchRefused as exc:
                    self._refuse(str(exc))
                if self._refused is None:   # a refusal keeps nothing it unpacked
                    budget.spent += len(self._buffer)
            self._decompressed = True

        def __next__(self):
            if self._refused is None:
                try:
                    return super().__next__()
                except CorruptRecordError as exc:   # what it decompressed to is not records
                    self._refuse(str(exc))
            if self._refused_sent:
                raise StopIteration
            self._refused_sent = True
            return record_class(self.size_in_bytes, self.last_offset, self.max_timestamp, self.timestamp_type,
                                None, self._refused, [])

    class BoundedMemoryRecords(base):
        __slots__ = ()
        bounded = True

        def next_batch(self, *args, **kwargs):
            upcoming = self._next_slice
            if upcoming is None:
                return None
            magic = upcoming[_MAGIC_AT] if len(upcoming) > _LEGACY_ATTRIBUTES else -1
            if magic >= 2 and len(upcoming) >= header_size:
                if budget.spent >= POLL_DECOMPRESSED_BYTES and batch_class.HEADER_STRUCT.unpack_from(
                        upcoming)[5] & batch_class.CODEC_MASK:
                    return None   # this fetch ends here; the next poll fetches the batch again
                self._cache_next()
                return BoundedRecordBatch(upcoming)
            codec = upcoming[_LEGACY_ATTRIBUTES] & 0x07 if magic in (0, 1) else 0
            if magic in (0, 1) and not codec and len(upcoming) >= base.MIN_SLICE:
                return super().next_batch(*args, **kwargs)
            self._cache_next()
            return _WholeRefusal(upcoming, record_class, codec, f"compressed message set of magic {magic} not read"
                                 if codec else f"{len(upcoming)} bytes, too short for a batch of magic {magic}")

    fetcher.MemoryRecords = BoundedMemoryRecords
