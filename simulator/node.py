"""One simulated GPU node: HAMi region files, a fake NVML and the kubelet's pod list.

    node = SimulatedNode(scenario, "gpu-node-1", hami_dir, seed=0)
    node.advance(ts_ms)      # workloads at that instant; region files rewritten in place
    node.nvml                # pynvml-like module object reading the same instant
    node.pods()              # kubelet /pods PodList dict with HAMi's annotations

Region files live where HAMi puts them under its hook path:
`hami_dir/containers/<podUID>_<container>/<name>.cache`. A batch job's pod exists only
while its job runs; when it ends its directory goes, as HAMi's monitor removes it.
"""
from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass
from pathlib import Path

from typing import Callable

import numpy as np

from slicemeter.simulator import dra_objects
from slicemeter.simulator import workload as wl
from slicemeter.simulator.hami_region import LAYOUTS, ProcSlot, RegionState, RegionWriter
from slicemeter.simulator import faults as health_model
from slicemeter.simulator.nvml import FakeNvml, GpuNow, HealthNow, ProcNow
from slicemeter.common import HAMI_ALLOCATED_ANNOTATION, HAMI_NODE_ANNOTATION, MiB
from slicemeter.simulator.scenario import RES_GPU, Container, Pod, Scenario, stable_hash, stable_uuid
from slicemeter import clock



def allocation_annotation(node_gpus, pod: Pod, hami_version: str = "2.10") -> str:
    """`<uuid>,NVIDIA,<memMiB>,<cores>:` per device, `;` after each container (empty keeps the index).

    As HAMi's EncodePodSingleDevice writes it; from v2.9.0 one entry per init container comes
    first, up to v2.8.3 init containers get no HAMi devices and no entry.
    """
    indexed = pod.containers if hami_version == "2.8" else (*pod.init_containers, *pod.containers)
    parts = []
    for c in indexed:
        if c.dra is not None:            # granted through a ResourceClaim: no HAMi device
            parts.append(";")
            continue
        parts.append("".join(f"{node_gpus[d].uuid},NVIDIA,{m},{c.cores}:" for d, m in zip(c.devices, c.mem_mib)) + ";")
    return "".join(parts)


def hami_sm_limit(cores: int) -> int:
    """What HAMi-core stores: CUDA_DEVICE_SM_LIMIT (HAMi sets it to gpucores), 100 when 0 or unset."""
    return cores if cores > 0 else 100


@dataclass
class LiveContainer:
    pod: Pod
    pod_uid: str
    pod_name: str
    container: Container
    ci: int


def _iso(ts_s: float) -> str:
    return dt.datetime.fromtimestamp(ts_s, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class SimulatedNode:
    def __init__(self, scenario: Scenario, node_name: str, hami_dir: str | Path, seed: int = 0):
        self.scenario = scenario
        self.spec = scenario.node(node_name)
        self.name = self.spec.name
        self.cluster = self.spec.cluster
        self.tenant = self.spec.tenant
        self.hami_dir = Path(hami_dir)
        self.layout = LAYOUTS[self.spec.hami_core]
        self.model = wl.FleetModel([self.spec], seed)
        self.gpus = self.spec.gpus
        self._col = {(s.ci, s.vdev): i for i, s in enumerate(self.model.slices)}
        self._writers: dict[str, RegionWriter] = {}
        self.nvml = FakeNvml(self, self.spec.nvml_unsupported)
        self.ts_ms = 0
        self.state: wl.FleetState | None = None
        self.advance(clock.now_ms())

    # ---------------------------------------------------------------- time
    def advance(self, ts_ms: int) -> None:
        """Move every workload to `ts_ms` and bring the region files up to date."""
        if self.spec.faults and 0 < self.ts_ms < ts_ms:   # the driver reports the Xids since the last instant
            for g in self.gpus:
                for code in health_model.xid_reports(self._faults_of(g.index), self.ts_ms, int(ts_ms)):
                    self.nvml.queue_xid(g.index, code)
        self.ts_ms = int(ts_ms)
        self.state = self.model.state(np.array([self.ts_ms], dtype=np.int64))
        wanted = {}
        for lc in self.live_containers():
            if lc.container.dra is None:
                wanted[f"containers/{lc.pod_uid}_{lc.container.name}"] = (lc, (lc.pod_uid, lc.container.name))
            elif lc.container.dra.kind == "hami-core":
                # HAMi's DRA driver: one region per prepared claim, under claims/<claimUID>/
                uid = self.claim_ref(lc).uid
                wanted[f"claims/{uid}"] = (lc, (uid,))
        for d in list(self._writers):
            if d not in wanted:
                del self._writers[d]
                shutil.rmtree(self.hami_dir / d, ignore_errors=True)
        for d, (lc, name_parts) in wanted.items():
            w = self._writers.get(d)
            if w is None:
                fname = stable_uuid("cache", *name_parts) + ".cache"
                w = self._writers[d] = RegionWriter(self.hami_dir / d / fname, self.layout)
            w.write(self.region_state(lc))

    @property
    def region_count(self) -> int:
        """Region files written at this instant (containers/ and claims/)."""
        return len(self._writers)

    def live_containers(self) -> list[LiveContainer]:
        cs = self.state.containers
        out = []
        for ci, (ni, pod) in enumerate(self.model.container_pod):
            if cs is None or not cs.present[0, ci]:
                continue
            c = self.model.containers[ci]
            uid, name = pod.uid, pod.name
            if pod.batch:
                run = int(cs.run[0, ci])
                uid, name = wl.batch_run_uid(self.cluster, pod, run), wl.batch_run_name(pod, run)
            out.append(LiveContainer(pod, uid, name, c, ci))
        return out

    def claim_ref(self, lc: LiveContainer) -> dra_objects.ClaimRef:
        ci = lc.pod.containers.index(lc.container)
        return dra_objects.claim_ref(self.cluster, lc.pod.namespace, lc.pod_name, lc.pod_uid, lc.container, ci)

    # ---------------------------------------------------------------- the API server's DRA objects
    @property
    def dra(self) -> Callable[[], tuple[dict, dict]] | None:
        """What the exporter's DRA source fetches, (ResourceClaimList, ResourceSliceList), on a
        node with devices published through DRA; None on a device-plugin node."""
        if not any(g.dra for g in self.spec.gpus):
            return None
        return lambda: (self.resource_claims_json(), self.resource_slices_json())

    def resource_slices_json(self) -> dict:
        """The ResourceSliceList the node's DRA drivers publish (empty without DRA devices)."""
        return dra_objects.resource_slices(self.spec, _iso(self.ts_ms / 1000 - 86400))

    def resource_claims_json(self) -> dict:
        """The ResourceClaimList of the claims allocated on the node, reserved for live pods."""
        uses = [dra_objects.ClaimUse(lc.pod.namespace, lc.pod_name, lc.pod_uid, lc.container, self.claim_ref(lc))
                for lc in self.live_containers() if lc.container.dra is not None]
        return dra_objects.resource_claims(self.spec, uses, _iso(self.ts_ms / 1000 - 3600))

    # ---------------------------------------------------------------- per-process view
    def _procs(self, lc: LiveContainer) -> list[tuple[int, list[tuple[int, int, int]], list[int], list[int]]]:
        """Per process: (index, used per vdev (ctx, mod, hami data) bytes, true bytes per vdev, sm per vdev)."""
        c, st = lc.container, self.state
        out = []
        for p in range(c.processes):
            used, true, sm = [], [], []
            for j in range(len(c.devices)):
                procs = wl.procs_on_device(c, j)
                if p not in procs:
                    used.append((0, 0, 0)); true.append(0); sm.append(0)  # noqa: E702
                    continue
                col, k, pi = self._col[(lc.ci, j)], len(procs), procs.index(p)
                ctx, mod, data = wl.split_proc_memory(st.used_mib[0:1, col], k, pi)
                hami_data = int(np.floor(int(data[0]) * c.hami_underreport))
                used.append((int(ctx[0]) * MiB, int(mod[0]) * MiB, hami_data * MiB))
                true.append((int(ctx[0]) + int(mod[0]) + int(data[0])) * MiB)
                sm.append(int(wl.split_sm(st.sm_pct[0:1, col], k, pi)[0]))
            out.append((p, used, true, sm))
        return out

    def watcher_zeroed(self, lc: LiveContainer) -> bool:
        """Whether this read falls between HAMi-core's watcher zeroing every slot's sm_util and
        monitorused (init_gpu_device_utilization) and setting them from NVML again."""
        p = self.spec.watcher_zeroed
        return p > 0 and stable_hash("watcher", lc.container.key, self.ts_ms // 1000) < p * 2.0**64

    def region_state(self, lc: LiveContainer) -> RegionState:
        c = lc.container
        last = int(self.state.containers.last_kernel_s[0, lc.ci])
        zeroed = self.watcher_zeroed(lc)
        slots = [
            ProcSlot(pid=wl.container_pid(p), hostpid=wl.host_pid(self.name, lc.pod_uid, c.name, p),
                     used=used, monitorused=[0] * len(true) if zeroed else true,
                     sm_util=[0] * len(sm) if zeroed else sm)
            for p, used, true, sm in self._procs(lc)
        ]
        if c.writer_killed:
            # a process killed inside a memory update: its slot stays, odd, with what it held
            p = c.processes
            slots.append(ProcSlot(pid=wl.container_pid(p), hostpid=wl.host_pid(self.name, lc.pod_uid, c.name, p),
                                  used=[(256 * MiB, 0, 512 * MiB)] + [(0, 0, 0)] * (len(c.devices) - 1),
                                  monitorused=[0] * len(c.devices), sm_util=[0] * len(c.devices), killed=True))
        return RegionState(
            uuids=[self.gpus[d].uuid for d in c.devices],
            limits=[m * MiB for m in c.mem_mib],
            sm_limits=[hami_sm_limit(c.cores)] * len(c.devices),
            procs=slots,
            owner_pid=wl.container_pid(0),
            last_kernel_time=last,
            recent_kernel=2 if last and self.ts_ms // 1000 - last <= 10 else 0,
        )

    # ---------------------------------------------------------------- NodeSource for FakeNvml
    def gpu_count(self) -> int:
        """Devices NVML lists (they come first; an NPU is not one)."""
        return sum(g.nvml for g in self.gpus)

    def gpu_now(self, index: int) -> GpuNow:
        g, st = self.gpus[index], self.state
        return GpuNow(
            uuid=g.uuid, name=g.model, memory_total=g.memory_bytes,
            memory_used=int(st.gpu_mem_used_bytes[0, index]), sm_pct=int(st.gpu_sm_pct[0, index]),
            mem_util_pct=int(st.gpu_mem_util_pct[0, index]), power_mw=int(st.gpu_power_mw[0, index]),
            energy_mj=int(st.gpu_energy_mj[0, index]),
        )

    def _faults_of(self, index: int) -> tuple[health_model.Fault, ...]:
        return tuple(f for f in self.spec.faults if f.gpu == index)

    def health_now(self, index: int) -> HealthNow:
        g, st = self.gpus[index], self.state
        h = health_model.health(self._faults_of(index), g.tdp_watts, np.array([self.ts_ms]),
                                st.gpu_power_mw[0:1, index], st.gpu_sm_pct[0:1, index], 0)
        ecc = (int(h.ecc_corrected[0]), int(h.ecc_uncorrected[0]))
        return HealthNow(
            temperature_c=int(h.temperature_c[0]), memory_temperature_c=int(h.memory_temperature_c[0]),
            fan_pct=int(h.fan_pct[0]), ecc=ecc + ecc, retired_pages_pending=bool(h.retired_pages_pending[0]),
            remapped_rows=(0, int(h.remapped_uncorrectable[0]), int(h.remapped_pending[0]), 0),
            clock_event_reasons=int(h.clock_event_reasons[0]), thermal_violation_ns=int(h.thermal_violation_ns[0]),
            lost=bool(h.lost[0]))

    def procs_now(self, index: int) -> list[ProcNow]:
        out = []
        for lc in self.live_containers():
            c = lc.container
            if index not in c.devices:
                continue
            j = c.devices.index(index)
            memint = wl.MEM_INTENSITY[wl.PATTERN_IDS[c.workload.pattern]]
            for p, _used, true, sm in self._procs(lc):
                if p in wl.procs_on_device(c, j):
                    out.append(ProcNow(pid=wl.host_pid(self.name, lc.pod_uid, c.name, p), used_bytes=true[j],
                                       sm_pct=sm[j], mem_util_pct=int(round(sm[j] * memint))))
        return out

    # ---------------------------------------------------------------- kubelet /pods
    def pods(self) -> dict:
        live = self.live_containers()
        by_pod: dict[str, tuple[Pod, str]] = {}
        for lc in live:
            by_pod.setdefault(lc.pod_uid, (lc.pod, lc.pod_name))
        items = []
        started = _iso(self.ts_ms / 1000 - 3600)
        for pod in (p for p in self.spec.pods if not p.batch):   # idle or CPU-only pods are listed too
            by_pod.setdefault(pod.uid, (pod, pod.name))
        for uid, (pod, name) in by_pod.items():
            items.append(self._pod_json(pod, uid, name, started))
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}

    def _pod_json(self, pod: Pod, uid: str, name: str, started: str) -> dict:
        def spec(c: Container) -> dict:
            if c.dra is not None:
                return {"name": c.name, "image": f"registry.example/{pod.namespace}/{c.name}:latest",
                        "resources": dra_objects.container_resources(c)}
            res = {k: str(v) for k, v in c.requests.items()}
            if RES_GPU in res and c.whole_gpu:
                res = {RES_GPU: res[RES_GPU]}
            return {"name": c.name, "image": f"registry.example/{pod.namespace}/{c.name}:latest",
                    "resources": {"limits": dict(res), "requests": dict(res)}}

        def status(c: Container, state: dict) -> dict:
            return {"name": c.name, "ready": "running" in state, "restartCount": 0,
                    "containerID": "containerd://" + stable_uuid("ctr", uid, c.name).replace("-", ""), "state": state}

        containers = [spec(c) for c in pod.containers]
        statuses = [status(c, {"running": {"startedAt": started}}) for c in pod.containers]
        done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}}
        extra_spec = {"initContainers": [spec(c) for c in pod.init_containers]} if pod.init_containers else {}
        extra_status = {"initContainerStatuses": [status(c, done) for c in pod.init_containers]} if pod.init_containers else {}
        claim_spec, claim_status = dra_objects.pod_fields(
            [(i, c, dra_objects.claim_ref(self.cluster, pod.namespace, name, uid, c, i))
             for i, c in enumerate(pod.containers) if c.dra is not None], pod.name)
        hami = any(c.has_gpu and c.dra is None for c in (*pod.init_containers, *pod.containers))
        return {
            "metadata": {
                "name": name, "namespace": pod.namespace, "uid": uid,
                "labels": {"app": pod.name, "slicemeter.sim/pattern": pod.containers[0].workload.pattern},
                "annotations": {
                    HAMI_ALLOCATED_ANNOTATION: allocation_annotation(self.gpus, pod, self.spec.hami_version),
                    HAMI_NODE_ANNOTATION: self.name,
                    "hami.io/bind-phase": "success",
                } if hami else {},
                "creationTimestamp": started,
            },
            "spec": {"nodeName": self.name, "schedulerName": "hami-scheduler" if hami else "default-scheduler",
                     **extra_spec, "containers": containers, **claim_spec},
            "status": {"phase": "Running", "startTime": started, **extra_status, "containerStatuses": statuses,
                       **claim_status},
        }
