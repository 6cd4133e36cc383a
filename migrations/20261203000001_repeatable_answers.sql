-- Answers an agent can ask for again. Both columns and the table only add: replicas of the
-- previous release, which neither write nor read them, keep running beside this one.
--
-- 1. reported_lease_token: the lease under which the holder reported the attempt's outcome
--    (complete or fail). A report whose commit the agent never heard of (a cut connection, an
--    ambiguous COMMIT, a batch whose items landed in different transactions) is sent again
--    under the same token; it is answered as the first one was instead of 409. It is written
--    only by the holder's own report: a lease the reaper or an operator ended stays fenced.
alter table task_instance add column reported_lease_token uuid;

-- 2. claim_answers: what a claim carrying a client-chosen claim_id took, written in the claim's
--    own transaction, so the same claim_id from the same worker (a retry after a timeout, an
--    ambiguous COMMIT) is answered with the same instances and lease tokens instead of taking
--    more. Kept until the longest lease of the answer has passed; the pruner deletes the rest.
create table claim_answers (
    agent_id      text        not null,
    worker_id     text        not null,
    claim_id      text        not null check (length(claim_id) between 1 and 128),
    instance_ids  uuid[]      not null,
    lease_tokens  uuid[]      not null
        check (cardinality(lease_tokens) = cardinality(instance_ids)),
    created_at    timestamptz not null default now(),
    expires_at    timestamptz not null,
    primary key (agent_id, worker_id, claim_id)
);
-- The pruner's scan for answers whose leases have all passed.
create index claim_answers_expires_idx on claim_answers (expires_at);

-- 3. db_unreachable: spans during which a replica could not reach the database. A lease that
--    expired during one (or just after, before its holder could report again) was lost to
--    the outage, not to its agent: the reaper gives such attempts back without spending them
--    and without counting them toward the circuit breaker.
create table db_unreachable (
    id          bigint      generated always as identity primary key,
    node_id     text        not null,
    started_at  timestamptz not null,
    ended_at    timestamptz not null check (ended_at >= started_at)
);
-- The reaper's lookup: spans that end after a lease began.
create index db_unreachable_ended_idx on db_unreachable (ended_at);
