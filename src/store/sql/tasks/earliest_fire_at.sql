-- The earliest next window of any unpaused task, and the database's time.
-- No parameters.
select (
    select min(next_fire_at)
    from task_cursor
    where not paused
      and next_fire_at is not null
), now()
