-- no-transaction
-- The unique index behind debounced triggers (20261203000011_debounce.sql): at most one row per
-- (task, debounce key) holds the key, so concurrent triggers on any replica meet on it (`insert
-- … on conflict … do update`) and coalesce into one instance. The predicate leaves the status out
-- on purpose: an instance that leaves PENDING and comes back (a retry, a throttled attempt, a
-- give-back, an operator retry) can never collide with a newer instance of its key.
--
-- Built CONCURRENTLY, outside a transaction (the first line tells the migrator), so replicas of
-- the previous release keep writing task_instance while it is built: it waits for the
-- transactions open at its start and reads the table twice, holding no lock that stops writes.
-- A build that fails part way (a lost connection) leaves an INVALID index of this name and the
-- next `kairos migrate` stops with "relation task_instance_debounce_idx already exists": drop it
-- (`drop index concurrently task_instance_debounce_idx`) and migrate again. The file holds this
-- one statement: several statements sent at once run in one implicit transaction, which
-- CONCURRENTLY refuses.
create unique index concurrently task_instance_debounce_idx on task_instance (task_id, debounce_key)
    where debounce_key is not null;
