-- Record that the database was unreachable from a replica for an outage that just ended, by
-- the database clock.
-- $1 node id, $2 the outage's length in seconds.
insert into db_unreachable (node_id, started_at, ended_at)
values ($1, now() - make_interval(secs => $2), now())
