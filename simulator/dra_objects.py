"""The DRA objects of a simulated node, as the API server returns them (`resource.k8s.io/v1`).

A container whose device is granted through a ResourceClaim (scenario `dra:`) is consumed
through one claim: its pod's own (generated from a template, `<pod>-<container>-<5 chars>`,
or the scheduler's for `nvidia.com/gpu` served by DRA, `<pod>-extended-resources-<5 chars>`),
or a named claim several pods share (a time-sliced whole GPU). The node's DRA devices are
published in one ResourceSlice per driver. Field names, attribute and capacity names and
quantity strings (`80Gi`, `30`) are those of the upstream drivers that tests/data/dra/ mirrors.
Identities (claim names and UIDs, share IDs) depend on names only, like the rest of the fleet.
"""
from __future__ import annotations

from dataclasses import dataclass

from slicemeter.common import MiB
from slicemeter.simulator.scenario import Container, DraGrant, Gpu, Node, stable_hash, stable_uuid

API_VERSION = "resource.k8s.io/v1"
# DeviceClass a claim of each kind names (HAMi's demo and HAMi-DRA's Ascend webhook)
DEVICE_CLASS = {"hami-core": "hami-core-gpu.project-hami.io", "nvidia": "gpu.nvidia.com",
                "nvidia-shares": "gpu.nvidia.com", "ascend": "hami-vnpu-core.project-hami.io"}
EXTENDED_RESOURCE = "nvidia.com/gpu"
# Kubernetes' random-suffix alphabet (no vowels, no look-alikes)
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# (architecture, CUDA compute capability) per model, as NVIDIA's and HAMi's drivers publish them
_ARCH = {"NVIDIA A100-SXM4-80GB": ("Ampere", "8.0.0"), "NVIDIA H100 80GB HBM3": ("Hopper", "9.0.0"),
         "NVIDIA L4": ("Ada Lovelace", "8.9.0"), "Tesla T4": ("Turing", "7.5.0")}
DRIVER_VERSION = "550.90.7"          # the fake NVML's 550.90.07, as a semantic version
CUDA_DRIVER_VERSION = "12.4.0"


@dataclass(frozen=True)
class ClaimRef:
    """How one container of one pod (instance) reaches its device."""
    ref: str                 # the pod's spec.resourceClaims[].name (and the container's claims[].name)
    claim: str               # the ResourceClaim's name
    uid: str
    request: str             # the request whose result the container consumes
    generated: bool          # from a template or the extended-resource mapping (owned by the pod)


def quantity(n_bytes: int) -> str:
    """Bytes as the API server canonicalises a binary quantity: the largest exact suffix."""
    for suffix, shift in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if n_bytes and n_bytes % (1 << shift) == 0:
            return f"{n_bytes >> shift}{suffix}"
    return str(n_bytes)


def _suffix(*parts: object) -> str:
    h = stable_hash("claim-suffix", *parts)
    return "".join(_SUFFIX_ALPHABET[(h >> (5 * i)) % len(_SUFFIX_ALPHABET)] for i in range(5))


def request_name(grant: DraGrant, container_index: int) -> str:
    if grant.extended:
        return f"container-{container_index}-request-0"
    return "npu" if grant.kind == "ascend" else "gpu"


def claim_ref(cluster: str, namespace: str, pod_name: str, pod_uid: str, c: Container, container_index: int) -> ClaimRef:
    """The claim a DRA container consumes in this pod instance (each batch run or session is
    its own pod, so its generated claims are its own)."""
    g = c.dra
    if g.claim is not None:
        name, generated = g.claim, False
    elif g.extended:
        name, generated = f"{pod_name}-extended-resources-{_suffix(pod_uid)}", True
    else:
        name, generated = f"{pod_name}-{c.name}-{_suffix(pod_uid, c.name)}", True
    return ClaimRef(c.name, name, stable_uuid("claim", cluster, namespace, name), request_name(g, container_index),
                    generated)


def device_name(gpu: Gpu, node: Node) -> str:
    """The device's name in its ResourceSlice (HAMi: hami-gpu-<minor>; NVIDIA: gpu-<index>;
    Ascend: npu-<physical id>-<vNPU>)."""
    if gpu.dra == "hami-core":
        return f"hami-gpu-{gpu.index}"
    if gpu.dra == "ascend":
        return f"npu-{gpu.index - sum(g.nvml for g in node.gpus)}-0"
    return f"gpu-{gpu.index}"


def _request_policy(total: str, minimum: str, step: str) -> dict:
    return {"default": total, "validRange": {"min": minimum, "max": total, "step": step}}


def _device(gpu: Gpu, node: Node) -> dict:
    memory = quantity(gpu.memory_bytes)
    if gpu.dra == "ascend":
        k = gpu.index - sum(g.nvml for g in node.gpus)
        return {
            "name": device_name(gpu, node),
            "attributes": {"index": {"int": k}, "physicalID": {"int": k}, "uuid": {"string": gpu.uuid},
                           "model": {"string": gpu.model}, "productName": {"string": gpu.model},
                           "brand": {"string": "Huawei"}, "type": {"string": "HAMivNPUCore"}},
            "capacity": {"memory": {"value": memory, "requestPolicy": _request_policy(memory, "1Mi", "1Mi")},
                         "cores": {"value": "100", "requestPolicy": _request_policy("100", "0", "1")}},
            "allowMultipleAllocations": True,
        }
    arch, cc = _ARCH[gpu.model]
    attributes = {"type": {"string": "hami-gpu" if gpu.dra == "hami-core" else "gpu"}, "uuid": {"string": gpu.uuid}}
    if gpu.dra == "hami-core":
        attributes["minor"] = {"int": gpu.index}
    attributes.update({
        "productName": {"string": gpu.model}, "brand": {"string": "Nvidia"}, "architecture": {"string": arch},
        "cudaComputeCapability": {"version": cc}, "driverVersion": {"version": DRIVER_VERSION},
        "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
        "pcieBusID": {"string": f"0000:{0x10 + gpu.index:02x}:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
    })
    device = {"name": device_name(gpu, node), "attributes": attributes}
    if gpu.dra == "nvidia":
        device["capacity"] = {"memory": {"value": memory}}
        return device
    device["capacity"] = {"memory": {"value": memory, "requestPolicy": _request_policy(memory, "1Mi", "1Mi")}}
    if gpu.dra == "hami-core":
        device["capacity"] = {"cores": {"value": "100", "requestPolicy": _request_policy("100", "0", "1")},
                              **device["capacity"]}
    device["allowMultipleAllocations"] = True
    return device


def resource_slices(node: Node, created: str) -> dict:
    """The node's ResourceSliceList: one slice per driver, its devices in one pool named after
    the node (what each driver's kubelet plugin publishes)."""
    by_driver: dict[str, list[Gpu]] = {}
    for g in node.gpus:
        if g.dra is not None:
            by_driver.setdefault(g.driver, []).append(g)
    items = []
    for driver, gpus in by_driver.items():
        name = f"{node.name}-{driver}-{_suffix(node.name, driver)}"
        items.append({
            "apiVersion": API_VERSION, "kind": "ResourceSlice",
            "metadata": {"name": name, "uid": stable_uuid("resourceslice", node.cluster, name), "creationTimestamp": created},
            "spec": {"driver": driver, "nodeName": node.name,
                     "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [_device(g, node) for g in gpus]},
        })
    return {"apiVersion": API_VERSION, "kind": "ResourceSliceList", "metadata": {"resourceVersion": "1"}, "items": items}


@dataclass(frozen=True)
class ClaimUse:
    """A live container consuming a claim (the node's input to resource_claims)."""
    namespace: str
    pod_name: str
    pod_uid: str
    container: Container
    ref: ClaimRef


def _consumed(grant: DraGrant) -> dict[str, str]:
    consumed = {}
    if grant.cores is not None:
        consumed["cores"] = str(grant.cores)
    if grant.memory_mib is not None:
        consumed["memory"] = quantity(grant.memory_mib * MiB)
    return consumed


_TIME_SLICING = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                 "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}


def resource_claims(node: Node, uses: list[ClaimUse], created: str) -> dict:
    """The ResourceClaimList of the claims allocated on the node, each reserved for the live
    pods consuming it."""
    claims: dict[tuple[str, str], list[ClaimUse]] = {}
    for u in uses:
        claims.setdefault((u.namespace, u.ref.claim), []).append(u)
    items = []
    for (namespace, name), users in claims.items():
        first = users[0]
        grant, ref = first.container.dra, first.ref
        gpu = node.gpus[first.container.devices[0]]
        metadata = {"name": name, "namespace": namespace, "uid": ref.uid, "creationTimestamp": created}
        if ref.generated:
            metadata["annotations"] = ({"resource.kubernetes.io/extended-resource-claim": "true"} if grant.extended
                                       else {"resource.kubernetes.io/pod-claim-name": ref.ref})
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": first.pod_name,
                                            "uid": first.pod_uid, "controller": True, "blockOwnerDeletion": True}]
        exactly = {"deviceClassName": DEVICE_CLASS[grant.kind], "allocationMode": "ExactCount", "count": 1}
        consumed = _consumed(grant)
        if consumed:
            exactly["capacity"] = {"requests": dict(consumed)}
        spec = {"devices": {"requests": [{"name": ref.request, "exactly": exactly}]}}
        result = {"request": ref.request, "driver": gpu.driver, "pool": node.name, "device": device_name(gpu, node)}
        if gpu.dra != "nvidia":           # a device allocated several times: each allocation has a share ID
            result["shareID"] = stable_uuid("share", ref.uid, ref.request)
            result["consumedCapacity"] = consumed
        devices = {"results": [result]}
        if grant.claim is not None:       # several pods on one whole GPU: NVIDIA's time-slicing
            spec["devices"]["config"] = [{"requests": [ref.request], "opaque": {"driver": gpu.driver,
                                                                                  "parameters": _TIME_SLICING}}]
            devices["config"] = [{**spec["devices"]["config"][0], "source": "FromClaim"}]
        pods = list({u.pod_uid: {"resource": "pods", "name": u.pod_name, "uid": u.pod_uid} for u in users}.values())
        items.append({
            "apiVersion": API_VERSION, "kind": "ResourceClaim", "metadata": metadata, "spec": spec,
            "status": {"allocation": {
                "devices": devices,
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node.name]}]}]},
                "allocationTimestamp": created}, "reservedFor": pods},
        })
    return {"apiVersion": API_VERSION, "kind": "ResourceClaimList", "metadata": {"resourceVersion": "1"}, "items": items}


def pod_fields(refs: list[tuple[int, Container, ClaimRef]], pod_spec_name: str) -> tuple[dict, dict]:
    """(spec, status) fields of a pod whose containers consume claims: spec.resourceClaims,
    status.resourceClaimStatuses for generated claims, extendedResourceClaimStatus."""
    spec, status = {}, {}
    claims, statuses, mappings = [], [], []
    for i, c, ref in refs:
        if c.dra.extended:
            mappings.append({"containerName": c.name, "resourceName": EXTENDED_RESOURCE, "requestName": ref.request})
            status["extendedResourceClaimStatus"] = {"requestMappings": mappings, "resourceClaimName": ref.claim}
        elif ref.generated:
            claims.append({"name": ref.ref, "resourceClaimTemplateName": f"{pod_spec_name}-{c.name}"})
            statuses.append({"name": ref.ref, "resourceClaimName": ref.claim})
        else:
            claims.append({"name": ref.ref, "resourceClaimName": ref.claim})
    if claims:
        spec["resourceClaims"] = claims
    if statuses:
        status["resourceClaimStatuses"] = statuses
    return spec, status


def container_resources(c: Container) -> dict:
    """A DRA container's `resources`: its claim, or the extended resource DRA serves."""
    if c.dra.extended:
        return {"limits": {EXTENDED_RESOURCE: "1"}, "requests": {EXTENDED_RESOURCE: "1"}}
    return {"claims": [{"name": c.name}]}
