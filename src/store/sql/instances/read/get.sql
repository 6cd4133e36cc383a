-- One instance, by id.
-- $1 instance id.
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state
from task_instance
where id = $1
