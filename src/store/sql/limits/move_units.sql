-- Units held by running instances move to the budgets a changed limit keeps: every key to ''
-- when per_key is turned off, each instance's rendered key when it is turned on.
-- $1 limit name, $2 whether the limit is now per_key.
update limit_units u
set key = case
    when $2 then coalesce((
        select d->>'key'
        from task_instance i
        cross join lateral jsonb_array_elements(i.limit_draws) d
        where i.id = u.instance_id and d->>'name' = u.limit_name
        limit 1
    ), '')
    else ''
end
where u.limit_name = $1
