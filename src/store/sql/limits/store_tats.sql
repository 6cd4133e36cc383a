-- Store rate budgets' new theoretical arrival times (the rows are locked by the caller).
-- $1 limit names, $2 effective keys, $3 arrival times.
update limit_state s
set tat = d.tat
from unnest($1::text[], $2::text[], $3::timestamptz[]) as d(name, key, tat)
where s.limit_name = d.name and s.key = d.key
