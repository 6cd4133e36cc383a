-- Units taken by starts. $1 instance ids, $2 limit names, $3 effective keys, $4 costs.
insert into limit_units (instance_id, limit_name, key, cost)
select * from unnest($1::uuid[], $2::text[], $3::text[], $4::int[])
on conflict (instance_id, limit_name) do update
set key = excluded.key, cost = excluded.cost
