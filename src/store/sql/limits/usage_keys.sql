-- A limit's budgets with units running or state, busiest first. $1 limit name, $2 how many.
with k as (
    select key from limit_state where limit_name = $1
    union
    select distinct key from limit_units where limit_name = $1
)
select k.key,
    (select coalesce(sum(u.cost), 0) from limit_units u
     where u.limit_name = $1 and u.key = k.key)::bigint as running,
    s.tat,
    case when s.held_until > now() then s.held_until end as held_until,
    case when s.held_until > now() then s.held_reason end as held_reason
from k
left join limit_state s on s.limit_name = $1 and s.key = k.key
order by running desc, s.held_until desc nulls last, s.tat desc nulls last, k.key
limit $2
