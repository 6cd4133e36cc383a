-- Take the migrations' session advisory lock if it is free, without waiting: true when taken.
-- $1 the lock key.
select pg_try_advisory_lock($1)
