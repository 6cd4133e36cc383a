-- A limit's budgets with their units running (taken by starts, less those returned) and state,
-- busiest first. $1 limit name, $2 how many.
select k.key, k.running, k.tat, k.held_until, k.held_reason
from (
    select s.key,
        (s.taken - (select coalesce(sum(r.units), 0) from limit_returns r
                    where r.limit_name = s.limit_name and r.key = s.key))::bigint as running,
        s.tat,
        case when s.held_until > now() then s.held_until end as held_until,
        case when s.held_until > now() then s.held_reason end as held_reason
    from limit_state s
    where s.limit_name = $1
) k
order by k.running desc, k.held_until desc nulls last, k.tat desc nulls last, k.key
limit $2
