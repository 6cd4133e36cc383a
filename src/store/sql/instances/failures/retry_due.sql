-- FAILED instances whose backoff has passed, the longest due first (skipping rows another
-- transaction holds), to PENDING with one more attempt, for the task's current agent, each
-- with its event.
-- $1 how many at most, $2 actor.
with due as (
    select id
    from task_instance
    where /* fragment: sources of retry due */ status = 'FAILED'
      and available_at <= now()
    order by available_at
    limit $1
    for update skip locked
), upd as (
    update task_instance i
    set status = 'PENDING', attempt = i.attempt + 1,
        updated_at = now(),
        agent_id = coalesce((select t.agent_id from tasks t where t.id = i.task_id), i.agent_id)
    from due
    where i.id = due.id
      and /* fragment: sources of retry due */ i.status = 'FAILED'
    returning i.id, i.task_id, i.window_key, i.agent_id, i.attempt
), ev as (
    insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason)
    select id, attempt, 'FAILED', 'PENDING', $2, 'retry: attempt ' || attempt
    from upd
)
select id, task_id, window_key, agent_id, attempt
from upd
