-- Lock up to $1 paused tasks whose circuit cooldown has ended, skipping those another replica
-- holds, earliest first: each with its agent, trigger and execution as JSON text, and now.
-- $1 limit.
select id, agent_id,
    (spec->'trigger')::text as trigger,
    (spec->'execution')::text as execution,
    now() as next_fire_at
from tasks
where paused
  and resume_at is not null
  and resume_at <= now()
order by resume_at
limit $1
for update skip locked
