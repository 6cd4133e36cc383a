-- The tasks whose `execution.limits` name a limit, with the entry's cost and whether it has a
-- key. $1 limit name.
select t.id,
    coalesce((d->>'cost')::bigint, 1),
    coalesce(d->>'key', '') <> ''
from tasks t
cross join lateral jsonb_array_elements(coalesce(t.spec->'execution'->'limits', '[]'::jsonb)) d
where t.spec->'execution'->'limits' @> jsonb_build_array(jsonb_build_object('name', $1::text))
  and d->>'name' = $1
order by t.id
