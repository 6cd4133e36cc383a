-- Seconds since each agent's last claim, by agent id (the first 1,000 agents).
-- No parameters.
select agent_id, extract(epoch from now() - last_claim_at)::float8
from agent_claims
order by agent_id
limit 1000
