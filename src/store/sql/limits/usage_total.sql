-- The units running on a limit, over all its budgets, and the database's now. $1 limit name.
select (select coalesce(sum(cost), 0) from limit_units where limit_name = $1)::bigint, now()
