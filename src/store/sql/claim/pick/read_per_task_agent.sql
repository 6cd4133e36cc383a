-- Per task of an agent's poll tasks: its oldest available PENDING rows (locked, skipping rows other
-- claimers hold, passing over rows whose budgets have no room now), at most its room and at
-- most a share (by default the claim divided evenly over the tasks that have work, rounded
-- up). The eligible tasks drive the look, whatever the planner thinks of the table's size.
-- Rows that other rounds of the agent chose and have not committed are passed over (as in the
-- head read). $1 agent id (null: any), $2 cap on a task's limit, $3 the claim's size, $4 the
-- share (null: the even share), $5 rows chosen by the agent's other rounds in flight.
with blocked as materialized (
    /* fragment: blocked budgets */ select l.name,
        case when (l.spec->>'per_key')::boolean then b.key end as key
    from limits l
    cross join lateral (
        select s.key
        from limit_state s
        where s.limit_name = l.name
          and (s.held_until > now()
               or (l.spec ? 'rate' and s.tat > now() + make_interval(secs =>
                   (l.spec->'rate'->>'burst')::float8 * (l.spec->'rate'->>'per_seconds')::float8
                   / (l.spec->'rate'->>'count')::float8)))
        union
        select u.key
        from limit_units u
        where u.limit_name = l.name and l.spec ? 'concurrency'
        group by u.key
        having sum(u.cost) >= (l.spec->>'concurrency')::bigint
    ) b
), eligible as materialized (
    select t.id,
        least(/* fragment: task concurrency_limit */ coalesce((t.spec->'execution'->>'concurrency_limit')::int, 1), $2) as lim
    from tasks t
    where t.agent_id = $1 and t.dispatch_mode = 'poll' and not t.paused
      -- A task drawing on a budget without keys that has no room: every waiting row of a task
      -- draws on its limits (rendered afresh whenever they change), so none of its rows could
      -- start now, and none is read (a full budget must not make each claim read the backlog).
      -- A task that draws on no limit never reads the budgets.
      and /* fragment: not blocked t */ (coalesce(t.spec->'execution'->'limits', '[]'::jsonb) = '[]'::jsonb
           or not exists (select 1 from blocked b
                          where b.key is null
                            and t.spec->'execution'->'limits'
                                @> jsonb_build_array(jsonb_build_object('name', b.name))))
), busy as (
    select e.id, e.lim
    from eligible e
    where ((select true from task_instance q
            where q.task_id = e.id and q.status = 'PENDING'
              and (q.available_at <= now() and ($1::text is null or q.agent_id = $1))
            order by q.priority, q.available_at, q.scheduled_at, q.id
            limit 1) is not null)
), room as (
    select b.id, b.lim,
        b.lim - (select count(*) from task_instance r
                 where r.task_id = b.id and r.status = 'RUNNING') as room
    from busy b
), fair as (
    select coalesce($4::bigint,
                    ($3::bigint + greatest(count(*), 1) - 1) / greatest(count(*), 1)) as share
    from room
    where room > 0
)
select c.id, c.task_id, room.room, room.lim, c.limit_draws as draws, c.priority
from room
cross join fair
cross join lateral (
    select i.id, i.task_id, i.priority, i.available_at, i.scheduled_at, i.limit_draws
    from task_instance i
    where i.task_id = room.id
      and /* fragment: sources of claim */ i.status = 'PENDING'
      and i.available_at <= now()
      and ($1::text is null or i.agent_id = $1)
      and i.id not in (select unnest($5::uuid[]))
      and /* fragment: not blocked i */ (i.limit_draws is null
           or not exists (select 1 from blocked)
           or not exists (
               select 1 from jsonb_array_elements(i.limit_draws) d
               join blocked b on b.name = d->>'name' and (b.key is null or b.key = d->>'key')))
    order by i.priority, i.available_at, i.scheduled_at, i.id
    limit least(room.room, fair.share, $3)
    for update skip locked
) c
where room.room > 0
order by c.priority, c.available_at, c.scheduled_at, c.id
