-- Create the missing budgets of some draws; a concurrent first insert waits for the other's
-- commit. The key is '' for a limit without per_key.
-- $1 limit names, $2 rendered keys (one per draw).
with d as (
    select distinct d.name,
        case when (l.spec->>'per_key')::boolean then d.key else '' end as key
    from unnest($1::text[], $2::text[]) as d(name, key)
    join limits l on l.name = d.name
)
insert into limit_state (limit_name, key)
select name, key from d order by name, key
on conflict do nothing
