-- kairos schema, version 1.
--
-- tasks            the registry: one row per task definition, plus the trigger loop's cursor.
-- task_instance    one row per (task, window); UNIQUE (task_id, window_key) is the guarantee that
--                  a window is materialised once however many replicas run.
-- instance_events  one row per state transition, written in the same transaction as the change.
--
-- Instances keep no foreign key to tasks: deleting a task keeps its history (CONTRACT §5).

create table tasks (
    id                   text primary key
                         check (id ~ '^[a-z0-9][a-z0-9_.-]{0,127}$'),
    agent_id             text not null,
    -- The validated task definition with every default filled in (domain::task::TaskSpec).
    spec                 jsonb not null,
    trigger_type         text not null
                         check (trigger_type in ('cron', 'interval', 'once', 'after', 'manual')),
    -- For `after` tasks: the upstream task id (dependency edges, cycle checks).
    upstream_task_id     text,
    -- How instances reach the agent: agents claim them (poll) or kairos pushes them (webhook).
    dispatch_mode        text not null default 'poll' check (dispatch_mode in ('poll', 'webhook')),
    paused               boolean not null default false,
    paused_reason        text,
    paused_at            timestamptz,
    -- When an open circuit resumes on its own (circuit_breaker.cooldown_seconds); null otherwise.
    resume_at            timestamptz,
    -- The next window the trigger loop must materialise; null when the schedule has none.
    next_fire_at         timestamptz,
    -- The newest window the trigger loop materialised (or recorded as skipped).
    last_window_at       timestamptz,
    consecutive_failures integer not null default 0 check (consecutive_failures >= 0),
    version              bigint not null default 1 check (version >= 1),
    created_at           timestamptz not null default now(),
    updated_at           timestamptz not null default now(),
    check (paused or paused_reason is null)
);

-- The trigger loop's scan: due, unpaused tasks in fire order.
create index tasks_due_idx on tasks (next_fire_at) where not paused and next_fire_at is not null;
create index tasks_agent_idx on tasks (agent_id, id);
create index tasks_upstream_idx on tasks (upstream_task_id) where upstream_task_id is not null;
-- Circuit breakers whose cooldown ends.
create index tasks_resume_idx on tasks (resume_at) where paused and resume_at is not null;

create table task_instance (
    id                     uuid primary key,
    task_id                text not null,
    window_key             text not null check (length(window_key) between 1 and 256),
    scheduled_at           timestamptz not null,
    status                 text not null
                           check (status in ('PENDING', 'RUNNING', 'SUCCESS', 'FAILED',
                                             'DEAD', 'SKIPPED', 'CANCELLED')),
    source                 text not null
                           check (source in ('schedule', 'catchup', 'backfill', 'manual',
                                             'dependency', 'retry')),
    -- The agent the task belonged to when the window was created (claims filter on it).
    agent_id               text not null,
    attempt                integer not null default 1 check (attempt >= 1),
    max_attempts           integer not null check (max_attempts >= 1),
    -- When the instance may next be claimed (delayed runs, retry backoff).
    available_at           timestamptz not null,
    lease_token            uuid,
    lease_expires_at       timestamptz,
    worker_id              text,
    started_at             timestamptz,
    -- started_at + the task's timeout_seconds: past it the reaper fails the attempt (timeout).
    deadline_at            timestamptz,
    finished_at            timestamptz,
    -- A manual trigger's context, merged over the task's at claim time; null for scheduled windows.
    context_override       jsonb,
    result                 jsonb,
    error                  text,
    error_kind             text
                           check (error_kind in ('agent', 'timeout', 'lease_expired', 'dispatch',
                                                 'cancelled')),
    skip_reason            text,
    upstream_instance_id   uuid,
    upstream_result_digest text,
    created_at             timestamptz not null default now(),
    updated_at             timestamptz not null default now(),
    unique (task_id, window_key),
    -- A lease exists exactly while the instance runs: a fenced-out token cannot linger.
    check ((status = 'RUNNING') = (lease_token is not null)),
    check ((status = 'RUNNING') = (lease_expires_at is not null)),
    -- finished_at is set exactly on terminal states.
    check ((status in ('SUCCESS', 'DEAD', 'SKIPPED', 'CANCELLED')) = (finished_at is not null)),
    check (status <> 'SKIPPED' or skip_reason is not null),
    check (attempt <= max_attempts)
);

-- Claims: pending work of one agent, oldest availability first, then window order.
create index task_instance_claim_idx on task_instance (agent_id, available_at, scheduled_at)
    where status = 'PENDING';
-- Retry scanner: failed instances whose backoff has passed.
create index task_instance_retry_idx on task_instance (available_at) where status = 'FAILED';
-- Timeout reaper: running instances by lease expiry and by start.
create index task_instance_lease_idx on task_instance (lease_expires_at) where status = 'RUNNING';
create index task_instance_deadline_idx on task_instance (deadline_at) where status = 'RUNNING';
-- Claims within one task: its pending windows in claim order.
create index task_instance_task_pending_idx
    on task_instance (task_id, available_at, scheduled_at, id) where status = 'PENDING';
-- Concurrency limits: a task's RUNNING instances.
create index task_instance_running_idx on task_instance (task_id) where status = 'RUNNING';
-- Overlap checks: a task's unfinished instances.
create index task_instance_unfinished_idx on task_instance (task_id, scheduled_at)
    where status in ('PENDING', 'RUNNING', 'FAILED');
-- Operators' queries: newest first, per task or per status.
create index task_instance_task_time_idx on task_instance (task_id, scheduled_at desc, id desc);
create index task_instance_status_time_idx on task_instance (status, scheduled_at desc, id desc);
create index task_instance_time_idx on task_instance (scheduled_at desc, id desc);
-- Retention: terminal instances by age.
create index task_instance_finished_idx on task_instance (finished_at)
    where finished_at is not null;

create table instance_events (
    id          bigserial,
    instance_id uuid not null references task_instance (id) on delete cascade,
    attempt     integer not null,
    -- null for the creating event.
    from_status text,
    to_status   text not null,
    -- Who moved it: `trigger:<node>`, `api`, `agent:<worker>`, `reaper:<node>`, `operator`, ...
    actor       text not null,
    reason      text,
    at          timestamptz not null default now(),
    -- One index serves both identity and an instance's history in order.
    primary key (instance_id, id)
);

-- The notification outbox: one row per (event, destination URL), written in the same
-- transaction as the transition that causes the event, delivered at least once by the notifier.
create table outbox (
    id               uuid primary key,
    -- The event; every delivery of it (and every retry) carries the same id for de-duplication.
    event_id         uuid not null,
    kind             text not null,
    task_id          text not null,
    instance_id      uuid,
    url              text not null,
    -- notify.secret of the task when the event happened; signs the delivery.
    secret           text,
    payload          jsonb not null,
    attempts         integer not null default 0 check (attempts >= 0),
    -- When the notifier may next try (also pushed forward while a delivery is in flight).
    next_attempt_at  timestamptz not null default now(),
    created_at       timestamptz not null default now(),
    delivered_at     timestamptz,
    undeliverable_at timestamptz,
    last_error       text,
    check (delivered_at is null or undeliverable_at is null)
);

create index outbox_due_idx on outbox (next_attempt_at)
    where delivered_at is null and undeliverable_at is null;
create index outbox_event_idx on outbox (event_id);
-- Retention: settled deliveries by age.
create index outbox_settled_idx on outbox ((coalesce(delivered_at, undeliverable_at)))
    where delivered_at is not null or undeliverable_at is not null;
