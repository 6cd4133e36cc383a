-- The head of an agent's work: its oldest available PENDING rows (locked, skipping rows other
-- claimers hold), passing over rows that draw on a budget with no room now ("blocked": held,
-- its rate spent, or its concurrency units all taken). Each task's limit and RUNNING count are
-- read once, on its first head row, by a lookup per row: the work grows with the head,
-- whatever the planner thinks of its size. When a task of the agent draws on a budget without
-- keys that has no room, the head is not read at all: that task's waiting rows may fill the
-- head's order, and reading past them costs the whole backlog waiting on the budget. The
-- answer is then one row with `handover` true and the rest null: the per-task read, which
-- passes over such a task whole, takes over. With no head row, one row of nulls.
-- Rows that other rounds of the agent chose and have not committed are passed over, not
-- locked: a row one of them makes RUNNING after this read's snapshot would be locked in its new
-- version (and then left out), and its completion would wait for this claim's commit.
-- $1 agent id, $2 how many rows, $3 rows chosen by the agent's other rounds in flight.
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
), handover as materialized (
    -- In this order, each asked only when the one before says yes: whether the agent has a
    -- task that draws on limits (tasks_agent_limited_idx, one row), whether a budget without
    -- keys has no room, and only then whether one of those tasks draws on such a budget.
    select exists (select 1 from tasks t
                   where t.agent_id = $1 and t.spec->'execution'->'limits' <> '[]'::jsonb)
       and exists (select 1 from blocked b where b.key is null)
       and exists (
        select 1 from tasks t
        where t.agent_id = $1 and t.spec->'execution'->'limits' <> '[]'::jsonb
          and t.dispatch_mode = 'poll' and not t.paused
          and not /* fragment: not blocked t */ (coalesce(t.spec->'execution'->'limits', '[]'::jsonb) = '[]'::jsonb
           or not exists (select 1 from blocked b
                          where b.key is null
                            and t.spec->'execution'->'limits'
                                @> jsonb_build_array(jsonb_build_object('name', b.name))))
    ) as yes
), head as (
    select i.id, i.task_id, i.priority, i.available_at, i.scheduled_at, i.limit_draws
    from task_instance i
    where not (select yes from handover)
      and /* fragment: sources of claim */ i.status = 'PENDING'
      and i.agent_id = $1
      and i.available_at <= now()
      and i.id not in (select unnest($3::uuid[]))
      and /* fragment: not blocked i */ (i.limit_draws is null
           or not exists (select 1 from blocked)
           or not exists (
               select 1 from jsonb_array_elements(i.limit_draws) d
               join blocked b on b.name = d->>'name' and (b.key is null or b.key = d->>'key')))
    order by i.priority, i.available_at, i.scheduled_at, i.id
    limit $2
    for update skip locked
), h as (
    select head.*, row_number() over (partition by head.task_id) = 1 as first
    from head
)
select h.id, h.task_id, h.first, r.room, r.lim, h.limit_draws as draws, h.priority,
    o.yes as handover
from handover o
left join h on true
left join lateral (
    select l.lim,
        l.lim - (select count(*) from task_instance r
                 where r.task_id = h.task_id and r.status = 'RUNNING') as room
    from (
        select /* fragment: task concurrency_limit */ coalesce((t.spec->'execution'->>'concurrency_limit')::int, 1) as lim
        from tasks t
        where t.id = h.task_id and not t.paused and t.dispatch_mode = 'poll'
        offset 0
    ) l
    where h.first
) r on true
order by h.priority, h.available_at, h.scheduled_at, h.id
