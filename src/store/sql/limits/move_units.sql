-- The units running instances hold on a changed limit move to the budgets its new spec keeps:
-- every key to '' when per_key is turned off, each instance's rendered key when it is turned
-- on. (Their budgets are counted afresh next: `limits/count_units`.)
-- $1 limit name, $2 whether the limit is now per_key.
update task_instance i
set held_units = (
    select jsonb_agg(case
        when u->>'name' <> $1 then u
        when $2 then jsonb_set(u, '{key}', to_jsonb(coalesce((
            select d->>'key'
            from jsonb_array_elements(i.limit_draws) d
            where d->>'name' = $1
            limit 1
        ), '')))
        else jsonb_set(u, '{key}', '""')
    end)
    from jsonb_array_elements(i.held_units) u
)
where i.status = 'RUNNING'
  and i.held_units @> jsonb_build_array(jsonb_build_object('name', $1::text))
