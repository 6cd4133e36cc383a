-- Lock the budgets of some draws in (limit_name, key) order, waiting for them.
-- $1 limit names, $2 rendered keys (one per draw).
select 1
from limit_state s
where (s.limit_name, s.key) in (
    select d.name, case when (l.spec->>'per_key')::boolean then d.key else '' end
    from unnest($1::text[], $2::text[]) as d(name, key)
    join limits l on l.name = d.name
)
order by s.limit_name, s.key
for update
