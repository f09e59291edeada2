"""The critical Xid class: NVIDIA driver Xid codes after which a GPU's work is lost or its
results cannot be trusted until the GPU is reset (NVIDIA's Xid catalog, resolution bucket
RESET_GPU or worse; docs/health.md). The exporter marks them in the Tick's
`xid_critical_code`, the simulator's history does the same, the bill counts them as degraded.
"""
from __future__ import annotations

CRITICAL_XIDS: dict[int, str] = {
    48: "double-bit (uncorrectable) ECC error",
    63: "row remapping / page retirement recorded: reset to apply it",
    64: "row remapping / page retirement failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error: the application on that memory was stopped",
    95: "uncontained ECC error: every application on the GPU is affected",
    119: "GSP RPC timeout",
    120: "GSP error",
}
