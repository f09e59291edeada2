"""Kubernetes' device health, pure: the pod status's allocatedResourcesStatus and a
ResourceClaim's device conditions, to the device's row.

Fixtures are written from kubernetes/api @ 10b39a3 (docs/upstream.md): core/v1 ContainerStatus
`allocatedResourcesStatus []ResourceStatus{name, resources []ResourceHealth{resourceID,
health}}`, ResourceID (a device plugin's device ID; `<driver>/<pool>/<device>` for DRA), and
resource/v1 AllocatedDeviceStatus `{driver, pool, device, conditions []metav1.Condition}`.
"""
from __future__ import annotations

from slicemeter.exporter.sources.device_health import (HEALTHY, UNHEALTHY, UNKNOWN, DeviceReport, health_by_gpu,
                                                       parse_resources_status, worst)
from slicemeter.exporter.sources.dra import parse_claims

GPU0 = "GPU-3f0c1a2b-4d5e-6f70-8192-a3b4c5d6e7f8"
GPU1 = "GPU-9e8d7c6b-5a49-3827-1605-f4e3d2c1b0a9"
MIG = "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
ASCEND = "ascend.project-hami.io"


def container_status(name: str, *resources: dict) -> dict:
    return {"name": name, "containerID": "containerd://" + "a" * 64, "ready": True,
            "allocatedResourcesStatus": list(resources)}


def test_every_report_of_the_pod_status_is_read():
    statuses = [
        container_status("main", {"name": "nvidia.com/gpu", "resources": [
            {"resourceID": GPU0, "health": "Healthy"}, {"resourceID": f"{GPU1}::1", "health": "Unhealthy"}]}),
        container_status("npu", {"name": "claim:npu/npu", "resources": [
            {"resourceID": f"{ASCEND}/node-1/npu-0-0", "health": "Unknown", "message": "plugin restarted"}]}),
        {"name": "sidecar", "ready": True},                        # no devices: no field
        container_status("odd", {"name": "nvidia.com/gpu", "resources": [{"resourceID": GPU0}]}),   # omitempty health
    ]
    reports, errors = parse_resources_status(statuses)
    assert errors == []
    assert reports == [DeviceReport("nvidia.com/gpu", GPU0, HEALTHY),
                       DeviceReport("nvidia.com/gpu", f"{GPU1}::1", UNHEALTHY),
                       DeviceReport("claim:npu/npu", f"{ASCEND}/node-1/npu-0-0", UNKNOWN),
                       DeviceReport("nvidia.com/gpu", GPU0, UNKNOWN)]


def test_a_malformed_entry_costs_that_entry_only():
    statuses = [container_status("a", {"name": "nvidia.com/gpu", "resources": [{"health": "Unhealthy"}]},
                                 {"name": "claim:c", "resources": [{"resourceID": f"{ASCEND}/p/d", "health": "Unhealthy"}]}),
                {"name": "b", "allocatedResourcesStatus": "broken"}]
    reports, errors = parse_resources_status(statuses)
    assert reports == [DeviceReport("claim:c", f"{ASCEND}/p/d", UNHEALTHY)]
    assert len(errors) == 2 and "resourceID" in errors[0] and "'b'" in errors[1]


def test_a_dra_resource_id_splits_at_its_first_and_last_slash():
    """A pool may be several DNS subdomains joined by slashes; the driver and the device hold none."""
    assert DeviceReport("claim:c/r", "gpu.nvidia.com/zone-a/node-1/gpu-0", 0).dra_device == \
        ("gpu.nvidia.com", "zone-a/node-1", "gpu-0")
    assert DeviceReport("claim:c", f"{ASCEND}/npu-node-1/npu-0-0", 0).dra_device == (ASCEND, "npu-node-1", "npu-0-0")
    assert DeviceReport("nvidia.com/gpu", GPU0, 0).dra_device is None
    assert DeviceReport("claim:c", "no-slashes", 0).dra_device is None


def test_each_row_gets_the_worst_report_of_its_device():
    reports = [DeviceReport("nvidia.com/gpu", GPU0, HEALTHY), DeviceReport("nvidia.com/gpu", f"{GPU0}-3", UNKNOWN),
               DeviceReport("nvidia.com/mig-1g.10gb", MIG, UNHEALTHY),           # a MIG device: its parent's row
               DeviceReport("claim:npu", f"{ASCEND}/node-1/npu-0-0", UNHEALTHY),
               DeviceReport("huawei.com/Ascend910", "Ascend910-0", UNHEALTHY),    # names no row of the node
               DeviceReport("claim:x", "other.example.com/p/d", UNHEALTHY)]
    got = health_by_gpu(reports, {GPU0, GPU1, "node-1-0"}, {MIG: GPU1}, {(ASCEND, "node-1", "npu-0-0"): "node-1-0"})
    assert got == {GPU0: UNKNOWN, GPU1: UNHEALTHY, "node-1-0": UNHEALTHY}
    assert worst(None, HEALTHY) == HEALTHY and worst(UNHEALTHY, UNKNOWN) == worst(UNKNOWN, UNHEALTHY) == UNHEALTHY


def claim(devices: list) -> dict:
    return {"kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1",
            "metadata": {"name": "npu-share", "namespace": "team-c", "uid": "7d1c2b3a-0e9f-4a8b-8c7d-6e5f4a3b2c07"},
            "status": {"allocation": {"devices": {"results": [
                {"request": "npu", "driver": ASCEND, "pool": "npu-node-1", "device": "npu-0-0"}]}},
                "devices": devices}}


def condition(type_: str, status: str) -> dict:
    return {"type": type_, "status": status, "reason": "Checked", "message": "",
            "lastTransitionTime": "2026-11-20T09:00:00Z", "observedGeneration": 1}


def test_a_claims_healthy_condition_reports_its_device():
    parsed = parse_claims(claim([
        {"driver": ASCEND, "pool": "npu-node-1", "device": "npu-0-0",
         "conditions": [condition("Ready", "True"), condition("Healthy", "False")]},
        {"driver": ASCEND, "pool": "npu-node-1", "device": "npu-1-0", "conditions": [condition("Ready", "False")]},
        {"driver": ASCEND, "pool": "npu-node-1", "device": "npu-2-0", "conditions": [condition("Healthy", "Unknown")]},
    ]))
    assert parsed.errors == ()
    (c,) = parsed.items
    assert c.device_health == ((ASCEND, "npu-node-1", "npu-0-0", UNHEALTHY), (ASCEND, "npu-node-1", "npu-2-0", UNKNOWN))
    bad = parse_claims(claim([{"driver": ASCEND, "pool": "npu-node-1", "device": "NOT A LABEL",
                               "conditions": [condition("Healthy", "False")]}]))
    assert len(bad.items) == 1 and bad.items[0].device_health == () and "device" in bad.errors[0]
