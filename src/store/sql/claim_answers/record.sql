-- Record that (agent, worker, claim_id) took these leases, kept until the leases have passed;
-- a claim_id used again after its answer ran out takes its place.
-- $1 agent id, $2 worker id, $3 claim_id, $4 instance ids, $5 lease tokens, $6 lease seconds.
insert into claim_answers
    (agent_id, worker_id, claim_id, instance_ids, lease_tokens, expires_at)
values ($1, $2, $3, $4, $5, clock_timestamp() + make_interval(secs => $6))
on conflict (agent_id, worker_id, claim_id) do update
    set instance_ids = excluded.instance_ids, lease_tokens = excluded.lease_tokens,
        created_at = excluded.created_at, expires_at = excluded.expires_at
