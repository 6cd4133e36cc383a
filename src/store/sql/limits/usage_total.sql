-- The units running on a limit, over all its budgets (taken by starts, less those returned),
-- and the database's now. $1 limit name.
select ((select coalesce(sum(taken), 0) from limit_state where limit_name = $1)
        - (select coalesce(sum(units), 0) from limit_returns where limit_name = $1))::bigint,
    now()
