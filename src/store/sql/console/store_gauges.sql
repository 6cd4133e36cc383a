-- Store sampled gauges, replacing their previous samples.
-- $1 names, $2 values, $3 whether each value is exact.
insert into console_gauges (name, value, exact, sampled_at)
select n, v, e, now()
from unnest($1::text[], $2::int8[], $3::bool[]) as g(n, v, e)
on conflict (name) do update
set value = excluded.value,
    exact = excluded.exact,
    sampled_at = excluded.sampled_at
