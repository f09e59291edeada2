"""The last Tick on /metrics: the family catalogue, the collectors, the text
exposition, and HAMi vGPUmonitor's own families.
"""
