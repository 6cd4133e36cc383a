-- In a fresh snapshot, per chosen task: whether it may still be claimed from (not paused, not
-- deleted, the claim's dispatch mode), its limit, its timeout and push lease, its RUNNING count
-- where permits alone cannot bound the claim (some RUNNING row holds a permit at or past the
-- limit), and which of the reserved permits no committed RUNNING row holds, ascending.
-- $1 task ids, $2 permits (one per reserved permit), $3 dispatch mode, $4 cap on the limit.
select c.task_id,
    coalesce(t.claimable, false) as claimable,
    coalesce(t.lim, 0) as lim,
    coalesce(t.timeout, 0) as timeout,
    coalesce(t.push_lease, 0) as push_lease,
    case
        when exists (select 1 from task_instance r
                     where r.task_id = c.task_id and r.status = 'RUNNING'
                       and r.run_slot >= coalesce(t.lim, 0))
        then (select count(*) from task_instance r
              where r.task_id = c.task_id and r.status = 'RUNNING')
        else 0
    end as running,
    array(
        select s from unnest(c.slots) as s
        where s < coalesce(t.lim, 0)
          and not exists (select 1 from task_instance r
                          where r.task_id = c.task_id and r.status = 'RUNNING' and r.run_slot = s)
        order by s
    ) as free
from (
    select task_id, array_agg(slot) as slots
    from unnest($1::text[], $2::int[]) as p(task_id, slot)
    group by task_id
) as c
left join lateral (
    select not t.paused and t.dispatch_mode = $3 as claimable,
        least(/* fragment: task concurrency_limit */ coalesce((t.spec->'execution'->>'concurrency_limit')::int, 1), $4) as lim,
        /* fragment: task timeout_seconds */ coalesce((t.spec->'execution'->>'timeout_seconds')::bigint, 600) as timeout,
        least(coalesce((t.spec->'dispatch'->>'timeout_seconds')::bigint,
                       /* fragment: default dispatch timeout_seconds */ 30),
              /* fragment: task timeout_seconds */ coalesce((t.spec->'execution'->>'timeout_seconds')::bigint, 600))
            + /* fragment: push lease margin */ 10 as push_lease
    from tasks t
    where t.id = c.task_id
    offset 0
) t on true
