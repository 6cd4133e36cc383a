-- Claim the granted rows: each a compare-and-swap on (id, PENDING) to RUNNING under its permit,
-- for its taker (worker, lease, actor), with the task's context and dispatch, in claim order.
-- $1 ids, $2 permits, $3 takers, $4 lease seconds, $5 timeout seconds, $6 workers, $7 actors
-- (one per row), $8 the start time recorded (null: now; set when shared limits were checked).
-- A row that draws on shared limits records the units it takes (`held_units`: its draws on
-- limits of concurrency, each with its budget's key), and they are taken on their budgets' rows,
-- summed per budget, which locks those rows in (limit_name, key) order (waiting for them).
-- `over_limits` (the same on every row): whether one of those budgets is now held, has a rate,
-- or runs more than its concurrency, this statement's units included; returns not yet committed
-- when the statement began count as running.
with g as (
    select * from unnest($1::uuid[], $2::int[], $3::int[], $4::float8[], $5::float8[],
                         $6::text[], $7::text[]) as g(id, slot, taker, lease, timeout, worker, actor)
), upd as (
    update task_instance i
    set status = 'RUNNING', lease_token = gen_random_uuid(),
        lease_expires_at = clock_timestamp() + make_interval(secs => g.lease),
        deadline_at = clock_timestamp() + make_interval(secs => g.timeout),
        worker_id = g.worker, started_at = coalesce($8, now()), updated_at = now(),
        claimed_by = g.actor, run_slot = g.slot,
        held_units = case when i.limit_draws is not null then (
            select jsonb_agg(jsonb_build_object(
                'name', l.name,
                'key', case when (l.spec->>'per_key')::boolean then d->>'key' else '' end,
                'cost', coalesce((d->>'cost')::int, 1)))
            from jsonb_array_elements(i.limit_draws) d
            join limits l on l.name = d->>'name'
            where l.spec ? 'concurrency'
        ) end
    from g
    where i.id = g.id
      and /* fragment: sources of claim */ (i.status || '') = 'PENDING'
    returning i.*, g.taker, g.timeout
), taken as (
    insert into limit_state as s (limit_name, key, taken)
    select u->>'name', u->>'key', sum((u->>'cost')::bigint)
    from upd
    cross join lateral jsonb_array_elements(upd.held_units) u
    where upd.held_units is not null
    group by 1, 2
    order by 1, 2
    on conflict (limit_name, key) do update set taken = s.taken + excluded.taken
    returning s.limit_name, s.key, s.taken, s.held_until
), over as (
    select coalesce(bool_or(
        t.held_until > clock_timestamp()
        or l.spec ? 'rate'
        or t.taken - (select coalesce(sum(r.units), 0) from limit_returns r
                      where r.limit_name = t.limit_name and r.key = t.key)
           > (l.spec->>'concurrency')::bigint), false) as yes
    from taken t
    join limits l on l.name = t.limit_name
)
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state,
    taker, lease_token,
    t.context || coalesce(context_override, '{}'::jsonb) as context,
    t.dispatch,
    timeout::bigint as timeout_seconds,
    over.yes as over_limits
from upd
cross join over
cross join lateral (
    select coalesce(t.spec->'context', '{}'::jsonb) as context, t.spec->'dispatch' as dispatch
    from tasks t
    where t.id = upd.task_id
    offset 0
) t
order by priority, available_at, scheduled_at, id
