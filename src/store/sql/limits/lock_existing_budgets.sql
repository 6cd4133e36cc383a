-- Lock the budgets of some draws in (limit_name, key) order, waiting for them; how many budgets
-- the draws name, and how many of them exist (and are now locked).
-- $1 limit names, $2 rendered keys (one per draw).
with d as (
    select distinct d.name,
        case when (l.spec->>'per_key')::boolean then d.key else '' end as key
    from unnest($1::text[], $2::text[]) as d(name, key)
    join limits l on l.name = d.name
), locked as (
    select 1
    from limit_state s
    where (s.limit_name, s.key) in (select name, key from d)
    order by s.limit_name, s.key
    for update
)
select (select count(*) from d), (select count(*) from locked)
