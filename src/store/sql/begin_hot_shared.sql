-- Begin a transaction of the hot path shared by many callers (a group commit): as begin_hot,
-- and a lock wait longer than 200 ms fails it (SQLSTATE 55P03) instead of holding every
-- caller. Sent whole as one simple query; through PgBouncer without its `begin;`.
-- No parameters.
begin;
set local enable_seqscan = off;
set local jit = off;
set local lock_timeout = 200
