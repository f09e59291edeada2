"""What the node reads: NVML (the GPUs and their processes), HAMi-core's shared regions,
the kubelet's pods, DRA's ResourceClaims and ResourceSlices. One module per source; a new
source goes here, and exporter/assemble/ turns what they read into the Tick.
"""
