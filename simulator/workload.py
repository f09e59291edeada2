"""The workload model: what every slice and GPU does at any instant, vectorised.

One model feeds both the live simulator (SimulatedNode: one instant, region files and
fake NVML) and time travel (months of Ticks as columns), so backfilled history and live
ticks agree value for value at the same instant.

Every value is a pure function of (scenario, seed, instant): noise comes from a
counter-based hash of (container key, second), never from a stateful RNG, so any instant
can be computed without replaying the past, and adding a pod changes nobody else's noise.
The GPU energy counter needs the integral of power since an origin; to keep that O(1) the
*expected* GPU power is periodic with a period of one week (15-minute slots: notebook
sessions follow a weekly habit, batch jobs a per-weekday cron), so the counter is
whole weeks x weekly energy + a cumulative sum inside the week. Reported power is that
expected power with +-2 % noise; the counter integrates the expected power exactly.
"""
from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass

import numpy as np

from slicemeter.common import MiB
from slicemeter.simulator.scenario import Container, Node, Pod, stable_hash, stable_uuid

ORIGIN_S = 1578268800            # 2020-01-06T00:00:00Z, a Monday: start of week/day cycles
SLOT_S = 900                     # expected-power resolution
WEEK_S = 7 * 86400
WEEK_SLOTS = WEEK_S // SLOT_S
NB_BLOCK_S = 1800                # notebook session blocks
NB_WEEK_BLOCKS = WEEK_S // NB_BLOCK_S
CTX_MIB = 300                    # CUDA context per process per device
MOD_MIB = 60                     # loaded modules (kernels) per process per device
DRIVER_OVERHEAD_MIB = 256        # NVML memory.used with no process
PATTERN_IDS = {"steady-training": 0, "diurnal-inference": 1, "bursty-notebook": 2,
               "idle-reservation": 3, "batch-jobs": 4}
# Memory-controller utilisation per unit of SM utilisation, by pattern.
MEM_INTENSITY = np.array([0.55, 0.35, 0.30, 0.0, 0.60])
_M64 = (1 << 64) - 1
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * _C1
    x = x ^ (x >> np.uint64(27))
    x = x * _C2
    return x ^ (x >> np.uint64(31))


def u01(key: np.ndarray, idx: np.ndarray, salt: int) -> np.ndarray:
    """Uniform [0, 1) from (key, integer index); broadcasts."""
    k = np.asarray(key, dtype=np.uint64) ^ np.uint64((salt * 0xD6E8FEB86659FD93) & _M64)
    x = np.asarray(idx).astype(np.int64).astype(np.uint64) * _GOLD + k
    return (_mix(x) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def znoise(key: np.ndarray, idx: np.ndarray, salt: int) -> np.ndarray:
    """Zero-mean, unit-variance, bounded (+-3) noise: sum of three uniforms, rescaled."""
    return (u01(key, idx, salt) + u01(key, idx, salt + 101) + u01(key, idx, salt + 202) - 1.5) * 2.0


def _hour_of_day(t_s: np.ndarray) -> np.ndarray:
    return ((t_s - ORIGIN_S) % 86400) / 3600.0


def _weekday(t_s: np.ndarray) -> np.ndarray:
    return ((t_s - ORIGIN_S) // 86400) % 7           # 0 = Monday


def _diurnal_load(t_s: np.ndarray, base: np.ndarray, peak: np.ndarray) -> np.ndarray:
    hod = _hour_of_day(t_s)
    wave = np.where((hod >= 7) & (hod < 21), np.sin(np.pi * (hod - 7) / 14), 0.0)
    weekend = np.where(_weekday(t_s) >= 5, 0.5, 1.0)
    return base + (peak - base) * wave * weekend


@dataclass
class ContainerArrays:
    """Per-container parameters as (1, C) rows, so patterns broadcast over (T, C).

    `groups` maps a pattern id to its container columns; each pattern is evaluated on its own
    columns only. Schedules are kept for their pattern's columns only (rows in group order).
    """

    key: np.ndarray
    sched: np.ndarray         # the pod's key: its containers share one schedule
    pattern: np.ndarray
    level: np.ndarray
    memory: np.ndarray
    base: np.ndarray
    peak: np.ndarray
    jobs: np.ndarray          # batch: jobs per day
    part_s: np.ndarray        # batch: seconds per job period
    dur_s: np.ndarray         # batch: job duration
    groups: dict[int, np.ndarray]
    nb_active: np.ndarray     # (notebooks, NB_WEEK_BLOCKS) session schedule
    nb_back: np.ndarray       # (notebooks, NB_WEEK_BLOCKS) blocks back to the last session, -1 = none
    batch_off: np.ndarray     # (batch containers, 7 * 48) job start offsets per weekday and job
    life: "Lifecycle | None" = None   # pods that come and go (living fleet), set by FleetModel


def container_arrays(containers: list[Container], seed: int) -> ContainerArrays:
    key = np.array([stable_hash(c.key, seed) for c in containers], dtype=np.uint64)
    sched = np.array([stable_hash(c.sched_key, seed) for c in containers], dtype=np.uint64)
    params = [c.workload.params_dict for c in containers]

    def param(name: str, default: float = 0.0) -> np.ndarray:
        return np.array([p.get(name, default) for p in params], dtype=np.float64)

    pattern = np.array([PATTERN_IDS[c.workload.pattern] for c in containers], dtype=np.int64)
    groups = {pid: np.flatnonzero(pattern == pid) for pid in range(len(PATTERN_IDS))}
    groups = {pid: cols for pid, cols in groups.items() if len(cols)}
    jobs = param("jobs_per_day", 1).astype(np.int64)
    part = np.maximum((86400 // np.maximum(jobs, 1)) // SLOT_S * SLOT_S, SLOT_S)
    dur = np.minimum(np.ceil(param("duration_min", 15) * 60 / SLOT_S).astype(np.int64) * SLOT_S, part)
    # notebook sessions: a weekly habit (working hours far more likely)
    nb = groups.get(2, np.zeros(0, np.int64))
    blocks = np.arange(NB_WEEK_BLOCKS)
    block_t = ORIGIN_S + blocks * NB_BLOCK_S
    hod = _hour_of_day(block_t)
    working = (_weekday(block_t) < 5) & (hod >= 9) & (hod < 19)
    prob = np.where(working[None, :], param("session_prob")[nb][:, None], 0.03)
    nb_active = u01(sched[nb][:, None], blocks[None, :], 3) < prob
    # blocks back to the nearest earlier session (cyclic over the week), -1 if none
    twice = np.concatenate([nb_active, nb_active], axis=1)
    pos = np.where(twice, np.arange(2 * NB_WEEK_BLOCKS)[None, :], -1)
    last = np.maximum.accumulate(pos, axis=1)[:, NB_WEEK_BLOCKS - 1:2 * NB_WEEK_BLOCKS - 1]
    nb_back = np.where(last >= 0, NB_WEEK_BLOCKS + blocks[None, :] - last, -1)
    # batch: job k on weekday w starts at a slot-aligned offset inside its period
    bt = groups.get(4, np.zeros(0, np.int64))
    slots_free = (part[bt] - dur[bt]) // SLOT_S
    idx = np.arange(7 * 48)
    batch_off = (np.floor(u01(sched[bt][:, None], idx[None, :], 5) * (slots_free[:, None] + 1)) * SLOT_S)
    row = lambda a: a[None, :]  # noqa: E731
    return ContainerArrays(
        key=row(key), sched=row(sched), pattern=row(pattern), level=row(param("level")), memory=row(param("memory")),
        base=row(param("base")), peak=row(param("peak")), jobs=row(jobs), part_s=row(part), dur_s=row(dur),
        groups=groups, nb_active=nb_active, nb_back=nb_back, batch_off=batch_off.astype(np.int64),
    )


@dataclass
class ContainerState:
    present: np.ndarray       # (T, C) bool
    run: np.ndarray           # (T, C) int64 batch run id (day * 64 + job), 0 otherwise
    util: np.ndarray          # (T, C) fraction of the slice's SM cap in use
    memfrac: np.ndarray       # (T, C) fraction of the memory grant in use
    last_kernel_s: np.ndarray  # (T, C) int64 Unix seconds of the last kernel, 0 = never


def _batch_running(ca: ContainerArrays, tsec: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(running, day, job) of the batch columns at (T, 1) instants in seconds."""
    cols = ca.groups[4]
    day = (tsec - ORIGIN_S) // 86400
    sod = (tsec - ORIGIN_S) % 86400
    part = ca.part_s[:, cols]
    job = sod // part
    off = ca.batch_off[np.arange(len(cols))[None, :], np.minimum((day % 7) * 48 + job, 7 * 48 - 1)]
    start = job * part + off
    return (job < ca.jobs[:, cols]) & (sod >= start) & (sod < start + ca.dur_s[:, cols]), day, job


def _notebook_blocks(ca: ContainerArrays, tsec: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(in session, blocks back to the last session, absolute block) of the notebook columns."""
    abs_block = (tsec - ORIGIN_S) // NB_BLOCK_S
    wb = abs_block % NB_WEEK_BLOCKS
    rows = np.arange(len(ca.groups[2]))[None, :]
    return ca.nb_active[rows, wb], ca.nb_back[rows, wb], abs_block


def container_state(ca: ContainerArrays, t_ms: np.ndarray) -> ContainerState:
    """Every container at every instant (t_ms: (T,) int64)."""
    tsec = (np.asarray(t_ms, dtype=np.int64) // 1000)[:, None]
    T, C = tsec.shape[0], ca.key.shape[1]
    present = np.ones((T, C), dtype=bool)
    run = np.zeros((T, C), dtype=np.int64)
    util = np.zeros((T, C))
    memfrac = np.zeros((T, C))
    last = np.zeros((T, C), dtype=np.int64)
    for pid, cols in ca.groups.items():
        key, level, mem = ca.key[:, cols], ca.level[:, cols], ca.memory[:, cols]
        if pid in (0, 4):                     # steady training / batch: a level with a little jitter
            steady = np.clip(level + 0.04 * znoise(key, tsec, 1), 0.0, 1.0)
            steady_mem = mem + 0.01 * (u01(key, tsec // 60, 2) - 0.5)
        if pid == 0:
            util[:, cols], memfrac[:, cols], last[:, cols] = steady, steady_mem, tsec
        elif pid == 1:                        # diurnal inference
            base = ca.base[:, cols]
            load = _diurnal_load(tsec, base, ca.peak[:, cols])
            util[:, cols] = np.clip(load * (1 + 0.1 * znoise(key, tsec, 1)), 0.0, 1.0)
            memfrac[:, cols] = mem + 0.3 * (load - base)
            last[:, cols] = tsec
        elif pid == 2:                        # bursty notebook
            active, back, abs_block = _notebook_blocks(ca, tsec)
            burst = u01(key, tsec // 10, 4) < 0.3
            util[:, cols] = np.where(active, np.where(burst, level * (0.8 + 0.4 * u01(key, tsec, 6)), 0.01), 0.0)
            memfrac[:, cols] = np.where(active, mem, mem * 0.5)
            last[:, cols] = np.where(active, tsec,
                                     np.where(back > 0, ORIGIN_S + (abs_block - back + 1) * NB_BLOCK_S - 1, 0))
        elif pid == 3:                        # idle reservation: memory held, no kernels
            memfrac[:, cols] = mem
        else:                                 # batch jobs: the pod exists only while a job runs
            running, day, job = _batch_running(ca, tsec)
            present[:, cols] = running
            util[:, cols] = np.where(running, steady, 0.0)
            memfrac[:, cols] = np.where(running, steady_mem, 0.0)
            last[:, cols] = np.where(running, tsec, 0)
            run[:, cols] = np.where(running, day * 64 + job, 0)
    if ca.life is not None:
        _apply_lifecycle(ca, tsec, present, run, util, memfrac, last)
    return ContainerState(present=present, run=run, util=util, memfrac=np.clip(memfrac, 0.0, 1.0),
                          last_kernel_s=last)


def expected_util(ca: ContainerArrays, t_s: np.ndarray) -> np.ndarray:
    """Noise-free expected utilisation (fraction of cap) at instants t_s (seconds): (T, C)."""
    tcol = np.asarray(t_s, dtype=np.int64)[:, None]
    out = np.zeros((len(tcol), ca.key.shape[1]))
    for pid, cols in ca.groups.items():
        level = ca.level[:, cols]
        if pid == 0:
            out[:, cols] = level
        elif pid == 1:
            out[:, cols] = _diurnal_load(tcol, ca.base[:, cols], ca.peak[:, cols])
        elif pid == 2:
            active, _, _ = _notebook_blocks(ca, tcol)
            out[:, cols] = np.where(active, level * 0.3 + 0.01 * 0.7, 0.0)   # burst share x level + floor
        elif pid == 4:
            out[:, cols] = np.where(_batch_running(ca, tcol)[0], level, 0.0)
    if ca.life is not None and len(ca.life.replica_cols):
        cols = ca.life.replica_cols
        out[:, cols] *= _replica_up(ca, tcol)
    return out


# ---------------------------------------------------------------- the living fleet

@dataclass
class Lifecycle:
    """Containers whose pod comes and goes (slicemeter.simulator.scenario._living_pods)."""

    session_cols: np.ndarray   # container columns of pods that live for a session
    sess_active: np.ndarray    # (sessions, NB_WEEK_BLOCKS) the pod exists in this half-hour block
    sess_since: np.ndarray     # (sessions, NB_WEEK_BLOCKS) blocks of its session before this one
    replica_cols: np.ndarray   # container columns of a deployment's extra replicas
    replica_frac: np.ndarray   # (1, R) replica k of N is up while load >= k/N of the peak
    replica_k: np.ndarray      # (1, R) k


# A slice reserved and left idle: opened on most working days in the morning, held for hours.
RES_DAY_PROB = 0.8
RES_OPEN_BLOCKS = (16, 8)        # opened 08:00 + up to 8 half-hours
RES_HELD_BLOCKS = (4, 17)        # held 2 h + up to 16 half-hours (at most 10 h, same day)


def reservation_sessions(key: np.ndarray) -> np.ndarray:
    """(len(key), NB_WEEK_BLOCKS) blocks in which each idle reservation's pod exists: a weekly
    habit by pod key (at least one session a week), so its power stays week-periodic."""
    days = np.arange(5)
    u = u01(key[:, None], days[None, :], 11)
    opened = (u < RES_DAY_PROB) | (u == u.min(axis=1, keepdims=True))
    start = RES_OPEN_BLOCKS[0] + np.floor(u01(key[:, None], days[None, :], 12) * RES_OPEN_BLOCKS[1]).astype(np.int64)
    held = RES_HELD_BLOCKS[0] + np.floor(u01(key[:, None], days[None, :], 13) * RES_HELD_BLOCKS[1]).astype(np.int64)
    block_of_day = np.arange(NB_WEEK_BLOCKS) % (86400 // NB_BLOCK_S)
    day = np.arange(NB_WEEK_BLOCKS) // (86400 // NB_BLOCK_S)
    out = np.zeros((len(key), NB_WEEK_BLOCKS), dtype=bool)
    for d in days:
        on = (day == d)[None, :] & (block_of_day[None, :] >= start[:, d:d + 1]) \
            & (block_of_day[None, :] < (start + held)[:, d:d + 1])
        out |= on & opened[:, d:d + 1]
    return out


def _blocks_since(active: np.ndarray) -> np.ndarray:
    """Consecutive active blocks before each block, cyclic over the week (two passes)."""
    since = np.zeros(active.shape, dtype=np.int64)
    run = np.zeros(active.shape[0], dtype=np.int64)
    for _ in range(2):
        for b in range(NB_WEEK_BLOCKS):
            run = np.where(active[:, b], run + 1, 0)
            since[:, b] = np.maximum(run - 1, 0)
    return np.minimum(since, NB_WEEK_BLOCKS - 1)


def lifecycle_arrays(ca: ContainerArrays, pods: list[Pod]) -> Lifecycle | None:
    """Lifecycle arrays for containers whose pods (one per container column) are living."""
    sessions = np.array([i for i, p in enumerate(pods) if p.lifecycle == "sessions"], dtype=np.int64)
    replicas = np.array([i for i, p in enumerate(pods) if p.lifecycle == "replica"], dtype=np.int64)
    if not len(sessions) and not len(replicas):
        return None
    # a notebook lives while its user has it open; an idle reservation by its own habit
    notebooks = ca.groups.get(2, np.zeros(0, np.int64))
    is_nb = ca.pattern[0, sessions] == PATTERN_IDS["bursty-notebook"]
    active = np.zeros((len(sessions), NB_WEEK_BLOCKS), dtype=bool)
    active[is_nb] = ca.nb_active[np.searchsorted(notebooks, sessions[is_nb])]
    active[~is_nb] = reservation_sessions(ca.sched[0, sessions[~is_nb]])
    k = np.array([pods[i].replica[0] for i in replicas], dtype=np.int64)
    n = np.array([pods[i].replica[1] for i in replicas], dtype=np.int64)
    return Lifecycle(session_cols=sessions, sess_active=active, sess_since=_blocks_since(active),
                     replica_cols=replicas, replica_frac=(k / np.maximum(n, 1))[None, :], replica_k=k[None, :])


def _replica_up(ca: ContainerArrays, tsec: np.ndarray) -> np.ndarray:
    cols = ca.life.replica_cols
    peak = ca.peak[:, cols]
    return _diurnal_load(tsec, ca.base[:, cols], peak) >= peak * ca.life.replica_frac


def _apply_lifecycle(ca: ContainerArrays, tsec: np.ndarray, present: np.ndarray, run: np.ndarray,
                     util: np.ndarray, memfrac: np.ndarray, last: np.ndarray) -> None:
    """Pods exist only while alive; each life is its own pod (run id = day * 64 + k, as a
    batch run's): a session is named by the half-hour block it opened in, a replica by k."""
    life = ca.life
    alive_cols = []
    if len(life.session_cols):
        abs_block = (tsec - ORIGIN_S) // NB_BLOCK_S
        rows = np.arange(len(life.session_cols))[None, :]
        alive = life.sess_active[rows, abs_block % NB_WEEK_BLOCKS]
        opened = abs_block - life.sess_since[rows, abs_block % NB_WEEK_BLOCKS]
        day_blocks = 86400 // NB_BLOCK_S
        run[:, life.session_cols] = np.where(alive, (opened // day_blocks) * 64 + opened % day_blocks, 0)
        alive_cols.append((life.session_cols, alive))
    if len(life.replica_cols):
        up = _replica_up(ca, tsec)
        day = (tsec - ORIGIN_S) // 86400
        run[:, life.replica_cols] = np.where(up, day * 64 + life.replica_k, 0)
        alive_cols.append((life.replica_cols, up))
    for cols, alive in alive_cols:
        present[:, cols] = alive
        util[:, cols] = np.where(alive, util[:, cols], 0.0)
        memfrac[:, cols] = np.where(alive, memfrac[:, cols], 0.0)
        last[:, cols] = np.where(alive, last[:, cols], 0)


# ---------------------------------------------------------------- slices and GPUs of nodes

def procs_on_device(c: Container, vdev: int) -> list[int]:
    """Which of the container's processes use its vdevice `vdev` (DDP: one per GPU)."""
    n, ndev = c.processes, len(c.devices)
    if n >= ndev:
        return [p for p in range(n) if p % ndev == vdev]
    return [vdev % n]


def split_proc_memory(used_mib: np.ndarray, k: int, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(context, module, data) MiB of the p-th of k processes sharing `used_mib` on a device."""
    share = used_mib // k + (used_mib % k if p == 0 else 0)
    ctx = np.minimum(CTX_MIB, share)
    mod = np.minimum(MOD_MIB, share - ctx)
    return ctx, mod, share - ctx - mod


def split_sm(sm_pct: np.ndarray, k: int, p: int) -> np.ndarray:
    return sm_pct // k + (p < sm_pct % k)


@dataclass
class SliceRef:
    node: int                 # index into FleetModel.nodes
    pod: Pod
    container: Container
    ci: int                   # column in the container arrays
    vdev: int
    gpu: int                  # column in the GPU arrays
    procs: list[int]


@dataclass
class FleetState:
    t_ms: np.ndarray
    containers: ContainerState
    present: np.ndarray        # (T, S)
    sm_pct: np.ndarray         # (T, S) int: HAMi device_util sm summed over the slice's processes
    used_mib: np.ndarray       # (T, S) true memory in use (NVML's view)
    ctx_mib: np.ndarray
    mod_mib: np.ndarray
    data_mib: np.ndarray       # buffers as HAMi's region reports them (may under-report)
    gpu_sm_pct: np.ndarray     # (T, G) int
    gpu_mem_util_pct: np.ndarray
    gpu_mem_used_bytes: np.ndarray
    gpu_power_mw: np.ndarray
    gpu_energy_mj: np.ndarray
    gpu_slices: np.ndarray     # (T, G) slices present


class FleetModel:
    """Static arrays for a set of nodes; `state(t_ms)` evaluates all of them at once."""

    def __init__(self, nodes: list[Node], seed: int):
        self.nodes = nodes
        self.seed = seed
        self.gpu_offset = np.cumsum([0] + [len(n.gpus) for n in nodes])
        containers: list[Container] = []
        self.slices: list[SliceRef] = []
        self.container_pod: list[tuple[int, Pod]] = []
        for ni, node in enumerate(nodes):
            for pod in node.pods:
                for c in pod.containers:
                    if not c.has_gpu:
                        continue
                    ci = len(containers)
                    containers.append(c)
                    self.container_pod.append((ni, pod))
                    for j, d in enumerate(c.devices):
                        self.slices.append(SliceRef(ni, pod, c, ci, j, int(self.gpu_offset[ni]) + d,
                                                    procs_on_device(c, j)))
        self.containers = containers
        self.ca = container_arrays(containers, seed) if containers else None
        if self.ca is not None:
            self.ca.life = lifecycle_arrays(self.ca, [pod for _, pod in self.container_pod])
        # slices sorted by GPU so per-GPU sums are cumsum differences
        self.slices.sort(key=lambda s: (s.gpu, s.ci, s.vdev))
        S = len(self.slices)
        self.s_ci = np.array([s.ci for s in self.slices], dtype=np.int64)
        self.s_gpu = np.array([s.gpu for s in self.slices], dtype=np.int64)
        self.s_limit_mib = np.array([s.container.mem_mib[s.vdev] for s in self.slices], dtype=np.int64)
        self.s_cap = np.array([s.container.cores or 100 for s in self.slices], dtype=np.int64)
        self.s_nproc = np.array([len(s.procs) for s in self.slices], dtype=np.int64)
        self.s_under = np.array([s.container.hami_underreport for s in self.slices])
        self.s_memint = MEM_INTENSITY[[0 if not S else PATTERN_IDS[s.container.workload.pattern] for s in self.slices]] \
            if S else np.zeros(0)
        G = int(self.gpu_offset[-1])
        self.gpus = [g for n in nodes for g in n.gpus]
        self.g_start = np.searchsorted(self.s_gpu, np.arange(G), side="left")
        self.g_end = np.searchsorted(self.s_gpu, np.arange(G), side="right")
        self.g_idle = np.array([g.idle_watts for g in self.gpus])
        self.g_tdp = np.array([g.tdp_watts for g in self.gpus])
        self.g_key = np.array([stable_hash("gpu-noise", g.uuid, seed) for g in self.gpus], dtype=np.uint64)
        self._week_power()

    # ---- expected power, one week of 15-minute slots per GPU, and its running integral
    def _week_power(self) -> None:
        G = len(self.gpus)
        act = np.zeros((WEEK_SLOTS, G))
        if self.slices:
            t = ORIGIN_S + np.arange(WEEK_SLOTS, dtype=np.int64) * SLOT_S + SLOT_S // 2
            eu = expected_util(self.ca, t)                    # (W, C)
            contrib = eu[:, self.s_ci] * self.s_cap / 100.0   # (W, S)
            act = self._per_gpu(contrib)
        act = np.minimum(act, 1.0)
        self.w_power = self.g_idle + (self.g_tdp - self.g_idle) * act          # (W, G) watts
        self.w_cum = np.vstack([np.zeros((1, G)), np.cumsum(self.w_power * SLOT_S, axis=0)])  # joules

    def _per_gpu(self, x: np.ndarray) -> np.ndarray:
        """Sum (T, S) slice columns into (T, G) GPU columns."""
        cs = np.concatenate([np.zeros((x.shape[0], 1), dtype=x.dtype), np.cumsum(x, axis=1)], axis=1)
        return cs[:, self.g_end] - cs[:, self.g_start]

    def energy_mj(self, t_ms: np.ndarray) -> np.ndarray:
        rel_ms = np.asarray(t_ms, dtype=np.int64)[:, None] - ORIGIN_S * 1000
        weeks = rel_ms // (WEEK_S * 1000)
        in_week_ms = rel_ms % (WEEK_S * 1000)
        slot = in_week_ms // (SLOT_S * 1000)
        into = (in_week_ms % (SLOT_S * 1000)) / 1000.0
        gcol = np.arange(len(self.gpus))[None, :]
        joules = weeks * self.w_cum[-1][None, :] + self.w_cum[slot, gcol] + self.w_power[slot, gcol] * into
        return np.floor(joules * 1000).astype(np.int64)

    def state(self, t_ms: np.ndarray) -> FleetState:
        t_ms = np.asarray(t_ms, dtype=np.int64)
        T, G = len(t_ms), len(self.gpus)
        if self.slices:
            cs = container_state(self.ca, t_ms)
            present = cs.present[:, self.s_ci]
            sm = np.rint(cs.util[:, self.s_ci] * self.s_cap).astype(np.int64)
            used = np.floor(cs.memfrac[:, self.s_ci] * self.s_limit_mib).astype(np.int64)
            ctx = np.zeros_like(used)
            mod = np.zeros_like(used)
            data = np.zeros_like(used)
            for k in np.unique(self.s_nproc):
                cols = self.s_nproc == k
                u = used[:, cols]
                for p in range(int(k)):
                    c_, m_, d_ = split_proc_memory(u, int(k), p)
                    ctx[:, cols] += c_
                    mod[:, cols] += m_
                    data[:, cols] += np.floor(d_ * self.s_under[cols]).astype(np.int64)
            gsm = np.minimum(self._per_gpu(sm), 100)
            # rounded to 6 places first: the sum's last bits depend on the order of the GPU's columns,
            # which differs between a one-node model and the fleet's, and must not move a .5 across rint
            gmu = np.minimum(np.rint(np.round(self._per_gpu(sm * self.s_memint), 6)), 100).astype(np.int64)
            gused = self._per_gpu(used)
            gslices = self._per_gpu(present.astype(np.int64))
        else:
            cs = None
            present = np.zeros((T, 0), bool)
            sm = used = ctx = mod = data = np.zeros((T, 0), np.int64)
            gsm = gmu = gused = gslices = np.zeros((T, G), np.int64)
        rel_ms = t_ms[:, None] - ORIGIN_S * 1000
        slot = (rel_ms % (WEEK_S * 1000)) // (SLOT_S * 1000)
        pw = self.w_power[slot, np.arange(G)[None, :]]
        noisy = pw * (1 + 0.02 * znoise(self.g_key[None, :], t_ms[:, None] // 1000, 7))
        power_mw = np.rint(np.clip(noisy, self.g_idle, self.g_tdp) * 1000).astype(np.int64)   # within idle..TDP
        return FleetState(
            t_ms=t_ms, containers=cs, present=present, sm_pct=sm, used_mib=used, ctx_mib=ctx, mod_mib=mod,
            data_mib=data, gpu_sm_pct=gsm, gpu_mem_util_pct=gmu,
            gpu_mem_used_bytes=(gused + DRIVER_OVERHEAD_MIB) * MiB, gpu_power_mw=power_mw,
            gpu_energy_mj=self.energy_mj(t_ms), gpu_slices=gslices,
        )


# ---------------------------------------------------------------- batch runs: pods that come and go

@functools.lru_cache(maxsize=4096)
def _day_label(day: int) -> str:
    return f"{dt.datetime.fromtimestamp(ORIGIN_S + day * 86400, dt.timezone.utc):%Y%m%d}"


def batch_run_name(pod: Pod, run: int) -> str:
    """A batch run's pod name: <pod>-<UTC date>-<job of the day>."""
    day, job = divmod(int(run), 64)
    return f"{pod.name}-{_day_label(day)}-{job}"


def batch_run_uid(cluster: str, pod: Pod, run: int) -> str:
    return stable_uuid("pod", cluster, pod.namespace, batch_run_name(pod, run))


def host_pid(node: str, pod_uid: str, container: str, proc: int) -> int:
    """Host PID of a container's process: stable, spread out, unlikely to collide on a node."""
    return 100_000 + (stable_hash("pid", node, pod_uid, container) % 400_000) * 8 + proc


def container_pid(proc: int) -> int:
    """The PID inside the container's namespace (what HAMi-core's slot.pid holds)."""
    return 7 + proc
