-- Take the dependency lock for this transaction, so that two concurrent changes cannot each add
-- half of a dependency cycle.
-- No parameters.
select pg_advisory_xact_lock(hashtext('kairos:dependencies'))
