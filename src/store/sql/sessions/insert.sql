-- Start a console session, and end the sessions whose time is up.
-- $1 the session id's hash, $2 its proof, $3 how long it lasts (seconds).
with ended as (
    delete from console_sessions
    where expires_at <= now()
)
insert into console_sessions (id_hash, proof, expires_at)
values ($1, $2, now() + make_interval(secs => $3))
