-- Record that an agent claimed now.
-- $1 agent id.
insert into agent_claims (agent_id, last_claim_at)
values ($1, now())
on conflict (agent_id) do update
    set last_claim_at = excluded.last_claim_at
