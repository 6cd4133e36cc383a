-- Per limit (at most 1,000): units held by RUNNING instances, and PENDING instances due now that
-- draw on it.
with w as (
    select d->>'name' as name, count(*) as n
    from task_instance i
    cross join lateral jsonb_array_elements(i.limit_draws) d
    where i.status = 'PENDING'
      and i.limit_draws is not null
      and i.available_at <= now()
      and exists (select 1 from limits)
    group by 1
)
select l.name,
    (select coalesce(sum(u.cost), 0) from limit_units u where u.limit_name = l.name)::bigint
        as in_use,
    coalesce(w.n, 0)::bigint as waiting
from limits l
left join w on w.name = l.name
order by l.name
limit 1000
