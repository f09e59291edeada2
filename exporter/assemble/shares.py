"""A slice's shares of its GPU, from its readings: what /metrics and the Tick's consumers read.

Pure functions over SliceReading; the allocation share is the dominant one of memory and
cores (whole GPU = 1), the usage share the larger of memory and SM.
"""
from __future__ import annotations

from slicemeter.exporter.sources.pods import Grant
from slicemeter.tick import SliceReading


def clamp01(v: float | None) -> float | None:
    return None if v is None else min(1.0, max(0.0, v))


def core_limit_ratio(sm_limit_ratio: float | None) -> float | None:
    """A region's sm_limit as a core share: only 0 < limit < 1 is a limit (HAMi-core's watcher
    throttles nothing else), so 0 and 1.0 (100 %, written when there is no limit) are None."""
    return sm_limit_ratio if sm_limit_ratio is not None and 0.0 < sm_limit_ratio < 1.0 else None


def grant_cores_ratio(grant: Grant | None) -> float | None:
    """The grant's core share; 0.0 for a memory-only grant (gpucores 0), None without a grant."""
    return None if grant is None else min(grant.cores, 100) / 100


def allocation_share(s: SliceReading, gpu_memory_total: int | None) -> float | None:
    """Dominant share of the GPU the slice was granted (whole GPU = 1); a DRA slice's is the
    larger of its shares by memory and by cores (docs/dra.md)."""
    if s.alloc_mem_share_ratio is not None or s.alloc_cores_share_ratio is not None:
        return clamp01(larger(s.alloc_mem_share_ratio, s.alloc_cores_share_ratio))
    if s.whole_gpu:
        return 1.0
    mem = s.alloc_memory_bytes if s.alloc_memory_bytes is not None else s.hami_memory_limit_bytes
    cores = s.alloc_cores_ratio if s.alloc_cores_ratio is not None else core_limit_ratio(s.sm_limit_ratio)
    return clamp01(larger(mem / gpu_memory_total if mem is not None and gpu_memory_total else None, cores))


def usage_share(s: SliceReading, gpu_memory_total: int | None) -> float | None:
    """max(memory / GPU memory, SM share); memory is the larger of HAMi's and NVML's figures:
    a region can under-report its own use, NVML's driver-side figure bounds it from below."""
    mem = larger(s.hami_memory_used_bytes, s.nvml_memory_used_bytes)
    return clamp01(larger(mem / gpu_memory_total if mem is not None and gpu_memory_total else None, s.sm_util_ratio))


def memory_disagrees(hami: int | None, nvml: int | None, tol_bytes: int, tol_ratio: float) -> bool | None:
    if hami is None or nvml is None:
        return None
    return abs(hami - nvml) > max(tol_bytes, tol_ratio * max(hami, nvml))


def larger(a, b):
    """max of two figures where either may be unknown (None)."""
    return b if a is None else a if b is None else max(a, b)
