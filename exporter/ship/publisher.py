"""Kafka publisher with a bounded on-disk spool.

Every Tick is first written to the spool directory (one file per Tick, named by a
sequence number) and a background thread sends the oldest file, waits for the broker's
acknowledgement (acks=all) and only then deletes it. So:
- the tick loop and /metrics never wait for Kafka;
- while Kafka is unreachable Ticks accumulate on disk, bounded by `max_bytes` (the oldest
  are dropped first and counted), and are replayed in order when it is back;
- one Tick is in flight at a time, so a retry can never reorder Ticks; after a failure the
  producer is rebuilt (a restarted broker has lost the old session);
- an acknowledged offset that goes backwards means the broker lost its log (Tansu keeps
  topics in memory; after its restart a producer with stale metadata is acked into a topic
  that does not exist): that Tick is resent through a fresh producer;
- a Tick the broker or the client refuses for what it is (too large, an invalid record)
  would be refused again for ever: it moves to the spool's `refused/` folder (the newest
  few are kept for inspection), is counted, and the Ticks behind it go on.
A Tick is the Kafka message value `slicemeter.tick.encode_ticks([tick])`, key = node; with
a signing key it carries the key id and its HMAC in headers (slicemeter/signing.py).
"""
from __future__ import annotations

import logging
import os
import re
import threading
from collections import deque
from typing import Any, Callable

from slicemeter import signing
from slicemeter.common import MiB

log = logging.getLogger(__name__)
_NAME = re.compile(r"^(\d{16})\.tick$")


class Spool:
    """Ordered, size-bounded queue of byte payloads in a directory (survives restarts)."""

    def __init__(self, directory: str, max_bytes: int = 256 * 1024 * 1024):
        if max_bytes <= 0:
            raise ValueError("spool size must be positive")
        self.dir = directory
        self.max_bytes = max_bytes
        os.makedirs(directory, exist_ok=True)
        self._lock = threading.Lock()
        self._items: deque[tuple[int, int]] = deque()   # (seq, size), oldest first
        self._bytes = 0
        self.dropped = 0
        self.refused = 0
        for name in sorted(os.listdir(directory)):
            m = _NAME.match(name)
            if m:
                size = os.path.getsize(os.path.join(directory, name))
                self._items.append((int(m.group(1)), size))
                self._bytes += size
            elif name.endswith(".tmp"):
                os.unlink(os.path.join(directory, name))   # a write cut short by a crash
        self._next = self._items[-1][0] + 1 if self._items else 0

    def _path(self, seq: int) -> str:
        return os.path.join(self.dir, f"{seq:016d}.tick")

    def append(self, payload: bytes) -> int:
        with self._lock:
            seq = self._next
            self._next += 1
            tmp = self._path(seq) + ".tmp"
            with open(tmp, "wb") as f:
                f.write(payload)
            os.replace(tmp, self._path(seq))   # a reader never sees half a Tick
            self._items.append((seq, len(payload)))
            self._bytes += len(payload)
            while self._bytes > self.max_bytes and len(self._items) > 1:
                old, size = self._items.popleft()
                self._unlink(old)
                self._bytes -= size
                self.dropped += 1
            return seq

    def oldest(self) -> tuple[int, bytes] | None:
        with self._lock:
            while self._items:
                seq, size = self._items[0]
                try:
                    with open(self._path(seq), "rb") as f:
                        return seq, f.read()
                except OSError:   # removed behind our back: skip it
                    self._items.popleft()
                    self._bytes -= size
            return None

    def remove(self, seq: int) -> None:
        with self._lock:
            if self._items and self._items[0][0] == seq:
                _, size = self._items.popleft()
                self._bytes -= size
                self._unlink(seq)

    def refuse(self, seq: int, keep: int = 16) -> None:
        """Move the oldest Tick `seq` aside to refused/ (the newest `keep` are kept there)."""
        with self._lock:
            if not self._items or self._items[0][0] != seq:
                return
            _, size = self._items.popleft()
            self._bytes -= size
            self.refused += 1
            folder = os.path.join(self.dir, "refused")
            os.makedirs(folder, exist_ok=True)
            try:
                os.replace(self._path(seq), os.path.join(folder, f"{seq:016d}.tick"))
            except FileNotFoundError:
                return
            for old in sorted(os.listdir(folder))[:-keep]:
                os.unlink(os.path.join(folder, old))

    def _unlink(self, seq: int) -> None:
        try:
            os.unlink(self._path(seq))
        except FileNotFoundError:
            pass

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes


def permanently_refused(exc: Exception) -> bool:
    """Whether sending the same bytes again can never succeed (the message itself is wrong
    for the broker), as against an outage, a timeout or a credential, which can heal."""
    from kafka import errors

    return isinstance(exc, (errors.MessageSizeTooLargeError, errors.RecordListTooLargeError,
                            errors.InvalidRecordError, errors.UnsupportedForMessageFormatError))


def kafka_producer(bootstrap: str, security: dict | None = None, max_request_size: int = MiB) -> Any:
    """`security`: kafka-python's security_protocol / sasl_* / ssl_* settings."""
    from kafka import KafkaProducer

    return KafkaProducer(
        bootstrap_servers=bootstrap,
        client_id="slicemeter-exporter",
        acks="all",
        compression_type="lz4",
        retries=5,
        max_in_flight_requests_per_connection=1,
        # The broker drops a resend of a batch it already appended (a lost acknowledgement);
        # ingest also drops a Tick whose node and instant it holds already.
        enable_idempotence=True,
        max_request_size=max_request_size,
        linger_ms=0,
        # Fail fast (well inside one 10 s tick) so that the spool, not the client, holds Ticks
        # through an outage, and a rebuilt producer starts from fresh metadata.
        request_timeout_ms=3000,
        delivery_timeout_ms=6000,
        max_block_ms=3000,
        # Refresh metadata often: after a broker restart between ticks the topic is known
        # (and re-created where auto-creation is on) before the next send.
        metadata_max_age_ms=5000,
        reconnect_backoff_max_ms=2000,
        **(security or {}),
    )


class Publisher:
    def __init__(
        self,
        spool: Spool,
        topic: str,
        key: str,
        producer_factory: Callable[[], Any],
        on_error: Callable[[Exception], None] | None = None,
        send_timeout_s: float = 15.0,
        max_backoff_s: float = 5.0,
        signing_key: tuple[str, bytes] | None = None,
    ):
        self.spool, self.topic, self.key = spool, topic, key.encode()
        self.signing_key = signing_key   # (key id, key): every message carries its HMAC
        self.producer_factory = producer_factory
        self.on_error = on_error
        self.send_timeout_s = send_timeout_s
        self.max_backoff_s = max_backoff_s
        self.published = 0
        self._producer: Any = None
        self._last_offset: dict[int, int] = {}
        self._wake = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def submit(self, payload: bytes) -> None:
        """Queue one encoded Tick; returns as soon as it is on disk."""
        self.spool.append(payload)
        with self._wake:
            self._wake.notify()

    def stats(self) -> dict[str, int]:
        return {"ticks": len(self.spool), "bytes": self.spool.bytes, "dropped": self.spool.dropped,
                "refused": self.spool.refused, "published": self.published}

    def start(self) -> "Publisher":
        self._thread = threading.Thread(target=self._run, name="kafka-publisher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread:
            self._thread.join(timeout)
        self._close_producer()

    def _close_producer(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=1)
            except Exception:
                pass
            self._producer = None

    def _run(self) -> None:
        backoff = 0.2
        while True:
            with self._wake:
                if self._stop:
                    return
            item = self.spool.oldest()
            if item is None:
                with self._wake:
                    if not self._stop:
                        self._wake.wait(1.0)
                continue
            seq, payload = item
            try:
                if self._producer is None:
                    self._producer = self.producer_factory()
                    self._last_offset.clear()   # a new session: offsets are compared from here on
                    self._producer.partitions_for(self.topic)   # fresh metadata (creates the topic where allowed)
                headers = signing.signed_headers(*self.signing_key, payload) if self.signing_key else None
                md = self._producer.send(self.topic, key=self.key, value=payload,
                                         headers=headers).get(timeout=self.send_timeout_s)
                last = self._last_offset.get(md.partition)
                if last is not None and md.offset <= last:
                    # Offsets only grow: the broker lost its log (a memory-storage broker restarted, or the
                    # topic was recreated) and a client with stale metadata may have been acked into nothing.
                    self._last_offset.clear()
                    raise RuntimeError(f"partition {md.partition} acknowledged offset {md.offset} after {last}: "
                                       "broker lost its log; resending with fresh metadata")
                self._last_offset[md.partition] = md.offset
            except Exception as exc:   # broker down, timeout, metadata: keep it spooled, retry later
                if permanently_refused(exc):
                    log.error("Tick %d (%d bytes) refused for good (%s: %s): moved to %s/refused; "
                              "the Ticks behind it go on", seq, len(payload), type(exc).__name__, exc, self.spool.dir)
                    self.spool.refuse(seq)
                    if self.on_error:
                        self.on_error(exc)
                    continue
                log.warning("Kafka publish failed (%s: %s); %d Tick(s) spooled", type(exc).__name__, exc, len(self.spool))
                if self.on_error:
                    self.on_error(exc)
                self._close_producer()
                with self._wake:
                    if not self._stop:
                        self._wake.wait(backoff)
                backoff = min(self.max_backoff_s, backoff * 2)
                continue
            self.spool.remove(seq)
            self.published += 1
            backoff = 0.2
