-- Debounced manual runs (`execution.debounce`): a manual trigger without a window key that finds
-- the task's instance of its debounce key still waiting (PENDING, never claimed, not yet
-- available) moves it later and takes the trigger's context, instead of making another run.
--
-- `debounce_key` is set on the latest instance a (task, debounce key) made. The next trigger of
-- that key that finds it no longer waiting (available, claimed, finished) clears it there and
-- makes a new instance. So at most one row per (task, key) holds the key, which the unique index
-- guarantees across replicas: concurrent triggers meet on it (`insert … on conflict … do
-- update`) and coalesce into one instance. Its predicate leaves the status out on purpose: an
-- instance that leaves PENDING and comes back (a retry, a throttled attempt, a give-back, an
-- operator retry) can never collide with a newer instance of its key.
--
-- The column is nullable without a default (no table rewrite); rows written by the previous
-- release, which never writes it, are simply not debounced. The index is new and partial (no
-- existing row qualifies, and it stays as small as the number of debounce keys in use), but
-- building it reads the table once under a lock that holds writes back, since migrations run in
-- a transaction (no CONCURRENTLY). It cannot be left out or built later: the coalescing of
-- concurrent triggers is this uniqueness.
alter table task_instance add column debounce_key text;
create unique index task_instance_debounce_idx on task_instance (task_id, debounce_key)
    where debounce_key is not null;
