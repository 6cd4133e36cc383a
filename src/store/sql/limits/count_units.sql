-- Count a limit's units in use afresh, from the RUNNING instances that hold them: every budget
-- of the limit takes the sum of its holders' costs (none: 0), a budget is created for a key held
-- that has none yet, and the limit's returns are cleared. Run with returns held off
-- (`limits/lock_returns`) and the limit's budgets locked (`limits/lock_all_budgets`), so that
-- every change committed before is seen and none comes between. $1 limit name.
with held as (
    select u->>'key' as key, sum((u->>'cost')::bigint) as taken
    from task_instance i
    cross join lateral jsonb_array_elements(i.held_units) u
    where i.status = 'RUNNING'
      and i.held_units @> jsonb_build_array(jsonb_build_object('name', $1::text))
      and u->>'name' = $1
    group by 1
), k as (
    select key from limit_state where limit_name = $1
    union
    select key from held
), cleared as (
    delete from limit_returns where limit_name = $1
)
insert into limit_state as s (limit_name, key, taken)
select $1, k.key, coalesce(h.taken, 0)
from k
left join held h on h.key = k.key
order by k.key
on conflict (limit_name, key) do update set taken = excluded.taken
