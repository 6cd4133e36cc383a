-- Lift the holds of a limit: one budget's, or all of them when no key is given.
-- $1 limit name, $2 rendered key (null: every key).
update limit_state s
set held_until = null, held_reason = null
from limits l
where l.name = $1
  and s.limit_name = l.name
  and s.held_until is not null
  and ($2::text is null
       or s.key = case when (l.spec->>'per_key')::boolean then $2 else '' end)
