-- The database clock: the time the transaction started.
-- No parameters.
select now()
