"""HAMi's dynamic MIG allocations: the `hami.io/vgpu-mig-allocations` pod annotation (pure).

HAMi's scheduler reserves one MIG device per entry (a profile at a placement on a GPU) and
its device plugin fills in the device's runtime identity once it made it: a JSON array of
`{containerIndex, deviceIndex, gpuUUID, profile, placement: {start, size}, migUUID?,
gpuInstanceID?, computeInstanceID?}` (HAMi 0ce9ff83 pkg/device/nvidia/mig_allocations.go,
docs/upstream.md). Refused as HAMi's DecodeMigAllocations refuses it: an incomplete entry
(negative index, no GPU or profile, placement size 0), a partial runtime identity (some of
migUUID, gpuInstanceID, computeInstanceID but not all) and a repeated (container, device).
Stricter here, because the values reach the Tick: the UUIDs must be NVIDIA's.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from slicemeter.common import GPU_UUID_RE

MIG_ALLOCATIONS_ANNOTATION = "hami.io/vgpu-mig-allocations"
_MAX_CHARS = 64 * 1024
_UINT32 = (1 << 32) - 1
# NVIDIA's profile names: `<g>g.<memory>gb`, a compute-instance profile `<c>c.<g>g.<memory>gb`,
# with options such as `+me`; <g> is the GPU instance's compute slices
_PROFILE = re.compile(r"(?:(\d{1,2})c\.)?(\d{1,2})g\.(\d{1,4})gb(?:\+[a-z.]+)*\Z")


class MigAllocationError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class MigAllocation:
    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement_start: int
    placement_size: int
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    @property
    def compute_slices(self) -> int:
        """The GPU instance's compute slices, from the profile (`3g.40gb` -> 3)."""
        return int(_PROFILE.match(self.profile).group(2))


def _uint(entry: dict, key: str, i: int, required: bool = True) -> int | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if value is None:
        value = 0   # Go's zero value where the field is absent
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _UINT32:
        raise MigAllocationError(f"MIG allocation {i}: {key} {str(value)[:20]!r} is not an unsigned integer")
    return value


def parse_mig_allocations(value: str) -> list[MigAllocation]:
    """The annotation's entries; MigAllocationError naming the first bad one."""
    if len(value) > _MAX_CHARS:
        raise MigAllocationError(f"{MIG_ALLOCATIONS_ANNOTATION} is {len(value)} characters long")
    if value == "":
        return []
    try:
        doc = json.loads(value)
    except ValueError as exc:
        raise MigAllocationError(f"{MIG_ALLOCATIONS_ANNOTATION} is not JSON: {exc}") from None
    if not isinstance(doc, list):
        raise MigAllocationError(f"{MIG_ALLOCATIONS_ANNOTATION} is not a JSON array")
    out: list[MigAllocation] = []
    seen: set[tuple[int, int]] = set()
    for i, e in enumerate(doc):
        if not isinstance(e, dict):
            raise MigAllocationError(f"MIG allocation {i} is not an object")
        ci, di = e.get("containerIndex", 0), e.get("deviceIndex", 0)
        placement = e.get("placement") or {}
        if not isinstance(placement, dict):
            raise MigAllocationError(f"MIG allocation {i}: placement is not an object")
        if (isinstance(ci, int) and ci < 0) or (isinstance(di, int) and di < 0) or not e.get("gpuUUID") \
                or not e.get("profile") or not placement.get("size"):
            raise MigAllocationError(f"MIG allocation {i} is incomplete")
        ci, di = _uint(e, "containerIndex", i), _uint(e, "deviceIndex", i)
        gpu, profile = e["gpuUUID"], e["profile"]
        if not isinstance(gpu, str) or not GPU_UUID_RE.match(gpu) or not gpu.startswith("GPU-"):
            raise MigAllocationError(f"MIG allocation {i}: gpuUUID {str(gpu)[:60]!r} is not a GPU UUID")
        if not isinstance(profile, str) or not _PROFILE.match(profile):
            raise MigAllocationError(f"MIG allocation {i}: profile {str(profile)[:40]!r} is not a MIG profile")
        mig = e.get("migUUID") or None
        gi, cinst = _uint(e, "gpuInstanceID", i, False), _uint(e, "computeInstanceID", i, False)
        if sum(v is not None for v in (mig, gi, cinst)) not in (0, 3):
            raise MigAllocationError(f"MIG allocation {i} has partial runtime identity")
        if mig is not None and (not isinstance(mig, str) or not GPU_UUID_RE.match(mig) or not mig.startswith("MIG-")):
            raise MigAllocationError(f"MIG allocation {i}: migUUID {str(mig)[:60]!r} is not a MIG UUID")
        if (ci, di) in seen:
            raise MigAllocationError(f"duplicate MIG allocation for container {ci} device {di}")
        seen.add((ci, di))
        out.append(MigAllocation(ci, di, gpu, profile, _uint(placement, "start", i), _uint(placement, "size", i),
                                 mig, gi, cinst))
    return out


def by_container(allocations: list[MigAllocation], init_containers: list[str],
                 containers: list[str]) -> dict[str, list[MigAllocation]]:
    """Entries per container name: containerIndex counts init containers first, then the
    containers (HAMi's PodSingleDevice order, as `hami.io/vgpu-devices-allocated` from v2.9.0)."""
    order = init_containers + containers
    out: dict[str, list[MigAllocation]] = {}
    for a in allocations:
        if a.container_index >= len(order):
            raise MigAllocationError(f"MIG allocation for container {a.container_index}: the pod has {len(order)}")
        out.setdefault(order[a.container_index], []).append(a)
    return out
