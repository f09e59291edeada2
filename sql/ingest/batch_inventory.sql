-- The GPUs of one batch merged into what the store already knows about them.
-- Inputs (Arrow, registered by ingest/writer.py prepare): batch_gpu (the batch's GPU rows,
-- strings as *_id), known_inventory (gpu_inventory's rows as the consumer holds them in
-- memory). Output: the merged gpu_inventory row of every GPU in the batch, which the
-- writer upserts and the batch's slice shares divide by (memory_total_bytes).
-- The latest sample wins, wherever it arrived from; a missing model or memory size never
-- overwrites a known one.
WITH b AS (
    SELECT gpu_uuid_id, arg_max(cluster_id, ts_ms) AS cluster_id, arg_max(node_id, ts_ms) AS node_id,
           arg_max(gpu_index, ts_ms) AS gpu_index, arg_max(model_id, ts_ms) AS model_id,
           arg_max(memory_total_bytes, ts_ms) AS memory_total_bytes,
           min(ts_ms) AS first_seen_ms, max(ts_ms) AS last_seen_ms
    FROM batch_gpu GROUP BY gpu_uuid_id
), m AS (
    SELECT b.*, k.cluster_id AS k_cluster_id, k.node_id AS k_node_id, k.gpu_index AS k_gpu_index,
           k.model_id AS k_model_id, k.memory_total_bytes AS k_memory_total_bytes,
           k.first_seen_ms AS k_first_seen_ms, k.last_seen_ms AS k_last_seen_ms,
           k.last_seen_ms IS NULL OR b.last_seen_ms >= k.last_seen_ms AS newer
    FROM b LEFT JOIN known_inventory k ON k.gpu_uuid_id = b.gpu_uuid_id
)
SELECT gpu_uuid_id,
       CASE WHEN newer THEN cluster_id ELSE k_cluster_id END AS cluster_id,
       CASE WHEN newer THEN node_id ELSE k_node_id END AS node_id,
       CASE WHEN newer THEN gpu_index ELSE k_gpu_index END AS gpu_index,
       coalesce(CASE WHEN newer THEN model_id END, k_model_id, model_id) AS model_id,
       coalesce(CASE WHEN newer THEN memory_total_bytes END, k_memory_total_bytes, memory_total_bytes) AS memory_total_bytes,
       least(first_seen_ms, k_first_seen_ms) AS first_seen_ms,
       greatest(last_seen_ms, k_last_seen_ms) AS last_seen_ms
FROM m
