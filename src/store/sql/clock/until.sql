-- Seconds from the current time (clock_timestamp, not the transaction's) until an instant,
-- zero once it has come.
-- $1 the instant.
select greatest(0, extract(epoch from ($1 - clock_timestamp())))::float8
