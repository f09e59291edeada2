"""Scenario YAML -> a resolved, validated fleet description.

A scenario names tenants (the tenant catalog format, so the same file feeds ingest's
`--tenants`), nodes (each in one tenant cluster), the GPUs of each node and the pods on it
with their HAMi requests and a workload pattern. Loading resolves everything the
simulator needs once: GPU UUIDs, pod UIDs, which GPU each container slice is placed on,
the memory and cores HAMi grants. The file's shape is a schema (ScenarioSpec); any mistake
raises ScenarioError (a ConfigError) naming the YAML line and the key path, so a bad
scenario stops start-up with a pointer to the fix.

Identities (GPU UUIDs, pod UIDs, region file names) depend only on names, never on the
seed or on other entries, so adding a pod changes nothing else.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, PlainValidator, model_validator

from slicemeter.common import ConfigError, MiB, read_config_text
from slicemeter.config_schema import (DNS_LABEL, DNS_SUBDOMAIN, ConfigFileError, DnsName, Loc, Schema, Share,
                                      YamlLines, invalid, load, matching, one_of)
from slicemeter.tenant_model import ScenarioTenant, ScenarioTenantList
from slicemeter.simulator.faults import Fault, FaultSpec


# NVML name -> (memory MiB as NVML reports it, idle watts, TDP watts)
GPU_MODELS: dict[str, tuple[int, float, float]] = {
    "NVIDIA A100-SXM4-80GB": (81920, 60.0, 400.0),
    "NVIDIA H100 80GB HBM3": (81559, 75.0, 700.0),
    "NVIDIA L4": (23034, 16.0, 72.0),
    "Tesla T4": (15360, 10.0, 70.0),
}
# Devices no NVML reads, metered by allocation only: name as the DRA driver publishes it ->
# (memory MiB, idle watts, TDP watts) and the driver (docs/simulator.md, DRA pods)
NPU_MODELS: dict[str, tuple[int, float, float]] = {
    "910B3": (65536, 70.0, 310.0),
}
DEVICE_MODELS = {**GPU_MODELS, **NPU_MODELS}

# A node's devices published through DRA, by the short name a scenario uses -> the driver.
# `nvidia` publishes whole GPUs, `nvidia-shares` GPUs shared by memory (ConsumableShares).
DRA_DEVICE_DRIVERS = {
    "hami-core": "hami-core-gpu.project-hami.io",
    "nvidia": "gpu.nvidia.com",
    "nvidia-shares": "gpu.nvidia.com",
    "ascend": "ascend.project-hami.io",
}
DRA_CLAIM_DRIVERS = ("hami-core", "nvidia", "ascend")

PATTERNS = ("steady-training", "diurnal-inference", "bursty-notebook", "idle-reservation", "batch-jobs")
# The knobs each pattern takes, and their defaults (their ranges: WorkloadSpec).
PATTERN_PARAMS: dict[str, dict[str, float]] = {
    "steady-training": {"level": 0.85, "memory": 0.88},
    "diurnal-inference": {"peak": 0.6, "base": 0.08, "memory": 0.55},
    "bursty-notebook": {"level": 0.6, "session_prob": 0.5, "memory": 0.5},
    "idle-reservation": {"memory": 0.04},
    "batch-jobs": {"level": 0.9, "jobs_per_day": 6, "duration_min": 45, "memory": 0.8},
}
# HAMi-core versions by region layout (simulator/hami_region.py); `hami_layout` v0/v1 is the older key
HAMI_CORE = ("v0", "1.1", "1.2", "1.1-2026-03")
LAYOUTS = ("v0", "v1")
# how HAMi's scheduler indexes hami.io/vgpu-devices-allocated: containers only up to v2.8.3,
# init containers first from v2.9.0
HAMI_VERSIONS = ("2.8", "2.10")
RES_GPU, RES_MEM, RES_MEM_PCT, RES_CORES = (
    "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")
MAX_REPLICAS = 16


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
    dra: str | None = None          # published through DRA by this kind (DRA_DEVICE_DRIVERS); None: device plugin

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MiB

    @property
    def nvml(self) -> bool:
        """Whether NVML lists the device (an NPU it does not: metered by allocation)."""
        return self.model in GPU_MODELS

    @property
    def driver(self) -> str | None:
        return DRA_DEVICE_DRIVERS.get(self.dra) if self.dra else None


@dataclass(frozen=True)
class Workload:
    pattern: str
    params: tuple[tuple[str, float], ...]

    @property
    def params_dict(self) -> dict[str, float]:
        return dict(self.params)


@dataclass(frozen=True)
class DraGrant:
    """A container's device granted through a DRA ResourceClaim instead of HAMi's annotation."""
    kind: str                        # the device's kind (DRA_DEVICE_DRIVERS)
    memory_mib: int | None           # consumed memory capacity; None: not requested
    cores: int | None                # consumed cores capacity (percent); None: not requested
    claim: str | None                # a named claim shared by every container naming it; None: its own
    extended: bool                   # `nvidia.com/gpu` served by DRA (the scheduler's generated claim)
    sharers: int                     # containers consuming the claim's one result (time-slicing)

    @property
    def driver(self) -> str:
        return DRA_DEVICE_DRIVERS[self.kind]

    def shares(self, device_memory_mib: int) -> tuple[float, float]:
        """(memory share, cores share) of the device after the claim's split, as the exporter
        computes them (docs/dra.md): consumed / capacity; HAMi's plugin enforces the whole
        memory and an SM limit of 60 where the claim names none; a device shared by memory
        only, or a whole device, has one share, sent as both."""
        if self.kind == "nvidia":
            return 1.0 / self.sharers, 1.0 / self.sharers
        mem = (self.memory_mib if self.memory_mib is not None else device_memory_mib) / device_memory_mib
        if self.kind == "nvidia-shares":
            return mem, mem
        if self.cores is not None:
            return mem, self.cores / 100
        return mem, HAMI_DRA_DEFAULT_CORES / 100 if self.kind == "hami-core" else 0.0


# HAMi's DRA plugin: a claim without a cores value runs under an SM limit of 60
HAMI_DRA_DEFAULT_CORES = 60


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
    dra: DraGrant | None = None      # granted through a ResourceClaim (no HAMi annotation entry)

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
    faults: tuple[Fault, ...] = ()  # GPU faults (simulator/faults.py)


@dataclass
class Scenario:
    source: str
    tenants: list[ScenarioTenant]
    nodes: list[Node] = field(default_factory=list)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in scenario {self.source} (nodes: {', '.join(n.name for n in self.nodes[:10])}...)")

    @property
    def tenant_by_name(self) -> dict[str, ScenarioTenant]:
        return {t.name: t for t in self.tenants}


# ---------------------------------------------------------------- the file's schema
# The shape of a scenario (keys, types, ranges, choices) is declared here; the loader below
# checks only what needs the whole fleet: names, placement of slices on GPUs, living pods.

Pattern = one_of("workload pattern", PATTERNS)
Count = Annotated[int, Field(ge=0)]
Percent = Annotated[int, Field(ge=0, le=100)]


class WorkloadSpec(Schema):
    """A pattern and its knobs; `workload: steady-training` is the pattern with its defaults."""
    pattern: Pattern
    level: Share | None = None
    memory: Share | None = None
    peak: Share | None = None
    base: Share | None = None
    session_prob: Share | None = None
    jobs_per_day: Annotated[float, Field(ge=1, le=48)] | None = None
    duration_min: Annotated[float, Field(ge=15, le=1440)] | None = None

    @classmethod
    def shorthand(cls, data: Any) -> Any:
        return {"pattern": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _knobs_of_the_pattern(self):
        defaults = PATTERN_PARAMS[self.pattern]
        if foreign := sorted(self.model_fields_set - {"pattern"} - set(defaults)):
            raise invalid(f"unknown key for {self.pattern} (allowed: {', '.join(['pattern', *defaults])})", foreign[0])
        return self

    def resolved(self) -> Workload:
        params = {k: float(getattr(self, k) if k in self.model_fields_set else v)
                  for k, v in PATTERN_PARAMS[self.pattern].items()}
        return Workload(self.pattern, tuple(sorted(params.items())))


class Resources(Schema):
    """HAMi's resource names, as a pod spec's limits write them."""
    gpu: Count | None = Field(None, alias=RES_GPU)
    gpumem: Count | None = Field(None, alias=RES_MEM)
    gpumem_percentage: Percent | None = Field(None, alias=RES_MEM_PCT)
    gpucores: Percent | None = Field(None, alias=RES_CORES)

    @model_validator(mode="after")
    def _one_memory_limit(self):
        if self.gpumem is not None and self.gpumem_percentage is not None:
            raise invalid(f"give {RES_MEM} or {RES_MEM_PCT}, not both", RES_MEM_PCT)
        return self

    @property
    def sliced(self) -> bool:
        return self.gpumem is not None or self.gpumem_percentage is not None or self.gpucores is not None


class DraSpec(Schema):
    """A device granted through a DRA ResourceClaim: HAMi's driver (memory MiB, cores), NVIDIA's
    (a whole GPU, by memory on a ConsumableShares GPU, one named claim several pods share, or
    `nvidia.com/gpu` served by DRA) or HAMi's Ascend driver (memory, cores)."""
    driver: one_of("DRA driver", DRA_CLAIM_DRIVERS)
    memory: Annotated[int, Field(ge=1)] | None = None
    cores: Percent | None = None
    claim: matching(DNS_SUBDOMAIN, "a valid Kubernetes name") | None = None
    extended: bool = False

    @model_validator(mode="after")
    def _a_claim_the_driver_serves(self):
        if self.driver == "nvidia":
            if self.cores is not None:
                raise invalid("NVIDIA's driver shares a GPU by memory only (ConsumableShares)", "cores")
            if (self.claim is not None or self.extended) and self.memory is not None:
                raise invalid("a shared or extended-resource claim takes a whole GPU: no memory", "memory")
            if self.claim is not None and self.extended:
                raise invalid("give claim or extended, not both", "extended")
        else:
            if self.claim is not None:
                raise invalid("only NVIDIA's driver time-slices a whole GPU between pods of one claim", "claim")
            if self.extended:
                raise invalid("only NVIDIA's driver serves nvidia.com/gpu through DRA here", "extended")
            if self.driver == "ascend" and self.memory is None:
                raise invalid("missing required key (an Ascend claim consumes memory)", "memory")
        return self

    @property
    def device_kind(self) -> str:
        return "nvidia-shares" if self.driver == "nvidia" and self.memory is not None else self.driver


class ContainerSpec(Schema):
    name: matching(DNS_LABEL, "a valid container name")
    resources: Resources = Resources()
    dra: DraSpec | None = None                  # granted through a ResourceClaim instead of `resources`
    workload: WorkloadSpec | None = None
    processes: Annotated[int, Field(ge=1, le=64)] | None = None
    devices: list[Count] | None = None
    hami_underreport: Share = 1.0               # 1.0 = honest; <1: HAMi region under-reports buffers
    hami_writer_killed: bool = False

    @model_validator(mode="after")
    def _one_way_of_granting(self):
        if self.dra is not None and (self.resources.sliced or self.resources.gpu is not None):
            raise invalid("give resources (HAMi's device plugin) or dra, not both", "dra")
        return self


class PodSpec(Schema):
    name: matching(DNS_SUBDOMAIN, "a valid Kubernetes name")
    namespace: matching(DNS_LABEL, "a valid Kubernetes namespace") = "default"
    containers: Annotated[list[ContainerSpec], Field(min_length=1)]
    init_containers: list[ContainerSpec] = []
    workload: WorkloadSpec | None = None        # the containers' default
    lifecycle: one_of("lifecycle", ("sessions",)) | None = None
    replicas: Annotated[int, Field(ge=2, le=MAX_REPLICAS)] | None = None

    @model_validator(mode="after")
    def _one_way_of_living(self):
        if self.lifecycle is not None and self.replicas is not None:
            raise invalid("give lifecycle or replicas, not both", "replicas")
        return self


class GpuSpec(Schema):
    model: one_of("GPU model", DEVICE_MODELS)
    count: Annotated[int, Field(ge=1)] = 1
    memory_mib: Annotated[int, Field(ge=1)] | None = None
    dra: one_of("DRA device kind", DRA_DEVICE_DRIVERS) | None = None   # published by a DRA driver

    @model_validator(mode="after")
    def _a_driver_for_the_model(self):
        npu = self.model in NPU_MODELS
        if npu != (self.dra == "ascend"):
            raise invalid(f"{self.model!r} is published by HAMi's Ascend driver: dra: ascend" if npu else
                          f"dra: ascend publishes Ascend NPUs ({', '.join(NPU_MODELS)}), not {self.model!r}", "dra")
        return self


def _joins(value: Any) -> dt.datetime | int:
    """`joins: 2026-11-15` (a UTC date or date-time), or `joins: {days_before_now: 16}` (-> 16)."""
    if isinstance(value, dict):
        for k in value:
            if k != "days_before_now":
                raise invalid("unknown key (allowed: days_before_now)", str(k))
        days = value.get("days_before_now")
        if isinstance(days, bool) or not isinstance(days, int) or days < 0:
            raise invalid(f"expected an integer >= 0, got {days!r}", "days_before_now")
        return days
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise invalid(f"{value!r} is not a date (YYYY-MM-DD) or {{days_before_now: N}}") from None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise invalid(f"expected a date or {{days_before_now: N}}, got {value!r}")
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


class NodeSpec(Schema):
    name: DnsName
    tenant: str
    hami_layout: one_of("HAMi layout", LAYOUTS) | None = None      # the older key: v0 | v1
    hami_core: one_of("HAMi-core version", HAMI_CORE) | None = None
    hami_version: one_of("HAMi version", HAMI_VERSIONS) = "2.10"
    hami_watcher_zeroed: Share = 0.0
    count: Annotated[int, Field(ge=1)] = 1
    gpus: Annotated[list[GpuSpec], Field(min_length=1)]
    pods: list[PodSpec] = []
    nvml_unsupported: list[matching(re.compile(r"^nvml[A-Za-z_]+$"), "an NVML function name")] = []
    joins: Annotated[dt.datetime | int, PlainValidator(_joins)] | None = None
    faults: list[FaultSpec] = []

    @model_validator(mode="after")
    def _consistent(self):
        if self.hami_layout is not None and self.hami_core is not None:
            raise invalid("give hami_core or the older hami_layout, not both", "hami_core")
        if (n := sum(g.count for g in self.gpus)) > 16:
            raise invalid(f"{n} GPUs: HAMi's region holds at most 16 devices", "gpus")
        for i, f in enumerate(self.faults):
            if f.gpu >= n:
                raise invalid(f"GPU index {f.gpu} is not on the node (0..{n - 1})", "faults", i, "gpu")
        return self


class ScenarioSpec(Schema):
    description: str | None = None
    tenants: ScenarioTenantList
    nodes: Annotated[list[NodeSpec], Field(min_length=1)]

    @model_validator(mode="after")
    def _nodes_of_known_tenants(self):
        names = [t.name for t in self.tenants]
        for i, n in enumerate(self.nodes):
            if n.tenant not in names:
                raise invalid(f"unknown tenant {n.tenant!r} (tenants: {', '.join(names)})", "nodes", i, "tenant")
        return self


ScenarioError = ConfigFileError   # a scenario's mistake: the key path and the YAML line


# ---------------------------------------------------------------- loading

def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = read_config_text(path, "scenario")
    except ConfigError as exc:
        raise ScenarioError(str(exc)) from None
    return parse_scenario(text, str(path))


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    spec, doc = load(ScenarioSpec, text, source)
    clusters = {t.name: t.api_server for t in spec.tenants}
    nodes: list[Node] = []
    seen: dict[str, str] = {}
    for i, raw in enumerate(spec.nodes):
        for node in _load_node(doc, raw, ("nodes", i), clusters[raw.tenant]):
            if node.name in seen:
                raise doc.error(("nodes", i, "name"), f"node {node.name!r} defined twice (first at {seen[node.name]})")
            seen[node.name] = f"nodes[{i}]"
            nodes.append(node)
    return Scenario(source=source, tenants=list(spec.tenants), nodes=nodes)


def _load_node(doc: YamlLines, raw: NodeSpec, at: Loc, cluster: str) -> list[Node]:
    core = raw.hami_core or ("v0" if raw.hami_layout == "v0" else "1.2")
    layout = {"v0": "v0", "1.1-2026-03": "1.1-2026-03"}.get(core, "v1")
    # devices NVML lists first, so a GPU's index is its NVML index; NPUs follow
    gpu_specs = sorted(((g.model, g.memory_mib or DEVICE_MODELS[g.model][0], g.dra) for g in raw.gpus
                        for _ in range(g.count)), key=lambda spec: spec[0] in NPU_MODELS)
    nvml_count = sum(model in GPU_MODELS for model, _, _ in gpu_specs)
    nodes = []
    for k in range(raw.count):
        suffix = "" if raw.count == 1 else f"-{k + 1:04d}"
        name = raw.name + suffix
        gpus = tuple(
            Gpu(i, "GPU-" + stable_uuid("gpu", name, i) if model in GPU_MODELS else f"{name}-{i - nvml_count}",
                model, mem, *DEVICE_MODELS[model][1:], dra=dra)
            for i, (model, mem, dra) in enumerate(gpu_specs)
        )
        pods = _load_pods(doc, raw.pods, at, name, suffix, cluster, gpus)
        nodes.append(Node(name, raw.tenant, cluster, layout, gpus, pods, frozenset(raw.nvml_unsupported), core,
                          raw.hami_version, raw.hami_watcher_zeroed, _joins_ms(raw.joins),
                          tuple(f.resolved() for f in raw.faults)))
    return nodes


def _load_pods(doc: YamlLines, pods_raw: list[PodSpec], node_at: Loc, node: str, suffix: str, cluster: str,
               gpus: tuple[Gpu, ...]) -> tuple[Pod, ...]:
    mem_used = [0] * len(gpus)
    cores_used = [0] * len(gpus)
    whole_taken = [False] * len(gpus)
    claims = _SharedClaims(pods_raw)
    pods = []
    for i, raw in enumerate(pods_raw):
        at = (*node_at, "pods", i)
        name, ns = raw.name + suffix, raw.namespace
        _check_dra_pod(doc, raw, at)
        # init containers run to completion first: placed on free capacity, which they give back
        inits = tuple(
            _load_container(doc, c, (*at, "init_containers", j), _IDLE, node, name, ns, gpus,
                            list(mem_used), list(cores_used), list(whole_taken))
            for j, c in enumerate(raw.init_containers))
        containers = [_load_container(doc, c, (*at, "containers", j), raw.workload, node, name, ns,
                                      gpus, mem_used, cores_used, whole_taken, claims)
                      for j, c in enumerate(raw.containers)]
        cnames = [c.name for c in (*inits, *containers)]
        if len(set(cnames)) != len(cnames):
            raise doc.error((*at, "containers"), f"duplicate container names {cnames}")
        batch = any(c.workload.pattern == "batch-jobs" for c in containers)
        if batch and len({c.workload for c in containers if c.has_gpu}) != 1:
            raise doc.error((*at, "containers"), "a batch-jobs pod's GPU containers must share one workload (one schedule)")
        uid = stable_uuid("pod", cluster, ns, name)

        def replica_containers(replica: str, raw=raw, at=at, ns=ns) -> tuple[Container, ...]:
            return tuple(_load_container(doc, c, (*at, "containers", j), raw.workload, node, replica, ns,
                                         gpus, mem_used, cores_used, whole_taken, claims)
                         for j, c in enumerate(raw.containers))

        pods.extend(_living_pods(doc, raw, at, Pod(name, ns, uid, tuple(containers), batch, inits), cluster, replica_containers))
    names = [(pd.namespace, pd.name) for pd in pods]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise doc.error((*node_at, "pods", i, "name"), f"pod {n[0]}/{n[1]} defined twice on node {node}")
    return tuple(pods)


_IDLE = WorkloadSpec(pattern="idle-reservation")


class _SharedClaims:
    """Named claims of a node's pods: how many containers share each, and the device it got."""

    def __init__(self, pods_raw: list[PodSpec]):
        self.sharers: dict[tuple[str, str], int] = {}
        for raw in pods_raw:
            for c in raw.containers:
                if c.dra is not None and c.dra.claim is not None:
                    key = (raw.namespace, c.dra.claim)
                    self.sharers[key] = self.sharers.get(key, 0) + 1
        self.device: dict[tuple[str, str], int] = {}


def _check_dra_pod(doc: YamlLines, raw: PodSpec, at: Loc) -> None:
    for j, c in enumerate(raw.init_containers):
        if c.dra is not None:
            raise doc.error((*at, "init_containers", j, "dra"), "init containers take HAMi resources only")
    living = raw.lifecycle is not None or raw.replicas is not None or any(
        (c.workload or raw.workload or _IDLE).pattern == "batch-jobs" for c in raw.containers)
    for j, c in enumerate(raw.containers):
        if living and c.dra is not None and c.dra.claim is not None:
            raise doc.error((*at, "containers", j, "dra", "claim"),
                            "a claim shared by name needs pods that stay (no lifecycle, replicas or batch-jobs)")


def _dra_device(doc: YamlLines, c: ContainerSpec, at: Loc, node: str, ns: str, gpus: tuple[Gpu, ...],
                mem_used: list[int], cores_used: list[int], whole_taken: list[bool],
                claims: _SharedClaims) -> tuple[int, DraGrant]:
    """The device a DRA container's claim is allocated: a shared claim's device once placed,
    else a pinned or first-fitting device of the claim's kind."""
    spec = c.dra
    kind = spec.device_kind
    key = (ns, spec.claim) if spec.claim is not None else None
    grant = DraGrant(kind, spec.memory, spec.cores, spec.claim, spec.extended,
                     claims.sharers[key] if key else 1)
    if key in claims.device:
        return claims.device[key], grant
    whole = kind == "nvidia"
    memory = lambda g: spec.memory if spec.memory is not None else g.memory_mib  # noqa: E731
    cores = spec.cores or 0

    def fits(d: int) -> str | None:
        g = gpus[d]
        if g.dra != kind:
            return f"GPU {d} ({g.model}) is {'published by DRA as ' + g.dra if g.dra else 'the device plugin'}'s, " \
                   f"not a DRA {kind} device"
        if whole_taken[d] or (whole and mem_used[d]):
            return f"GPU {d} is already taken by a whole-GPU claim or shared"
        if mem_used[d] + memory(g) > g.memory_mib or cores_used[d] + cores > 100:
            return f"GPU {d} ({g.model}) has {g.memory_mib - mem_used[d]} MiB and {100 - cores_used[d]} cores left"
        return None

    if c.devices is not None:
        if len(c.devices) != 1 or c.devices[0] >= len(gpus):
            raise doc.error((*at, "devices"), f"a claim here is one device of node {node} (0..{len(gpus) - 1}), "
                                              f"got {c.devices}")
        d = c.devices[0]
        if (why := fits(d)) is not None:
            raise doc.error((*at, "devices"), why)
    else:
        d = next((d for d in range(len(gpus)) if fits(d) is None), None)
        if d is None:
            raise doc.error((*at, "dra"), f"no room on node {node}: no DRA {kind} device with "
                                          f"{spec.memory or 'all its'} MiB and {cores} cores free")
    mem_used[d] += memory(gpus[d])
    cores_used[d] += cores
    whole_taken[d] = whole_taken[d] or whole
    if key is not None:
        claims.device[key] = d
    return d, grant


def _load_container(doc: YamlLines, c: ContainerSpec, at: Loc, pod_workload: WorkloadSpec | None, node: str,
                    pod: str, ns: str, gpus: tuple[Gpu, ...], mem_used: list[int], cores_used: list[int],
                    whole_taken: list[bool], claims: _SharedClaims | None = None) -> Container:
    if c.dra is not None:
        spec = c.workload or pod_workload
        if spec is None:
            raise doc.error((*at, "workload"), "missing required key (a GPU container needs a workload pattern)")
        d, grant = _dra_device(doc, c, at, node, ns, gpus, mem_used, cores_used, whole_taken, claims)
        g = gpus[d]
        # the workload's memory scale: the consumed memory, or the device's split between sharers
        mem = grant.memory_mib if grant.memory_mib is not None else g.memory_mib // grant.sharers
        cores = grant.cores if grant.cores is not None else HAMI_DRA_DEFAULT_CORES if grant.kind == "hami-core" else 0
        return Container(
            name=c.name, devices=(d,), mem_mib=(mem,), cores=cores, whole_gpu=False, workload=spec.resolved(),
            processes=c.processes or 1, hami_underreport=c.hami_underreport, writer_killed=c.hami_writer_killed,
            requests={RES_GPU: 1} if grant.extended else {}, key=stable_hash("container", node, ns, pod, c.name),
            sched_key=stable_hash("pod", node, ns, pod), dra=grant)
    res = c.resources
    n_gpu = res.gpu if res.gpu is not None else int(res.sliced)
    whole = n_gpu > 0 and not res.sliced
    spec = c.workload or pod_workload
    if n_gpu and spec is None:
        raise doc.error((*at, "workload"), "missing required key (a GPU container needs a workload pattern)")
    workload = spec.resolved() if spec is not None else Workload("idle-reservation", (("memory", 0.0),))
    if n_gpu > len(gpus):
        raise doc.error((*at, "resources", RES_GPU), f"asks for {n_gpu} GPUs, node {node} has {len(gpus)}")

    def mem_for(g: Gpu) -> int:
        if whole:
            return g.memory_mib
        if res.gpumem is not None:
            return res.gpumem
        if res.gpumem_percentage is not None:
            return g.memory_mib * res.gpumem_percentage // 100
        return g.memory_mib  # cores only: HAMi's default is the device's whole memory

    cores = 100 if whole else res.gpucores or 0
    if c.devices is not None:
        devices = c.devices
        if len(devices) != n_gpu or len(set(devices)) != len(devices):
            raise doc.error((*at, "devices"), f"needs {n_gpu} distinct GPU indices, got {devices}")
        for d in devices:
            if d >= len(gpus):
                raise doc.error((*at, "devices"), f"GPU index {d!r} is not on node {node} (0..{len(gpus) - 1})")
        for d in devices:
            g = gpus[d]
            if g.dra is not None:
                raise doc.error((*at, "devices"), f"node {node} GPU {d} is published through DRA ({g.dra}): "
                                                  f"a container reaches it with dra:, not resources:")
            if mem_used[d] + mem_for(g) > g.memory_mib:
                raise doc.error(
                    (*at, "resources"),
                    f"slices on node {node} GPU {d} ({g.model}) ask for {mem_used[d] + mem_for(g)} MiB, "
                    f"the GPU has {g.memory_mib} MiB")
            if whole_taken[d] or (whole and mem_used[d]):
                raise doc.error((*at, "devices"), f"node {node} GPU {d} is already taken by a whole-GPU pod or shared")
    else:
        devices = []
        for d, g in enumerate(gpus):
            if len(devices) == n_gpu:
                break
            if whole_taken[d] or (whole and mem_used[d]) or g.dra is not None:
                continue
            if mem_used[d] + mem_for(g) <= g.memory_mib and cores_used[d] + cores <= 100:
                devices.append(d)
        if len(devices) < n_gpu:
            raise doc.error(
                (*at, "resources"),
                f"no room on node {node}: slices would ask for more memory than a GPU has "
                f"({n_gpu} GPU(s) x {mem_for(gpus[0])} MiB requested, free MiB per GPU: "
                f"{[g.memory_mib - mem_used[i] for i, g in enumerate(gpus)]})")
    for d in devices:
        mem_used[d] += mem_for(gpus[d])
        cores_used[d] += cores
        whole_taken[d] = whole_taken[d] or whole
    requests = res.model_dump(by_alias=True, exclude_none=True)
    if n_gpu and RES_GPU not in requests:
        requests[RES_GPU] = n_gpu
    processes = c.processes if c.processes is not None else max(1, n_gpu)
    return Container(
        name=c.name, devices=tuple(devices), mem_mib=tuple(mem_for(gpus[d]) for d in devices), cores=cores, whole_gpu=whole,
        workload=workload, processes=processes if n_gpu else 0, hami_underreport=c.hami_underreport,
        writer_killed=c.hami_writer_killed, requests=requests, key=stable_hash("container", node, ns, pod, c.name),
        sched_key=stable_hash("pod", node, ns, pod),
    )


# ---------------------------------------------------------------- the living fleet
# Pods that come and go (docs/simulator.md, "A living fleet"): notebook sessions opened and
# closed, a deployment's extra replicas scaled with its diurnal load, nodes of a tenant that
# onboards part-way through the history. Batch jobs (the batch-jobs pattern) already come and go.

def _gpu_patterns(pod: Pod) -> set[str]:
    return {c.workload.pattern for c in pod.containers if c.has_gpu}


def _living_pods(doc: YamlLines, raw: PodSpec, at: Loc, pod: Pod, cluster: str, load_replica) -> list[Pod]:
    """The pod as given, or as a living one: `lifecycle: sessions` (a notebook that exists
    only while its user has it open, or a slice reserved on a working day and left idle for
    hours) or `replicas: N` (replica 0 always up, replica k up
    while the service's load is at least k/N of its peak; each replica is its own slice)."""
    if raw.lifecycle is not None:
        if _gpu_patterns(pod) not in ({"bursty-notebook"}, {"idle-reservation"}):
            raise doc.error((*at, "lifecycle"), "sessions follow a notebook's schedule or an idle reservation's "
                                                "working-day habit: the pod's GPU containers need the "
                                                "bursty-notebook or the idle-reservation pattern")
        return [replace(pod, batch=True, lifecycle="sessions")]
    if raw.replicas is None:
        return [pod]
    n = raw.replicas
    if _gpu_patterns(pod) != {"diurnal-inference"}:
        raise doc.error((*at, "replicas"), "replicas scale with a diurnal load: the pod's GPU containers need "
                                           "the diurnal-inference pattern")
    out = [pod]
    for k in range(1, n):
        name = f"{pod.name}-r{k}"
        out.append(Pod(name, pod.namespace, stable_uuid("pod", cluster, pod.namespace, name),
                       load_replica(name), True, pod.init_containers, lifecycle="replica", replica=(k, n)))
    return out


def _joins_ms(joins: dt.datetime | int | None) -> int | None:
    """A node's first instant; `days_before_now` counts back from today's UTC midnight on
    slicemeter's clock, so a demo run on any day shows the onboarding inside its history."""
    if joins is None:
        return None
    if isinstance(joins, int):
        from slicemeter import clock

        today = clock.now().replace(hour=0, minute=0, second=0, microsecond=0)
        return int((today - dt.timedelta(days=joins)).timestamp() * 1000)
    return int(joins.timestamp() * 1000)
