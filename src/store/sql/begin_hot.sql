-- Begin a transaction of the hot path: the planner chooses no sequential scan where an index
-- can answer, and nothing is JIT-compiled; both end with the transaction. Sent whole as one
-- simple query; through PgBouncer without its `begin;` (the connection is in a transaction).
-- No parameters.
begin;
set local enable_seqscan = off;
set local jit = off
