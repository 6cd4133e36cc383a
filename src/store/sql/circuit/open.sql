-- Open the circuit of each unpaused task whose consecutive failed attempts reached its failure
-- threshold: pause it with the reason, and schedule the automatic resume when it has a cooldown.
-- $1 task ids.
update tasks t
set paused = true,
    paused_reason = 'circuit open: ' || consecutive_failures || ' consecutive failed attempts',
    paused_at = now(),
    resume_at = case when spec->'circuit_breaker'->>'cooldown_seconds' is not null
        then now() + make_interval(secs => (spec->'circuit_breaker'->>'cooldown_seconds')::float8)
    end,
    version = version + 1,
    updated_at = now()
where id = any($1)
  and not paused
  and consecutive_failures >= /* fragment: task failure_threshold */
      coalesce((t.spec->'circuit_breaker'->>'failure_threshold')::int, 5)
returning id, consecutive_failures, resume_at
