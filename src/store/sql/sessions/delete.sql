-- End a console session (logging out). $1 the session id's hash.
delete from console_sessions
where id_hash = $1
