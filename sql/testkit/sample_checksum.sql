-- Count and order-independent checksum of the stored raw samples (crash test, bench).
SELECT
    (SELECT count(*) FROM raw_gpu) + (SELECT count(*) FROM raw_slice) AS samples,
    (SELECT coalesce(sum(hash(ts_ms, node, gpu_uuid, memory_used_bytes, energy_joules)), 0) FROM raw_gpu)
  + (SELECT coalesce(sum(hash(ts_ms, node, gpu_uuid, pod_uid, container, hami_memory_used_bytes, nvml_memory_used_bytes)), 0) FROM raw_slice)
    AS checksum;
