-- Console sessions. A console login keeps a random session id in the browser's cookie, never the
-- API token, and the server keeps one row per session: logging out deletes it, so a copy of the
-- cookie stops working at once, and a session ends 12 hours after its login in any case.
-- `id_hash` is the SHA-256 of the session id, `proof` an HMAC of the session id keyed by the
-- SHA-256 of the token it logged in with: a request's session counts only while that token is
-- still configured, and the table holds nothing a token could be guessed back from without the
-- cookie. Expand only: a new table, which replicas of the previous release never read (their
-- console sessions keep the token in the cookie, and log in again on this release).
create table console_sessions (
    id_hash    bytea primary key check (length(id_hash) = 32),
    proof      bytea not null check (length(proof) = 32),
    expires_at timestamptz not null
);
create index console_sessions_expires_idx on console_sessions (expires_at);
