-- One page of tasks in id order, each with its cursor's next window; a null filter keeps every
-- task.
-- $1 agent id, $2 agent ids (a token's scope), $3 paused, $4 trigger type, $5 only ids after
-- this one, $6 limit.
select /* fragment: task columns */ spec, paused, paused_reason,
    (select c.next_fire_at from task_cursor c where c.task_id = tasks.id) as next_fire_at,
    consecutive_failures, version, created_at, updated_at
from tasks
where ($1::text is null or agent_id = $1)
  and ($2::text[] is null or agent_id = any($2))
  and ($3::bool is null or paused = $3)
  and ($4::text is null or spec->'trigger'->>'type' = $4)
  and ($5::text is null or id > $5)
order by id
limit $6
