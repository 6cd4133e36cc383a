-- The proof of a console session that has not ended. $1 the session id's hash.
select proof
from console_sessions
where id_hash = $1 and expires_at > now()
