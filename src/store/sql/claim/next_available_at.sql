-- When the earliest PENDING instance of an agent becomes claimable, and the database's now: one
-- probe of the claim index per priority (its rows are ordered by priority first).
-- $1 agent id.
select (
    select min(m.at)
    from generate_series(0, 9) as p(n)
    cross join lateral (
        select available_at as at
        from task_instance
        where status = 'PENDING' and agent_id = $1 and priority = p.n
        order by available_at
        limit 1
    ) m
), now()
