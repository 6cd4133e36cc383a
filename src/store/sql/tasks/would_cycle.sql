-- Whether a task is on the upstream chain of another (followed to a bounded depth): an edge to
-- that upstream would close a cycle.
-- $1 the upstream task id, $2 the dependent task id, $3 the longest chain followed.
with recursive chain(id, depth) as (
    select $1::text, 0
    union all
    select t.upstream_task_id, c.depth + 1
    from tasks t
    join chain c on t.id = c.id
    where t.upstream_task_id is not null
      and c.depth < $3
)
select exists(select 1 from chain where id = $2)
