-- Lock the cursors of up to $1 due, unpaused tasks, skipping those another replica holds, with
-- each task's agent, trigger and execution as JSON text (one primary-key lookup per task). With
-- $2: the tasks whose next window is after now and at or before $2 and that have no unfinished
-- instance (a first-row probe per status, each in the order of its task-keyed partial index).
-- $1 limit, $2 staged until (null: due now), $3 task ids passed over in this transaction.
with c as materialized (
    select task_id, next_fire_at
    from task_cursor
    where not paused
      and next_fire_at is not null
      and next_fire_at <= coalesce($2, now())
      and ($2::timestamptz is null or (
          next_fire_at > now()
          and not /* fragment: pending of task_cursor */ ((select true from task_instance q
              where q.task_id = task_cursor.task_id and q.status = 'PENDING' and (true)
              order by q.priority, q.available_at, q.scheduled_at, q.id limit 1) is not null)
          and (select true from task_instance r
              where r.task_id = task_cursor.task_id and r.status = 'RUNNING'
              order by r.run_slot limit 1) is null
          and (select true from task_instance r
              where r.task_id = task_cursor.task_id and r.status = 'FAILED'
              order by r.scheduled_at limit 1) is null
      ))
      and task_id <> all($3)
    order by next_fire_at
    limit $1
    for update skip locked
)
select c.task_id as id, t.agent_id, t.trigger, t.execution, c.next_fire_at
from c
cross join lateral (
    select agent_id,
        (spec->'trigger')::text as trigger,
        (spec->'execution')::text as execution
    from tasks t
    where t.id = c.task_id
    offset 0
) t
order by c.next_fire_at
