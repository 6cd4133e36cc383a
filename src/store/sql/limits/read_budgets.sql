-- The budgets of some draws as they are now: the limit's spec, the units running on the budget,
-- its rate's theoretical arrival time and hold, and the instant they were read at.
-- $1 limit names, $2 rendered keys (one per draw; the key is '' for a limit without per_key).
select d.name, d.key, l.spec,
    (select coalesce(sum(u.cost), 0) from limit_units u
     where u.limit_name = d.name and u.key = e.key)::bigint as running,
    s.tat, s.held_until, clock_timestamp() as now
from unnest($1::text[], $2::text[]) as d(name, key)
join limits l on l.name = d.name
cross join lateral (
    select case when (l.spec->>'per_key')::boolean then d.key else '' end as key
) e
left join limit_state s on s.limit_name = d.name and s.key = e.key
