-- Delete up to $1 answers whose leases have all passed, the oldest first.
-- $1 most answers.
delete from claim_answers
where ctid in (
    select ctid
    from claim_answers
    where expires_at < now()
    order by expires_at
    limit $1
)
