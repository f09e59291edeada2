"""Device health as Kubernetes reports it, for devices of any vendor (pure, no I/O).

The kubelet writes each container's devices' health into the pod status (KEP-4680, core/v1
`ContainerStatus.allocatedResourcesStatus`): per resource (`ResourceStatus.name`: a device
plugin's resource such as `nvidia.com/gpu` or `huawei.com/Ascend910`, or `claim:<claim>` /
`claim:<claim>/<request>` for DRA) a list of `{resourceID, health}`, health `Healthy`,
`Unhealthy` or `Unknown`. A device plugin's resourceID is its device ID (NVIDIA's: the GPU
or MIG UUID); a DRA device's is `<driver>/<pool>/<device>`. A DRA driver may also write a
`Healthy` condition on the ResourceClaim's `status.devices[]` (exporter/sources/dra.py).

On the Tick a GPU row's `device_health` is the worst report of the device (docs/health.md):
Unhealthy over Unknown over Healthy; null where nobody reported.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from slicemeter.common import GPU_UUID

# Tick 1.3 `device_health` codes (docs/wire-format.md)
HEALTHY, UNHEALTHY, UNKNOWN = 0, 1, 2
CODES = {"Healthy": HEALTHY, "Unhealthy": UNHEALTHY, "Unknown": UNKNOWN}
NAMES = {code: name for name, code in CODES.items()}
_RANK = {HEALTHY: 0, UNKNOWN: 1, UNHEALTHY: 2}   # which report wins where several name a device

# a pod's status is bounded by the API server; these bound what one malformed one can cost
MAX_RESOURCES = 64
MAX_IDS = 256
_MAX_TEXT = 1024
_DEVICE_PLUGIN_GPU = re.compile(GPU_UUID)   # NVIDIA's IDs: the UUID, `<UUID>::<replica>` when time-sliced


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """One `ResourceHealth` of one container's `ResourceStatus`."""
    resource: str        # ResourceStatus.name
    resource_id: str     # ResourceHealth.resourceID
    health: int          # HEALTHY | UNHEALTHY | UNKNOWN

    @property
    def dra_device(self) -> tuple[str, str, str] | None:
        """(driver, pool, device) of a DRA resource (a pool may hold slashes, the driver and
        the device none)."""
        if not self.resource.startswith("claim:"):
            return None
        driver, _, rest = self.resource_id.partition("/")
        pool, _, device = rest.rpartition("/")
        return (driver, pool, device) if driver and pool and device else None


def worst(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if _RANK[a] >= _RANK[b] else b


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_TEXT:
        raise ValueError(f"{what} {str(value)[:60]!r} is not a name")
    value.encode("utf-8")
    return value


def parse_resources_status(container_statuses: Any) -> tuple[list[DeviceReport], list[str]]:
    """`status.containerStatuses[]` (and init containers') -> their devices' health reports;
    an entry that is not what the kubelet writes costs that entry and is named in the errors.
    A health other than the three (an empty one: the field is `omitempty`) is Unknown."""
    reports: list[DeviceReport] = []
    errors: list[str] = []
    for cs in container_statuses or []:
        if not isinstance(cs, dict):
            continue
        statuses = cs.get("allocatedResourcesStatus")
        if statuses is None:
            continue
        if not isinstance(statuses, list) or len(statuses) > MAX_RESOURCES:
            errors.append(f"container {str(cs.get('name'))[:60]!r}: allocatedResourcesStatus is not a list of "
                          f"at most {MAX_RESOURCES} resources")
            continue
        for rs in statuses:
            try:
                name = _text(rs["name"], "resource")
                ids = rs.get("resources") or []
                if not isinstance(ids, list) or len(ids) > MAX_IDS:
                    raise ValueError(f"resource {name!r}: resources is not a list of at most {MAX_IDS}")
                for rh in ids:
                    health = rh.get("health")
                    reports.append(DeviceReport(name, _text(rh["resourceID"], "resourceID"),
                                                CODES.get(health, UNKNOWN) if isinstance(health, str) else UNKNOWN))
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                errors.append(f"container {str(cs.get('name'))[:60]!r}: {exc}")
    return reports, errors


def health_by_gpu(reports: Iterable[DeviceReport], gpus: set[str], mig_parent: dict[str, str],
                  dra_gpu: dict[tuple[str, str, str], str]) -> dict[str, int]:
    """GPU row uuid -> the worst report of its device. A device plugin's ID names a GPU by its
    UUID (a MIG device's: its parent's row), a DRA resourceID the device the claim's result
    names (`dra_gpu`: (driver, pool, device) -> its row); an ID naming no row is left out."""
    out: dict[str, int] = {}
    for r in reports:
        dra = r.dra_device
        if dra is not None:
            gpu = dra_gpu.get(dra)
        else:
            m = _DEVICE_PLUGIN_GPU.match(r.resource_id)
            gpu = mig_parent.get(m.group(0), m.group(0)) if m else None
        if gpu is not None and gpu in gpus:
            out[gpu] = worst(out.get(gpu), r.health)
    return out
