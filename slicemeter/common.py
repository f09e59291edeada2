"""Errors and names every part of slicemeter shares."""
from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
from datetime import date, datetime
from pathlib import Path


class ConfigError(Exception):
    """A bad option or config value; the message names the offending key."""


class SchemaMismatch(ConfigError):
    """A store whose schema is not this release's, opened by a command that does not migrate
    (slicemeter.store.schema): one sentence, exit status 2."""


# A month as every command and page takes it: 'YYYY-MM'.
MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])\Z")
# A Kubernetes DNS-1123 label (namespace, container and tenant names): at most 63
# characters of [a-z0-9-], starting and ending alphanumeric.
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DNS_LABEL_RE = re.compile(rf"^{DNS_LABEL}\Z")
# A GPU or MIG device UUID as NVML's nvmlDeviceGetUUID writes it: 'GPU-' and an 8-4-4-4-12
# hex UUID; a MIG device is 'MIG-' and its own UUID (driver R470 on) or, on older drivers,
# 'MIG-GPU-<parent uuid>/<GPU instance>/<compute instance>' (NVIDIA MIG user guide).
_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
GPU_UUID = rf"(?:GPU-{_HEX_UUID}|MIG-{_HEX_UUID}|MIG-GPU-{_HEX_UUID}/\d{{1,4}}/\d{{1,4}})"
GPU_UUID_RE = re.compile(rf"^{GPU_UUID}\Z")
MiB = 1 << 20
GiB = 1 << 30
# The pod annotations HAMi's scheduler writes when it binds a pod: what each container was
# granted, and the node it was bound to.
HAMI_ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
HAMI_NODE_ANNOTATION = "hami.io/vgpu-node"


def fsync_path(path: Path) -> None:
    """Flush a file, or a folder's entries (a rename in it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_version(path) -> tuple[int, int, int]:
    """(inode, size, mtime) of the file at `path` (a link followed): changes when the file is
    rewritten or replaced. OSError when there is none."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def arrow_on_system_allocator() -> None:
    """Arrow's memory from the C library's allocator instead of its default pool (mimalloc).
    On the 2-core VMs these numbers are measured on, fresh memory from mimalloc costs about
    3x the kernel time: an 8,000-GPU export spent 3-4 s of system time building its files'
    few hundred MB of Arrow buffers, about 1 s from the C library (bench/RESULTS.md,
    bench_export). Called by `slicemeter export` before it allocates."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def month_start(month) -> date:
    """'2026-11' -> 2026-11-01; ValueError naming the bad value otherwise."""
    m = MONTH.match(month if isinstance(month, str) else "")
    if not m:
        raise ValueError(f"month must be YYYY-MM, got {month!r}")
    return date(int(m.group(1)), int(m.group(2)), 1)


def next_month(start: date) -> date:
    """The first day of the month after `start`'s."""
    return date(start.year + (start.month == 12), start.month % 12 + 1, 1)


def month_bounds(month) -> tuple[date, date]:
    """'2026-11' -> (2026-11-01, 2026-12-01): the month as [start, end)."""
    start = month_start(month)
    return start, next_month(start)


def month_window(month) -> tuple[datetime, datetime, int]:
    """'2026-11' -> (start, end, hours in the month), naive UTC datetimes."""
    start, end = month_bounds(month)
    return datetime(start.year, start.month, 1), datetime(end.year, end.month, 1), (end - start).days * 24


def check_choice(value, choices) -> None:
    """ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")


@contextlib.contextmanager
def named(name: str):
    """A ValueError or ConfigError raised inside becomes a ConfigError that starts with
    `name`: library code names the value ('month'), a command its flag ('--month')."""
    try:
        yield
    except (ValueError, ConfigError) as exc:
        raise ConfigError(f"{name}: {exc}") from None


# A Kubernetes API server's port where a cluster identity names none: Kamaji's
# spec.networkProfile.port default, which every tenant plane listens on unless told.
DEFAULT_API_PORT = 6443
_URL_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://")
_BRACKETED = re.compile(r"^\[([^\]]*)\](?::([0-9]{1,5}))?\Z")
_HOST_PORT = re.compile(r"^([^:]*):([0-9]{1,5})\Z")


@functools.lru_cache(maxsize=4096)   # a fleet has a few spellings, asked once per message
def cluster_key(identity: str) -> str:
    """The one form every spelling of a cluster identity shares (pure), as Ticks and the
    tenant catalog are matched: "https://[2001:0DB8:40::10]" -> "[2001:db8:40::10]:6443".

    Kubelets join on the string Kamaji writes into status.controlPlaneEndpoint, verbatim,
    so a Tick's cluster and a catalog's address may spell one endpoint differently. The key
    drops the scheme and trailing slashes, lower-cases, writes an IP address canonically
    (an IPv4-mapped IPv6 address as the IPv4 address it is), drops a DNS name's trailing
    dot, and writes the port, DEFAULT_API_PORT where none is given, as host:port with
    IPv6 in brackets. "namespace/name" identities, and what is no host[:port], stay as
    written, lower-cased."""
    bare = _URL_SCHEME.sub("", identity.strip().lower()).rstrip("/")
    if "/" in bare:
        return bare
    if (m := _BRACKETED.match(bare) or _HOST_PORT.match(bare)):
        host, port = m.group(1), int(m.group(2) or DEFAULT_API_PORT)
    elif bare.count(":") >= 2:   # a bare IPv6 address
        host, port = bare, DEFAULT_API_PORT
    elif ":" not in bare:
        host, port = bare, DEFAULT_API_PORT
    else:
        return bare
    if not host or port > 65535:
        return bare
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if ":" in host or "[" in bare or "]" in host:   # brackets hold an IPv6 address only
            return bare
        host = host.removesuffix(".")
    else:
        if bare.startswith("[") and ip.version != 6:
            return bare
        host = (ip.ipv4_mapped or ip).compressed if ip.version == 6 else ip.compressed
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


LAKE_PREFIX = "ducklake:"   # a --db naming a DuckLake (store/lake.py), not a file


def is_lake(target) -> bool:
    """Whether a `--db` names a DuckLake rather than a DuckDB file."""
    return str(target).startswith(LAKE_PREFIX)


def existing_db(target) -> Path | str:
    """The store `--db` names: a lake name as given, or a database file that exists;
    ConfigError where there is none (DuckDB would create one)."""
    if is_lake(target):
        return str(target)
    if not Path(target).is_file():
        raise ConfigError(f"--db: no such database file: {target}")
    return Path(target)


# What a config file may be: every YAML the product reads is an operator's file, at most a
# few hundred KB (a 1,000-node scenario is 12 KB and 1,400 nodes). The bounds refuse what
# only an attack needs: aliases that expand a short file into billions of nodes
# ("billion laughs"), and nesting deep enough to exhaust the parser's recursion.
YAML_MAX_BYTES = 4 << 20
YAML_MAX_NODES = 200_000     # nodes written plus the nodes each alias repeats


def where_in_file(source: str, line: int | None) -> str:
    """The prefix of a config file's error: "file:line: ", "file: " or "line N: "."""
    return f"{source}:{line}: " if source and line else f"{source}: " if source else f"line {line}: " if line else ""


class YamlRefused(ConfigError):
    """A config file's YAML the loader refuses: `problem` at `line` (None: the whole file)."""

    def __init__(self, source: str, line: int | None, problem: str):
        super().__init__(where_in_file(source, line) + problem)
        self.line, self.problem = line, problem


@functools.cache
def _strict_loader():
    """A SafeLoader class that refuses duplicate keys and counts the nodes aliases add."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def __init__(self, text: str, source: str):
            super().__init__(text)
            self.source, self.nodes, self.sizes, self.open_anchors = source, 0, {}, []

        def refuse(self, mark, message: str):
            raise YamlRefused(self.source, mark.line + 1 if mark else None, message)

        def size(self, node) -> int:
            """Nodes in `node` with its aliases expanded (memoised: aliases share nodes)."""
            if id(node) not in self.sizes:
                children = (node.value if isinstance(node, yaml.SequenceNode) else
                            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
                self.sizes[id(node)] = 1 + sum(self.size(c) for c in children)
            return self.sizes[id(node)]

        def count(self, mark, nodes: int, what: str = "") -> None:
            self.nodes += nodes
            if self.nodes > YAML_MAX_NODES:
                self.refuse(mark, f"{what}more than {YAML_MAX_NODES} YAML nodes with aliases expanded "
                                  "(a config file is far smaller)")

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                if event.anchor in self.open_anchors:
                    self.refuse(event.start_mark, f"alias *{event.anchor} refers to a node that contains it")
                node = super().compose_node(parent, index)
                self.count(event.start_mark, self.size(node), f"alias *{event.anchor} makes ")
                return node
            self.count(self.peek_event().start_mark, 1)
            return super().compose_node(parent, index)

        def compose_sequence_node(self, anchor):
            self.open_anchors.append(anchor)
            try:
                return super().compose_sequence_node(anchor)
            finally:
                self.open_anchors.pop()

        def compose_mapping_node(self, anchor):
            self.open_anchors.append(anchor)
            try:
                node = super().compose_mapping_node(anchor)
            finally:
                self.open_anchors.pop()
            seen: dict = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    self.refuse(key_node.start_mark, f"key {key!r} given twice (first on line {seen[key]})")
                seen[key] = key_node.start_mark.line + 1
            return node

    return StrictLoader


def compose_yaml(text: str, source: str = ""):
    """(the YAML document's root node, its value) for a config file's text (pure): refuses a
    text over YAML_MAX_BYTES, a key given twice in one mapping, more than YAML_MAX_NODES
    nodes once aliases are expanded, and nesting past Python's recursion limit; each refusal
    is a YamlRefused naming `source` and the line. A YAML syntax error is yaml.YAMLError."""
    if len(text) > YAML_MAX_BYTES:
        raise YamlRefused(source, None, f"over {YAML_MAX_BYTES} bytes: not a config file")
    loader = _strict_loader()(text, source)
    try:
        root = loader.get_single_node()
        return root, None if root is None else loader.construct_document(root)
    except RecursionError:
        raise YamlRefused(source, None, "YAML nested too deeply") from None
    finally:
        loader.dispose()


def parse_yaml(text: str, source: str = ""):
    """A config file's YAML text as Python values (compose_yaml's checks); a syntax error is
    a ConfigError naming `source` and the line too."""
    import yaml

    try:
        return compose_yaml(text, source)[1]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(f"{where_in_file(source, mark.line + 1 if mark else None)}not valid YAML: "
                          f"{getattr(exc, 'problem', None) or exc}") from None


def on_stop_signals(handler) -> dict:
    """SIGTERM and SIGINT both call `handler`; returns the handlers they had. SIGINT is set
    explicitly: a process started with `&` from a non-interactive shell inherits it ignored,
    and Python then installs no KeyboardInterrupt handler."""
    import signal

    return {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}


def _read_at_most(path, limit: int) -> bytes:
    """Up to `limit` bytes of the file at `path`. A pipe (a FIFO, a shell's `<(...)`) is read
    with a poll that wakes every 0.2 s: Python runs a signal's handler between bytecodes,
    so a SIGTERM landing just before a read that blocks in C would otherwise wait for the
    writer, perhaps forever."""
    import select
    import stat

    with open(path, "rb") as f:
        fd = f.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return f.read(limit)
        os.set_blocking(fd, False)
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            if not select.select([fd], [], [], 0.2)[0]:
                continue
            try:
                chunk = os.read(fd, limit - size)
            except BlockingIOError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)


def read_config_text(path, option: str) -> str:
    """The text of the config file `option` names, read no further than YAML_MAX_BYTES + 1:
    a ConfigError saying which and why where it cannot be read, is larger, or is not UTF-8."""
    try:
        data = _read_at_most(path, YAML_MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{option}: cannot read {path}: {exc.strerror}") from None
    if len(data) > YAML_MAX_BYTES:
        raise ConfigError(f"{option}: {path} is over {YAML_MAX_BYTES} bytes: not a config file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{option}: {path} is not UTF-8 text (byte {exc.start})") from None


def read_yaml_file(path, option: str):
    """The parsed YAML file that `option` names (parse_yaml's checks); ConfigError saying
    which and why otherwise."""
    return parse_yaml(read_config_text(path, option), f"{option} {path}")
