"""Scenario YAML -> a resolved, validated fleet description.

A scenario names tenants (the tenant catalog format, so the same file feeds ingest's
`--tenants`), nodes (each in one tenant cluster), the GPUs of each node and the pods on it
with their HAMi requests and a workload pattern. Loading resolves everything the
simulator needs once: GPU UUIDs, pod UIDs, which GPU each container slice is placed on,
the memory and cores HAMi grants. Any mistake raises ScenarioError naming the key path
and the YAML line, so a bad scenario stops start-up with a pointer to the fix.

Identities (GPU UUIDs, pod UIDs, region file names) depend only on names, never on the
seed or on other entries, so adding a pod changes nothing else.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from slicemeter.common import DNS_LABEL_RE, MiB


# NVML name -> (memory MiB as NVML reports it, idle watts, TDP watts)
GPU_MODELS: dict[str, tuple[int, float, float]] = {
    "NVIDIA A100-SXM4-80GB": (81920, 60.0, 400.0),
    "NVIDIA H100 80GB HBM3": (81559, 75.0, 700.0),
    "NVIDIA L4": (23034, 16.0, 72.0),
    "Tesla T4": (15360, 10.0, 70.0),
}

PATTERNS = ("steady-training", "diurnal-inference", "bursty-notebook", "idle-reservation", "batch-jobs")
# Optional numeric knobs per pattern (name -> (default, min, max)).
PATTERN_PARAMS: dict[str, dict[str, tuple[float, float, float]]] = {
    "steady-training": {"level": (0.85, 0.0, 1.0), "memory": (0.88, 0.0, 1.0)},
    "diurnal-inference": {"peak": (0.6, 0.0, 1.0), "base": (0.08, 0.0, 1.0), "memory": (0.55, 0.0, 1.0)},
    "bursty-notebook": {"level": (0.6, 0.0, 1.0), "session_prob": (0.5, 0.0, 1.0), "memory": (0.5, 0.0, 1.0)},
    "idle-reservation": {"memory": (0.04, 0.0, 1.0)},
    "batch-jobs": {"level": (0.9, 0.0, 1.0), "jobs_per_day": (6, 1, 48), "duration_min": (45, 15, 1440),
                   "memory": (0.8, 0.0, 1.0)},
}
# HAMi-core versions by region layout (simulator/hami_region.py); `hami_layout` v0/v1 is the older key
HAMI_CORE = ("v0", "1.1", "1.2", "1.1-2026-03")
LAYOUTS = ("v0", "v1")
# how HAMi's scheduler indexes hami.io/vgpu-devices-allocated: containers only up to v2.8.3,
# init containers first from v2.9.0
HAMI_VERSIONS = ("2.8", "2.10")
RES_GPU, RES_MEM, RES_MEM_PCT, RES_CORES = (
    "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; the message names the key path and line."""

    def __init__(self, message: str, path: str = "", line: int | None = None, source: str = ""):
        where = f"{source}:" if source else ""
        where += f"line {line}: " if line else ""
        super().__init__(f"{where}{path + ': ' if path else ''}{message}")
        self.path, self.line = path, line


def stable_hash(*parts: object) -> int:
    """64-bit hash of names (process-independent, unlike hash())."""
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def stable_uuid(*parts: object) -> str:
    """A version-4-shaped UUID from names (what uuid.UUID(bytes=h, version=4) prints, faster)."""
    h = bytearray(hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16).digest())
    h[6] = (h[6] & 0x0F) | 0x40
    h[8] = (h[8] & 0x3F) | 0x80
    x = h.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    model: str
    memory_mib: int
    idle_watts: float
    tdp_watts: float

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MiB


@dataclass(frozen=True)
class Workload:
    pattern: str
    params: tuple[tuple[str, float], ...]

    @property
    def params_dict(self) -> dict[str, float]:
        return dict(self.params)


@dataclass(frozen=True)
class Container:
    name: str
    devices: tuple[int, ...]        # GPU indices on the node (vdevice i -> devices[i])
    mem_mib: tuple[int, ...]        # HAMi grant per device (MiB); whole GPU: the GPU's memory
    cores: int                      # HAMi gpucores percent (0 = no SM limit)
    whole_gpu: bool
    workload: Workload
    processes: int
    hami_underreport: float          # 1.0 = honest; <1: HAMi region under-reports buffers
    writer_killed: bool              # a dead process's slot stuck mid-update (seqlock odd) in the region
    requests: dict[str, int]         # what the pod spec asked for (kubelet JSON)
    key: int                         # stable hash: seeds this container's noise
    sched_key: int                   # stable hash of the pod: notebook sessions, batch schedule

    @property
    def has_gpu(self) -> bool:
        return bool(self.devices)


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    uid: str
    containers: tuple[Container, ...]
    batch: bool                     # comes and goes, one pod per run: batch jobs, sessions, replicas
    init_containers: tuple[Container, ...] = ()   # ran to completion before the containers
    lifecycle: str | None = None    # "sessions" | "replica" (living fleet, see _living_pods)
    replica: tuple[int, int] | None = None   # (k, replicas) of a scaled deployment's extra replica


@dataclass(frozen=True)
class Node:
    name: str
    tenant: str
    cluster: str                    # the tenant's API server URL (cluster identity in Ticks)
    layout: str                     # region layout family: v0 | v1 | 1.1-2026-03 (unreadable by design)
    gpus: tuple[Gpu, ...]
    pods: tuple[Pod, ...]
    nvml_unsupported: frozenset[str] = frozenset()
    hami_core: str = "1.2"          # HAMi-core version writing the regions (HAMI_CORE)
    hami_version: str = "2.10"      # HAMi scheduler version writing the annotations (HAMI_VERSIONS)
    watcher_zeroed: float = 0.0     # share of reads that catch HAMi-core's watcher between zeroing and setting sm_util
    joins_ms: int | None = None     # the node (a tenant onboarding) sends nothing before this instant


@dataclass
class Scenario:
    source: str
    tenants: list[dict[str, Any]]
    nodes: list[Node] = field(default_factory=list)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in scenario {self.source} (nodes: {', '.join(n.name for n in self.nodes[:10])}...)")

    @property
    def tenant_by_name(self) -> dict[str, dict[str, Any]]:
        return {t["name"]: t for t in self.tenants}


# ---------------------------------------------------------------- YAML with line numbers

class _Doc:
    """Parsed YAML plus the line of every key path, for error messages."""

    def __init__(self, text: str, source: str):
        self.source = source
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
            self.data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark else None
            raise ScenarioError(f"bad YAML: {getattr(exc, 'problem', None) or exc}", "", line, source) from None
        self.lines: dict[str, int] = {}
        if root is not None:
            self._walk(root, "")

    def _walk(self, node: yaml.Node, path: str) -> None:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                sub = f"{path}.{k.value}" if path else str(k.value)
                self.lines[sub] = k.start_mark.line + 1
                self._walk(v, sub)
                self.lines[sub] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                self._walk(v, f"{path}[{i}]")

    def line(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return self.lines.get("")

    def error(self, path: str, message: str) -> ScenarioError:
        return ScenarioError(message, path, self.line(path), self.source)


def _get(doc: _Doc, obj: Any, path: str, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if not isinstance(obj, dict):
        raise doc.error(path, f"expected a mapping, got {type(obj).__name__}")
    sub = f"{path}.{key}" if path else key
    if key not in obj or obj[key] is None:
        if default is ...:
            raise doc.error(sub, "missing required key")
        return default
    value = obj[key]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise doc.error(sub, f"expected {want}, got {type(value).__name__} {value!r}")
    return value


def _check_keys(doc: _Doc, obj: dict, path: str, allowed: set[str]) -> None:
    for k in obj:
        if k not in allowed:
            raise doc.error(f"{path}.{k}", f"unknown key (allowed: {', '.join(sorted(allowed))})")


# ---------------------------------------------------------------- loading

def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario: {exc.strerror}", "", None, str(path)) from None
    return parse_scenario(text, str(path))


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    doc = _Doc(text, source)
    top = doc.data
    if not isinstance(top, dict):
        raise doc.error("", "a scenario is a mapping with tenants: and nodes:")
    _check_keys(doc, top, "", {"tenants", "nodes", "description"})
    tenants = _load_tenants(doc, _get(doc, top, "", "tenants", list))
    by_name = {t["name"]: t for t in tenants}
    nodes: list[Node] = []
    seen: dict[str, str] = {}
    for i, raw in enumerate(_get(doc, top, "", "nodes", list)):
        for node in _load_node(doc, raw, f"nodes[{i}]", by_name):
            if node.name in seen:
                raise doc.error(f"nodes[{i}].name", f"node {node.name!r} defined twice (first at {seen[node.name]})")
            seen[node.name] = f"nodes[{i}]"
            nodes.append(node)
    if not nodes:
        raise doc.error("nodes", "a scenario needs at least one node")
    return Scenario(source=source, tenants=tenants, nodes=nodes)


def _load_tenants(doc: _Doc, raw: list) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(raw):
        p = f"tenants[{i}]"
        _check_keys(doc, t if isinstance(t, dict) else {}, p,
                    {"name", "display_name", "kamaji", "api_server", "cost_center", "namespace_overrides", "aliases"})
        name = _get(doc, t, p, "name", str)
        if not DNS_LABEL_RE.match(name):
            raise doc.error(f"{p}.name", f"tenant name {name!r} is not a lowercase DNS label")
        api = _get(doc, t, p, "api_server", str)
        if not re.match(r"^https?://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(:\d+)?/?$", api):
            raise doc.error(f"{p}.api_server", f"{api!r} is not an https://host:port URL")
        kamaji = _get(doc, t, p, "kamaji", dict, {})
        for k in ("namespace", "name"):
            if k in kamaji:
                _get(doc, kamaji, f"{p}.kamaji", k, str)
        # more identities of the tenant's cluster for the ingest's catalog; the simulator
        # names its Ticks' cluster by api_server alone
        for j, alias in enumerate(_get(doc, t, p, "aliases", list, [])):
            if not isinstance(alias, str):
                raise doc.error(f"{p}.aliases[{j}]", f"expected str, got {type(alias).__name__} {alias!r}")
        overrides = _get(doc, t, p, "namespace_overrides", list, [])
        for j, o in enumerate(overrides):
            _get(doc, o, f"{p}.namespace_overrides[{j}]", "namespace", str)
            _get(doc, o, f"{p}.namespace_overrides[{j}]", "tenant", str)
        out.append(dict(t))
    names = [t["name"] for t in out]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise doc.error(f"tenants[{i}].name", f"tenant {n!r} defined twice")
    for i, t in enumerate(out):
        for j, o in enumerate(t.get("namespace_overrides") or []):
            if o["tenant"] not in names:
                raise doc.error(f"tenants[{i}].namespace_overrides[{j}].tenant", f"unknown tenant {o['tenant']!r}")
    return out


def _load_node(doc: _Doc, raw: Any, p: str, tenants: dict[str, dict]) -> list[Node]:
    _check_keys(doc, raw if isinstance(raw, dict) else {}, p,
                {"name", "tenant", "hami_layout", "hami_core", "hami_version", "hami_watcher_zeroed", "count", "gpus",
                 "pods", "nvml_unsupported"} | LIVING_NODE_KEYS)
    base = _get(doc, raw, p, "name", str)
    if not _DNS_SUBDOMAIN.match(base):
        raise doc.error(f"{p}.name", f"node name {base!r} is not a DNS name")
    tenant = _get(doc, raw, p, "tenant", str)
    if tenant not in tenants:
        raise doc.error(f"{p}.tenant", f"unknown tenant {tenant!r} (tenants: {', '.join(tenants)})")
    layout = _get(doc, raw, p, "hami_layout", str, "v1")
    if layout not in LAYOUTS:
        raise doc.error(f"{p}.hami_layout", f"unknown HAMi layout {layout!r} (known: v0, v1)")
    if "hami_layout" in raw and "hami_core" in raw:
        raise doc.error(f"{p}.hami_core", "give hami_core or the older hami_layout, not both")
    core = str(_get(doc, raw, p, "hami_core", (str, float), "v0" if layout == "v0" else "1.2"))
    if core not in HAMI_CORE:
        raise doc.error(f"{p}.hami_core", f"unknown HAMi-core version {core!r} (known: {', '.join(HAMI_CORE)})")
    layout = {"v0": "v0", "1.1-2026-03": "1.1-2026-03"}.get(core, "v1")
    hami_version = _get(doc, raw, p, "hami_version", str, "2.10")
    if hami_version not in HAMI_VERSIONS:
        raise doc.error(f"{p}.hami_version", f"unknown HAMi version {hami_version!r} (known: {', '.join(HAMI_VERSIONS)})")
    zeroed = _get(doc, raw, p, "hami_watcher_zeroed", (int, float), 0.0)
    if isinstance(zeroed, bool) or not 0.0 <= zeroed <= 1.0:
        raise doc.error(f"{p}.hami_watcher_zeroed", f"{zeroed!r} is outside [0, 1]")
    count = _get(doc, raw, p, "count", int, 1)
    if count < 1:
        raise doc.error(f"{p}.count", "count must be >= 1")
    unsupported = frozenset(_get(doc, raw, p, "nvml_unsupported", list, []))
    for fn in unsupported:
        if not isinstance(fn, str) or not re.match(r"^nvml[A-Za-z_]+$", fn):
            raise doc.error(f"{p}.nvml_unsupported", f"{fn!r} is not an NVML function name")
    gpu_specs = []
    for j, g in enumerate(_get(doc, raw, p, "gpus", list)):
        gp = f"{p}.gpus[{j}]"
        _check_keys(doc, g if isinstance(g, dict) else {}, gp, {"model", "count", "memory_mib"})
        model = _get(doc, g, gp, "model", str)
        if model not in GPU_MODELS:
            raise doc.error(f"{gp}.model", f"unknown GPU model {model!r} (known: {', '.join(GPU_MODELS)})")
        n = _get(doc, g, gp, "count", int, 1)
        if n < 1:
            raise doc.error(f"{gp}.count", "count must be >= 1")
        mem = _get(doc, g, gp, "memory_mib", int, GPU_MODELS[model][0])
        if mem < 1:
            raise doc.error(f"{gp}.memory_mib", "memory_mib must be positive")
        gpu_specs += [(model, mem)] * n
    if not gpu_specs:
        raise doc.error(f"{p}.gpus", "a node needs at least one GPU")
    if len(gpu_specs) > 16:
        raise doc.error(f"{p}.gpus", f"{len(gpu_specs)} GPUs: HAMi's region holds at most 16 devices")
    pods_raw = _get(doc, raw, p, "pods", list, [])
    cluster = tenants[tenant]["api_server"]
    nodes = []
    for k in range(count):
        name = base if count == 1 else f"{base}-{k + 1:04d}"
        suffix = "" if count == 1 else f"-{k + 1:04d}"
        gpus = tuple(
            Gpu(i, "GPU-" + stable_uuid("gpu", name, i), model, mem, *GPU_MODELS[model][1:])
            for i, (model, mem) in enumerate(gpu_specs)
        )
        pods = _load_pods(doc, pods_raw, p, name, suffix, cluster, gpus)
        nodes.append(Node(name, tenant, cluster, layout, gpus, pods, unsupported, core, hami_version, float(zeroed),
                          _load_joins(doc, raw, p)))
    return nodes


def _load_workload(doc: _Doc, raw: Any, p: str) -> Workload:
    if isinstance(raw, str):
        raw = {"pattern": raw}
    pattern = _get(doc, raw, p, "pattern", str)
    if pattern not in PATTERNS:
        raise doc.error(f"{p}.pattern", f"unknown workload pattern {pattern!r} (known: {', '.join(PATTERNS)})")
    spec = PATTERN_PARAMS[pattern]
    _check_keys(doc, raw, p, {"pattern", *spec})
    params = {}
    for k, (default, lo, hi) in spec.items():
        v = _get(doc, raw, p, k, (int, float), default)
        if isinstance(v, bool) or not lo <= v <= hi:
            raise doc.error(f"{p}.{k}", f"{v!r} is outside [{lo}, {hi}]")
        params[k] = float(v)
    return Workload(pattern, tuple(sorted(params.items())))


def _load_pods(doc: _Doc, pods_raw: list, node_path: str, node: str, suffix: str, cluster: str,
               gpus: tuple[Gpu, ...]) -> tuple[Pod, ...]:
    mem_used = [0] * len(gpus)
    cores_used = [0] * len(gpus)
    whole_taken = [False] * len(gpus)
    pods = []
    for i, raw in enumerate(pods_raw):
        p = f"{node_path}.pods[{i}]"
        _check_keys(doc, raw if isinstance(raw, dict) else {}, p,
                    {"name", "namespace", "containers", "init_containers", "workload"} | LIVING_POD_KEYS)
        name = _get(doc, raw, p, "name", str) + suffix
        ns = _get(doc, raw, p, "namespace", str, "default")
        for key, v in (("name", name), ("namespace", ns)):
            if not DNS_LABEL_RE.match(v) and not (key == "name" and _DNS_SUBDOMAIN.match(v)):
                raise doc.error(f"{p}.{key}", f"{v!r} is not a valid Kubernetes {key}")
        pod_workload = raw.get("workload")
        # init containers run to completion first: placed on free capacity, which they give back
        inits = tuple(
            _load_container(doc, c, f"{p}.init_containers[{j}]", "idle-reservation", p, node, name, ns, gpus,
                            list(mem_used), list(cores_used), list(whole_taken))
            for j, c in enumerate(_get(doc, raw, p, "init_containers", list, [])))
        containers = []
        for j, c in enumerate(_get(doc, raw, p, "containers", list)):
            cp = f"{p}.containers[{j}]"
            containers.append(_load_container(doc, c, cp, pod_workload, p, node, name, ns,
                                              gpus, mem_used, cores_used, whole_taken))
        if not containers:
            raise doc.error(f"{p}.containers", "a pod needs at least one container")
        cnames = [c.name for c in (*inits, *containers)]
        if len(set(cnames)) != len(cnames):
            raise doc.error(f"{p}.containers", f"duplicate container names {cnames}")
        batch = any(c.workload.pattern == "batch-jobs" for c in containers)
        if batch and len({c.workload for c in containers if c.has_gpu}) != 1:
            raise doc.error(f"{p}.containers", "a batch-jobs pod's GPU containers must share one workload (one schedule)")
        uid = stable_uuid("pod", cluster, ns, name)

        def replica_containers(replica: str, raw=raw, p=p, pod_workload=pod_workload, ns=ns) -> tuple[Container, ...]:
            return tuple(_load_container(doc, c, f"{p}.containers[{j}]", pod_workload, p, node, replica, ns,
                                         gpus, mem_used, cores_used, whole_taken)
                         for j, c in enumerate(raw["containers"]))

        pods.extend(_living_pods(doc, raw, p, Pod(name, ns, uid, tuple(containers), batch, inits), cluster, replica_containers))
    names = [(pd.namespace, pd.name) for pd in pods]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise doc.error(f"{node_path}.pods[{i}].name", f"pod {n[0]}/{n[1]} defined twice on node {node}")
    return tuple(pods)


def _load_container(doc: _Doc, c: Any, cp: str, pod_workload: Any, pod_path: str, node: str, pod: str, ns: str,
                    gpus: tuple[Gpu, ...], mem_used: list[int], cores_used: list[int],
                    whole_taken: list[bool]) -> Container:
    _check_keys(doc, c if isinstance(c, dict) else {}, cp,
                {"name", "resources", "workload", "processes", "devices", "hami_underreport", "hami_writer_killed"})
    cname = _get(doc, c, cp, "name", str)
    if not DNS_LABEL_RE.match(cname):
        raise doc.error(f"{cp}.name", f"{cname!r} is not a valid container name")
    res = _get(doc, c, cp, "resources", dict, {})
    rp = f"{cp}.resources"
    _check_keys(doc, res, rp, {RES_GPU, RES_MEM, RES_MEM_PCT, RES_CORES})
    for k in res:
        v = _get(doc, res, rp, k, int)
        if v < 0:
            raise doc.error(f"{rp}.{k}", "must be >= 0")
    n_gpu = res.get(RES_GPU, 1 if (RES_MEM in res or RES_MEM_PCT in res or RES_CORES in res) else 0)
    if RES_MEM in res and RES_MEM_PCT in res:
        raise doc.error(f"{rp}.{RES_MEM_PCT}", f"give {RES_MEM} or {RES_MEM_PCT}, not both")
    if res.get(RES_MEM_PCT, 0) > 100 or res.get(RES_CORES, 0) > 100:
        raise doc.error(rp, "percentages must be <= 100")
    whole = n_gpu > 0 and not (RES_MEM in res or RES_MEM_PCT in res or RES_CORES in res)
    wl_raw = c.get("workload", pod_workload)
    wl_path = f"{cp}.workload" if "workload" in c else f"{pod_path}.workload"
    if n_gpu and wl_raw is None:
        raise doc.error(f"{cp}.workload", "missing required key (a GPU container needs a workload pattern)")
    workload = _load_workload(doc, wl_raw, wl_path) if wl_raw is not None else Workload("idle-reservation", (("memory", 0.0),))
    processes = _get(doc, c, cp, "processes", int, max(1, n_gpu))
    if not 1 <= processes <= 64:
        raise doc.error(f"{cp}.processes", "processes must be within 1..64")
    under = float(_get(doc, c, cp, "hami_underreport", (int, float), 1.0))
    if not 0.0 <= under <= 1.0:
        raise doc.error(f"{cp}.hami_underreport", "must be within [0, 1]")
    killed = _get(doc, c, cp, "hami_writer_killed", bool, False)
    if n_gpu > len(gpus):
        raise doc.error(f"{rp}.{RES_GPU}", f"asks for {n_gpu} GPUs, node {node} has {len(gpus)}")

    def mem_for(g: Gpu) -> int:
        if whole:
            return g.memory_mib
        if RES_MEM in res:
            return res[RES_MEM]
        if RES_MEM_PCT in res:
            return g.memory_mib * res[RES_MEM_PCT] // 100
        return g.memory_mib  # cores only: HAMi's default is the device's whole memory

    cores = 100 if whole else res.get(RES_CORES, 0)
    devices_raw = c.get("devices")
    if devices_raw is not None:
        devices = _get(doc, c, cp, "devices", list)
        if len(devices) != n_gpu or len(set(devices)) != len(devices):
            raise doc.error(f"{cp}.devices", f"needs {n_gpu} distinct GPU indices, got {devices}")
        for d in devices:
            if not isinstance(d, int) or not 0 <= d < len(gpus):
                raise doc.error(f"{cp}.devices", f"GPU index {d!r} is not on node {node} (0..{len(gpus) - 1})")
        for d in devices:
            g = gpus[d]
            if mem_used[d] + mem_for(g) > g.memory_mib:
                raise doc.error(
                    f"{cp}.resources",
                    f"slices on node {node} GPU {d} ({g.model}) ask for {mem_used[d] + mem_for(g)} MiB, "
                    f"the GPU has {g.memory_mib} MiB")
            if whole_taken[d] or (whole and mem_used[d]):
                raise doc.error(f"{cp}.devices", f"node {node} GPU {d} is already taken by a whole-GPU pod or shared")
    else:
        devices = []
        for d, g in enumerate(gpus):
            if len(devices) == n_gpu:
                break
            if whole_taken[d] or (whole and mem_used[d]):
                continue
            if mem_used[d] + mem_for(g) <= g.memory_mib and cores_used[d] + cores <= 100:
                devices.append(d)
        if len(devices) < n_gpu:
            raise doc.error(
                f"{cp}.resources",
                f"no room on node {node}: slices would ask for more memory than a GPU has "
                f"({n_gpu} GPU(s) x {mem_for(gpus[0])} MiB requested, free MiB per GPU: "
                f"{[g.memory_mib - mem_used[i] for i, g in enumerate(gpus)]})")
    for d in devices:
        mem_used[d] += mem_for(gpus[d])
        cores_used[d] += cores
        whole_taken[d] = whole_taken[d] or whole
    requests = {k: int(v) for k, v in res.items()}
    if n_gpu and RES_GPU not in requests:
        requests[RES_GPU] = n_gpu
    return Container(
        name=cname, devices=tuple(devices), mem_mib=tuple(mem_for(gpus[d]) for d in devices), cores=cores, whole_gpu=whole,
        workload=workload, processes=processes if n_gpu else 0, hami_underreport=under, writer_killed=killed,
        requests=requests, key=stable_hash("container", node, ns, pod, cname),
        sched_key=stable_hash("pod", node, ns, pod),
    )


# ---------------------------------------------------------------- the living fleet
# Pods that come and go (docs/simulator.md, "A living fleet"): notebook sessions opened and
# closed, a deployment's extra replicas scaled with its diurnal load, nodes of a tenant that
# onboards part-way through the history. Batch jobs (the batch-jobs pattern) already come and go.

LIVING_POD_KEYS = {"lifecycle", "replicas"}
LIVING_NODE_KEYS = {"joins"}
MAX_REPLICAS = 16


def _gpu_patterns(pod: Pod) -> set[str]:
    return {c.workload.pattern for c in pod.containers if c.has_gpu}


def _living_pods(doc: _Doc, raw: dict, p: str, pod: Pod, cluster: str, load_replica) -> list[Pod]:
    """The pod as given, or as a living one: `lifecycle: sessions` (a notebook that exists
    only while its user has it open, or a slice reserved on a working day and left idle for
    hours) or `replicas: N` (replica 0 always up, replica k up
    while the service's load is at least k/N of its peak; each replica is its own slice)."""
    lifecycle, replicas = raw.get("lifecycle"), raw.get("replicas")
    if lifecycle is None and replicas is None:
        return [pod]
    if lifecycle is not None and replicas is not None:
        raise doc.error(f"{p}.replicas", "give lifecycle or replicas, not both")
    if lifecycle is not None:
        if lifecycle != "sessions":
            raise doc.error(f"{p}.lifecycle", f"unknown lifecycle {lifecycle!r} (known: sessions)")
        if _gpu_patterns(pod) not in ({"bursty-notebook"}, {"idle-reservation"}):
            raise doc.error(f"{p}.lifecycle", "sessions follow a notebook's schedule or an idle reservation's "
                                              "working-day habit: the pod's GPU containers need the "
                                              "bursty-notebook or the idle-reservation pattern")
        return [replace(pod, batch=True, lifecycle="sessions")]
    n = _get(doc, raw, p, "replicas", int)
    if not 2 <= n <= MAX_REPLICAS:
        raise doc.error(f"{p}.replicas", f"replicas must be within 2..{MAX_REPLICAS}, got {n}")
    if _gpu_patterns(pod) != {"diurnal-inference"}:
        raise doc.error(f"{p}.replicas", "replicas scale with a diurnal load: the pod's GPU containers need "
                                         "the diurnal-inference pattern")
    out = [pod]
    for k in range(1, n):
        name = f"{pod.name}-r{k}"
        out.append(Pod(name, pod.namespace, stable_uuid("pod", cluster, pod.namespace, name),
                       load_replica(name), True, pod.init_containers, lifecycle="replica", replica=(k, n)))
    return out


def _load_joins(doc: _Doc, raw: dict, p: str) -> int | None:
    """`joins: 2026-11-15` (a UTC date or date-time), or `joins: {days_before_now: 16}`:
    that many days before today's UTC midnight on slicemeter's clock, so a demo run on any
    day shows the onboarding inside its history."""
    value = raw.get("joins")
    if value is None:
        return None
    key = f"{p}.joins"
    if isinstance(value, dict):
        _check_keys(doc, value, key, {"days_before_now"})
        days = _get(doc, value, key, "days_before_now", int)
        if days < 0:
            raise doc.error(f"{key}.days_before_now", "must be >= 0")
        from slicemeter import clock

        today = clock.now().replace(hour=0, minute=0, second=0, microsecond=0)
        return int((today - dt.timedelta(days=days)).timestamp() * 1000)
    if isinstance(value, dt.datetime):
        when = value
    elif isinstance(value, dt.date):
        when = dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value)
        except ValueError:
            raise doc.error(key, f"{value!r} is not a date (YYYY-MM-DD) or {{days_before_now: N}}") from None
    else:
        raise doc.error(key, f"expected a date or {{days_before_now: N}}, got {value!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)
