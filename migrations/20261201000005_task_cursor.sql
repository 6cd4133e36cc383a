-- The trigger loop's cursor leaves the task row. Measured on version 4: with 100,000 tasks due
-- at one instant, moving a task's cursor cost about as much as inserting its window (80 µs
-- against 121 µs of statement time per task), because every move rewrote the whole task row
-- (about 1.1 kB with its spec, 2.5 kB of WAL right after a checkpoint) and an entry in each of
-- its indexes, and the loop locked that wide row to read it. The cursor now lives in a narrow
-- row of its own, which the loop locks and moves; it never writes a task row.
--
-- `paused` is a copy of tasks.paused, kept by the trigger below in the transaction that changes
-- it, so the due index can leave paused tasks out (a paused task with an old cursor would
-- otherwise be read by every pass). Every other column is the cursor's own.

create table task_cursor (
    task_id        text primary key references tasks (id) on delete cascade,
    -- The next window the loop materialises; null when the trigger has none (once, fired).
    next_fire_at   timestamptz,
    -- The newest window the loop wrote.
    last_window_at timestamptz,
    paused         boolean not null default false
);

insert into task_cursor (task_id, next_fire_at, last_window_at, paused)
select id, next_fire_at, last_window_at, paused from tasks;

create index task_cursor_due_idx on task_cursor (next_fire_at)
    where not paused and next_fire_at is not null;

drop index tasks_due_idx;
alter table tasks drop column next_fire_at, drop column last_window_at;

-- A new task gets its cursor row (no window yet); a pause or resume is copied to it.
create function task_cursor_follow_task() returns trigger language plpgsql as $$
begin
    insert into task_cursor (task_id, paused) values (new.id, new.paused)
    on conflict (task_id) do update set paused = excluded.paused
        where task_cursor.paused is distinct from excluded.paused;
    return null;
end
$$;

create trigger tasks_cursor_follow after insert or update of paused on tasks
    for each row execute function task_cursor_follow_task();
