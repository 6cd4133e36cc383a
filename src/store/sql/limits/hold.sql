-- Hold a budget until now + some seconds, never shortening a later hold; the reason of the
-- longest hold is kept. Returns the instant held until, and the instant this hold asked for
-- (earlier when a later hold was already in place). No row: no such limit.
-- $1 limit name, $2 rendered key, $3 seconds, $4 reason.
with asked as (
    select clock_timestamp() + make_interval(secs => $3) as at
)
insert into limit_state (limit_name, key, held_until, held_reason)
select l.name,
    case when (l.spec->>'per_key')::boolean then $2 else '' end,
    asked.at,
    $4
from limits l
cross join asked
where l.name = $1
on conflict (limit_name, key) do update
set held_until = greatest(limit_state.held_until, excluded.held_until),
    held_reason = case
        when limit_state.held_until is null or limit_state.held_until <= excluded.held_until
        then excluded.held_reason
        else limit_state.held_reason
    end
returning held_until, (select at from asked) as asked
