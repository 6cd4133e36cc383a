-- The operators' console reads sampled numbers, never counts over history at page time.
-- The stats sampler (one replica per pass, under an advisory lock) writes both tables.

-- Per-status instance counts and task counts as of the last sample. `exact` is false for
-- terminal statuses of a large table, which are estimated from the planner's statistics.
create table console_gauges (
    name       text primary key,
    value      bigint not null,
    exact      boolean not null default true,
    sampled_at timestamptz not null default now()
);

-- One row per minute of scheduled windows: how many windows fell in it, how they stand, and
-- the fire lag (created_at - scheduled_at of schedule windows) and start lag
-- (started_at - scheduled_at). A minute is re-sampled until it is 10 minutes old.
create table console_minutes (
    minute           timestamptz primary key,
    windows          integer not null,
    succeeded        integer not null,
    skipped          integer not null,
    failed           integer not null,
    dead             integer not null,
    open             integer not null,
    fire_lag_p50_ms  double precision,
    fire_lag_p99_ms  double precision,
    start_lag_p50_ms double precision,
    start_lag_p99_ms double precision,
    sampled_at       timestamptz not null default now()
);
