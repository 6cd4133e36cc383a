-- Take the sampler's advisory lock for this transaction, unless another replica holds it.
-- $1 the lock key.
select pg_try_advisory_xact_lock($1)
