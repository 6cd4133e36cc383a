-- Units taken by starts, from their draws: the unit's key is the draw's for a per_key limit and
-- '' otherwise; a draw on a limit without concurrency (a rate alone) takes none.
-- $1 instance ids, $2 limit names, $3 rendered keys, $4 costs (one per draw).
insert into limit_units (instance_id, limit_name, key, cost)
select d.id, d.name, case when (l.spec->>'per_key')::boolean then d.key else '' end, d.cost
from unnest($1::uuid[], $2::text[], $3::text[], $4::int[]) as d(id, name, key, cost)
join limits l on l.name = d.name
where l.spec ? 'concurrency'
on conflict (instance_id, limit_name) do update
set key = excluded.key, cost = excluded.cost
