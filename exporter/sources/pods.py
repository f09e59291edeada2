"""Pods on this node and who owns a GPU process.

- Pod list from the kubelet's `/pods` (HTTPS, service-account token), a URL (tests) or a
  file, refreshed on its own timer by `PodCache`, so a slow kubelet never delays a Tick.
- `parse_vgpu_allocated`: HAMi's `hami.io/vgpu-devices-allocated` annotation (pure), and
  `assign_grants`: its entries onto the pod's containers, for either HAMi encoding.
- `pod_from_cgroup`: NVML pid -> `/proc/<pid>/cgroup` -> pod UID and container ID (pure),
  for whole-GPU pods that run without HAMi.
- `cluster_from_kubeconfig`: the tenant cluster identity = the kubelet kubeconfig's server.
"""
from __future__ import annotations

import json
import logging
import os
import re
import ssl
import threading
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

from slicemeter.common import GPU_UUID, HAMI_ALLOCATED_ANNOTATION, ConfigError, parse_yaml
from slicemeter.exporter.sources.device_health import DeviceReport, parse_resources_status
from slicemeter.exporter.sources.dra import Pod as DraPod, parse_pods
from slicemeter.exporter.sources.hami_mig import (MIG_ALLOCATIONS_ANNOTATION, MigAllocation, MigAllocationError,
                                                  by_container, parse_mig_allocations)

log = logging.getLogger(__name__)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class AnnotationError(ValueError):
    pass


class PodListError(ValueError):
    """A body that parsed but is not a PodList (`{}`, `{"items": null}`, a `Status`)."""


@dataclass(frozen=True, slots=True)
class Grant:
    uuid: str
    type: str
    mem_mib: int
    cores: int    # percent of the GPU's SMs; 0 = no limit given
    # HAMi up to v2.9.0 in MIG mode appends `[template-slot]` to the GPU's UUID
    mig_template: tuple[int, int] | None = None


# GPU or MIG UUID, then HAMi's legacy MIG suffix `[<template index>-<slot index>]`
_GRANT_UUID_RE = re.compile(rf"(?P<uuid>{GPU_UUID})(\[(?P<tmpl>\d{{1,4}})-(?P<slot>\d{{1,4}})\])?")


def parse_vgpu_allocated(value: str) -> list[list[Grant]]:
    """`<uuid>,<type>,<memMiB>,<cores>:` per device, `;` after each container's entry.

    One entry per container in the order HAMi indexed them (`assign_grants`); an empty
    entry keeps a container that holds no GPU. Raises AnnotationError naming the bad part.
    """
    if len(value) > 64 * 1024:
        raise AnnotationError(f"{HAMI_ALLOCATED_ANNOTATION} is {len(value)} characters long")
    containers: list[list[Grant]] = []
    parts = value.split(";")
    if parts and parts[-1] == "":
        parts.pop()   # trailing separator
    for ci, part in enumerate(parts):
        grants: list[Grant] = []
        for dev in part.split(":"):
            if not dev.strip():
                continue
            fields = dev.split(",")
            if len(fields) != 4:
                raise AnnotationError(f"container {ci}: device entry {dev[:60]!r} does not have 4 fields")
            uuid, typ, mem, cores = (f.strip() for f in fields)
            um = _GRANT_UUID_RE.fullmatch(uuid)
            if not um:
                raise AnnotationError(f"container {ci}: {uuid[:60]!r} is not a GPU UUID")
            if not (mem.isdigit() and cores.isdigit()):
                raise AnnotationError(f"container {ci}: memory {mem[:20]!r} / cores {cores[:20]!r} are not integers")
            if int(cores) > 100 or int(mem) > 16 * 1024 * 1024:
                raise AnnotationError(f"container {ci}: cores {cores} or memory {mem} MiB out of range")
            tmpl = (int(um.group("tmpl")), int(um.group("slot"))) if um.group("tmpl") else None
            grants.append(Grant(um.group("uuid"), typ, int(mem), int(cores), tmpl))
        containers.append(grants)
    return containers


def assign_grants(entries: list[list[Grant]], init_containers: list[str], containers: list[str]) -> dict[str, list[Grant]]:
    """Annotation entries -> grants per container name.

    HAMi from v2.9.0 indexes the entries over the init containers first, then the
    containers (pkg/device Resourcereqs), one entry each; up to v2.8.3 over the containers
    only. With init containers the entry count tells the two apart.
    """
    k, c, n = len(init_containers), len(containers), len(entries)
    if k and n == k + c:
        order = init_containers + containers
    elif n <= c:
        order = containers
    else:
        raise AnnotationError(f"{HAMI_ALLOCATED_ANNOTATION} has {n} entries for {k} init containers and {c} containers")
    return {name: grants for name, grants in zip(order, entries) if grants}


@dataclass(slots=True)
class PodInfo:
    uid: str
    name: str
    namespace: str
    phase: str | None
    containers: list[str]
    grants: dict[str, list[Grant]] = field(default_factory=dict)   # container (or init container) -> HAMi grants
    init_containers: list[str] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)   # init containers that ran to completion: no slice
    whole_gpus: dict[str, int] = field(default_factory=dict)    # container -> nvidia.com/gpu with no gpumem/gpucores
    container_ids: dict[str, str] = field(default_factory=dict)   # runtime container id -> name
    annotation_error: str | None = None
    # the kubelet's health of the containers' devices (allocatedResourcesStatus: exporter/sources/device_health.py)
    device_health: list[DeviceReport] = field(default_factory=list)
    # HAMi's dynamic MIG reservations per container (exporter/sources/hami_mig.py)
    mig_allocations: dict[str, list[MigAllocation]] = field(default_factory=dict)

    @property
    def hami(self) -> bool:
        return bool(self.grants)


@dataclass(slots=True)
class PodIndex:
    pods: dict[str, PodInfo] = field(default_factory=dict)
    errors: int = 0
    fetched: bool = False     # False: never got a list (attribution is unknown, not empty)
    dra_pods: tuple[DraPod, ...] = ()   # the live pods' claims, when DRA is read (docs/dra.md)


_ACTIVE = {None, "Pending", "Running", "Unknown"}


def _limits(c: dict) -> dict:
    res = c.get("resources") or {}
    return (res.get("limits") or {}) | (res.get("requests") or {})


def _text(value: Any) -> str:
    """A name that goes into the Tick: it must encode as UTF-8 (JSON allows lone surrogates
    like "\\ud800", which would make the whole Tick unencodable: it costs this pod instead)."""
    s = str(value)
    s.encode("utf-8")   # UnicodeEncodeError is a ValueError: the pod is skipped and counted
    return s


def _terminated(statuses: Any) -> set[str]:
    return {str(cs.get("name")) for cs in statuses or [] if isinstance(cs, dict) and "terminated" in (cs.get("state") or {})}


def index_pods(pod_list: dict) -> PodIndex:
    """PodList JSON (kubelet /pods) -> index by UID; a bad pod costs that pod only.

    Raises PodListError for a body that is not a PodList, so that the caller keeps its last
    good list: an empty index would make every slice of the node vanish.
    """
    if not isinstance(pod_list, dict):
        raise PodListError(f"pod list is a JSON {type(pod_list).__name__}, not an object")
    kind = pod_list.get("kind")
    if kind not in (None, "PodList"):
        raise PodListError(f"pod list has kind {str(kind)[:40]!r}: {str(pod_list.get('message', ''))[:200]}")
    items = pod_list.get("items")
    if not isinstance(items, list):
        raise PodListError(f"pod list has no items list (items: {type(items).__name__})")
    idx = PodIndex(fetched=True)
    for item in items:
        try:
            meta, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
            phase = status.get("phase")
            if phase not in _ACTIVE or meta.get("deletionTimestamp") and phase not in ("Running",):
                continue   # finished pods hold no GPU
            names = [_text(c["name"]) for c in spec.get("containers") or []]
            init_names = [_text(c["name"]) for c in spec.get("initContainers") or []]
            info = PodInfo(uid=_text(meta["uid"]), name=_text(meta["name"]), namespace=_text(meta.get("namespace", "default")),
                           phase=phase, containers=names, init_containers=init_names,
                           finished=_terminated(status.get("initContainerStatuses")))
            annotations = meta.get("annotations") or {}
            info.grants = _annotation(idx, info, annotations.get(HAMI_ALLOCATED_ANNOTATION),
                                      lambda v: assign_grants(parse_vgpu_allocated(v), init_names, names))
            info.mig_allocations = _annotation(idx, info, annotations.get(MIG_ALLOCATIONS_ANNOTATION),
                                               lambda v: by_container(parse_mig_allocations(v), init_names, names))
            for c in spec.get("containers") or []:
                lim = _limits(c)
                n = lim.get("nvidia.com/gpu")
                if n and not any(k in lim for k in ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")):
                    info.whole_gpus[c["name"]] = int(str(n))   # whole GPUs (with or without HAMi in the path)
            statuses = (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
            for cs in statuses:
                cid = str(cs.get("containerID") or "")
                if "://" in cid:
                    info.container_ids[_text(cid.split("://", 1)[1])] = _text(cs.get("name"))
            info.device_health, health_errors = parse_resources_status(statuses)
            idx.errors += len(health_errors)
            for err in health_errors:
                log.warning("pod %s/%s, device health: %s", info.namespace, info.name, err)
            idx.pods[info.uid] = info
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            idx.errors += 1
            log.warning("skipping a malformed pod in the pod list: %s", exc)
    return idx


def _annotation(idx: PodIndex, info: PodInfo, value: str | None, parse: Callable[[str], Any]) -> Any:
    """A HAMi annotation's grants by container ({} without it); one that does not parse costs
    the pod its grants, counted and logged (AnnotationError, MigAllocationError: ValueErrors)."""
    if not value:
        return {}
    try:
        return parse(value)
    except (AnnotationError, MigAllocationError) as exc:
        info.annotation_error = str(exc)
        idx.errors += 1
        log.warning("pod %s/%s: %s", info.namespace, info.name, exc)
        return {}


# ------------------------------------------------------------------ cgroup -> pod

_POD_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CID_RE = re.compile(r"^(?:cri-containerd-|crio-|docker-|containerd-)?([0-9a-f]{64})(?:\.scope)?$")


def pod_from_cgroup(text: str) -> tuple[str, str | None] | None:
    """The pod UID (and container ID) a process belongs to, from its /proc/<pid>/cgroup.

    Handles cgroup v1 (`N:controller:/path`) and v2 (`0::/path`); cgroupfs paths
    (`/kubepods/burstable/pod<uid>/<id>`) and systemd slices
    (`kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`,
    `crio-<id>.scope`, `docker-<id>.scope`).
    """
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = _POD_RE.search(path)
        if not m or "kubepods" not in path:
            continue
        uid = m.group(1).replace("_", "-")
        cid = None
        last = path.rstrip("/").rsplit("/", 1)[-1]
        cm = _CID_RE.match(last)
        if cm:
            cid = cm.group(1)
        return uid, cid
    return None


def pid_to_pod(pid: int, proc_root: str = "/proc") -> tuple[str, str | None] | None:
    try:
        with open(os.path.join(proc_root, str(int(pid)), "cgroup"), encoding="utf-8", errors="replace") as f:
            return pod_from_cgroup(f.read(65536))
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------ cluster identity

def cluster_from_kubeconfig(text: str) -> str:
    """The API server URL the kubelet talks to: the tenant cluster identity (Kamaji's `address`)."""
    try:
        cfg = parse_yaml(text)
    except ConfigError as exc:
        raise ValueError(f"kubeconfig: {exc}") from None
    if not isinstance(cfg, dict):
        raise ValueError("kubeconfig is not a mapping")
    clusters = {c.get("name"): (c.get("cluster") or {}) for c in cfg.get("clusters") or [] if isinstance(c, dict)}
    contexts = {c.get("name"): (c.get("context") or {}) for c in cfg.get("contexts") or [] if isinstance(c, dict)}
    current = contexts.get(cfg.get("current-context"))
    cluster = clusters.get(current.get("cluster")) if current else None
    if cluster is None and len(clusters) == 1:
        cluster = next(iter(clusters.values()))
    server = (cluster or {}).get("server")
    if not server:
        raise ValueError("kubeconfig names no cluster server (current-context -> cluster -> server)")
    return str(server).rstrip("/")


# ------------------------------------------------------------------ sources (I/O edge)

PodListSource = Callable[[], dict]


def file_source(path: str) -> PodListSource:
    def fetch() -> dict:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return fetch


def tls_context(ca_path: str | None = None, insecure: bool = False) -> ssl.SSLContext:
    """Verify the server against `ca_path` (else the system's trust store); skip verification
    only when asked: kubelet serving certificates are often self-signed."""
    ctx = ssl.create_default_context(cafile=ca_path)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def url_source(url: str, token_path: str | None = None, ca_path: str | None = None, insecure: bool = False,
               timeout: float = 5.0) -> PodListSource:
    """GET a PodList; with a token file send its content as a bearer token. The file is
    read on every fetch: projected service-account tokens are rotated."""
    ctx = tls_context(ca_path, insecure) if url.startswith("https://") else None
    return lambda: get_json(url, token_path, ctx, timeout)


def get_json(url: str, token_path: str | None, ctx: ssl.SSLContext | None, timeout: float) -> Any:
    """GET a JSON body (at most 64 MiB); with a token file send its content as a bearer token."""
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token_path:
        with open(token_path, encoding="utf-8") as f:
            req.add_header("Authorization", f"Bearer {f.read().strip()}")
    with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
        return json.loads(resp.read(64 * 1024 * 1024))


def kubelet_url(node_ip: str = "127.0.0.1", port: int = 10250) -> str:
    return f"https://{node_ip}:{port}/pods"


class Refreshed:
    """A value `read()` returns, refreshed by `refresh()` or a background timer.

    A failed read keeps the last good value (and counts an error): a source's hiccup must not
    make every slice unattributed for a tick. `read()` returns (value, items it refused)."""

    what = "source"

    def __init__(self, refresh_s: float, empty: Any):
        self.refresh_s = refresh_s
        self._value = empty
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors_total = 0

    def read(self) -> tuple[Any, int]:
        raise NotImplementedError

    def refresh(self) -> bool:
        try:
            value, refused = self.read()
        except Exception as exc:   # network, JSON, file: all cost this refresh only
            with self._lock:
                self.errors_total += 1
            log.warning("%s refresh failed: %s", self.what, exc)
            return False
        with self._lock:
            self.errors_total += refused
            self._value = value
        return True

    def get(self) -> Any:
        with self._lock:
            return self._value

    def start(self) -> None:
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name=f"{self.what}-refresh", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            self.refresh()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)


class PodCache(Refreshed):
    """The latest pod index (`get()`). With `dra_pods` the same list is read for the live
    pods' ResourceClaims too (a pod the claims' reader refuses is counted)."""

    what = "pod list"

    def __init__(self, source: PodListSource, refresh_s: float = 10.0, dra_pods: bool = False):
        super().__init__(refresh_s, PodIndex())
        self.source = source
        self.dra_pods = dra_pods

    def read(self) -> tuple[PodIndex, int]:
        doc = self.source()
        idx = index_pods(doc)
        if self.dra_pods:
            parsed = parse_pods(doc)
            idx.dra_pods = tuple(p for p in parsed.items if p.uid in idx.pods)
            idx.errors += len(parsed.errors)
            for err in parsed.errors:
                log.warning("pod list, DRA claims: %s", err)
        return idx, idx.errors

    def get(self) -> PodIndex:
        return super().get()
