-- Per chosen task, how many of its chosen rows may be taken (window order for queue tasks, in
-- this fresh snapshot), then that many free permits: permits no committed RUNNING row holds,
-- reserved with a transaction-scoped advisory lock no other claimer holds. CASE fixes the
-- order of the checks: a permit held by a committed row is never locked in passing. The
-- permits are generated in the select list, so they are produced one at a time and the LIMIT
-- stops them.
-- $1 chosen ids; per task: $2 task id, $3 rows chosen, $4 limit, $5 first permit tried.
with m as (
    select i.id, i.task_id, i.available_at, i.scheduled_at
    from task_instance i
    where i.id = any($1)
      and /* fragment: sources of claim */ (i.status || '') = 'PENDING'
), gated as (
    -- queue tasks: no older available PENDING row of the task is outside this claim (a
    -- concurrent claimer may hold it; taking a newer one would break window order).
    select m.task_id, count(*)::int as n
    from m
    join tasks t on t.id = m.task_id
    where (coalesce(t.spec->'execution'->>'overlap', '') <> 'queue'
           or not exists (
               select 1 from task_instance o
               where o.task_id = m.task_id and o.status = 'PENDING' and o.available_at <= now()
                 and (o.available_at, o.scheduled_at, o.id) < (m.available_at, m.scheduled_at, m.id)
                 and o.id <> all($1)))
    group by m.task_id
)
select c.task_id, p.slot
from unnest($2::text[], $3::int[], $4::int[], $5::int[]) as c(task_id, want, lim, off)
join gated g on g.task_id = c.task_id
cross join lateral (
    select (x.n + c.off) % c.lim as slot
    from (select generate_series(0, c.lim - 1) as n) as x
    where case
        when exists (select 1 from task_instance r
                     where r.task_id = c.task_id and r.status = 'RUNNING'
                       and r.run_slot = (x.n + c.off) % c.lim)
        then false
        else pg_try_advisory_xact_lock(hashtext(c.task_id), (x.n + c.off) % c.lim)
    end
    limit least(c.want, g.n)
) p
