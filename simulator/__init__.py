"""The fleet simulator: scenario YAML -> HAMi region files, fake NVML, kubelet pods, Tick history."""
