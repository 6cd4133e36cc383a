-- Shared limits: budgets of concurrency and rate that tasks of any agent draw on
-- (`execution.limits`). Expand only: new tables, a nullable column and triggers that fire for
-- rows of the new column only, so replicas of the previous release keep working beside this one
-- (they never write limit_draws, and their claims ignore limits, as they always did).

-- A limit as declared: `spec` is {"concurrency"?, "rate"? {count, per_seconds, burst}, "per_key"}
-- with every default filled in (domain::limit::LimitSpec).
create table limits (
    name       text primary key check (name ~ '^[a-z0-9][a-z0-9_.-]{0,127}$'),
    spec       jsonb not null,
    version    bigint not null default 1 check (version >= 1),
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

-- The state of one budget: a limit's only budget (key '') or one key of a per_key limit. Claims
-- lock these rows (in (limit_name, key) order) to admit starts, so admissions of one budget are
-- serialised across replicas. `tat` is the rate's theoretical arrival time (GCRA): null until the
-- first start. `held_until`: nothing starts on this budget before it (a 429 hold, an operator).
create table limit_state (
    limit_name  text not null references limits (name) on delete cascade,
    key         text not null,
    tat         timestamptz,
    held_until  timestamptz,
    held_reason text,
    primary key (limit_name, key)
);

-- Units held by RUNNING instances: one row per (instance, limit) while the instance runs,
-- written by the claim that made it RUNNING, deleted by the trigger below when it leaves
-- RUNNING by any path (complete, fail, reap, cancel, give-back, delete). The concurrency in use
-- of a budget is the sum of its rows' cost.
create table limit_units (
    instance_id uuid not null,
    limit_name  text not null,
    key         text not null,
    cost        integer not null check (cost >= 1),
    primary key (instance_id, limit_name)
);
create index limit_units_budget_idx on limit_units (limit_name, key) include (cost);

-- The budgets an instance draws on, rendered when the instance is created (or when its task's
-- limits change while it waits): [{"name", "key", "cost"}], key '' when the entry has none.
-- Null when its task draws on no limit: such rows cost the claim nothing.
alter table task_instance add column limit_draws jsonb;

create function kairos_release_limit_units() returns trigger
language plpgsql as $$
begin
    delete from limit_units where instance_id = old.id;
    return null;
end
$$;

create trigger task_instance_release_limit_units
    after update of status on task_instance
    for each row
    when (old.status = 'RUNNING' and new.status <> 'RUNNING' and old.limit_draws is not null)
    execute function kairos_release_limit_units();

create trigger task_instance_release_limit_units_on_delete
    after delete on task_instance
    for each row
    when (old.status = 'RUNNING' and old.limit_draws is not null)
    execute function kairos_release_limit_units();

-- A task's `execution.limits` rendered for one instance: each entry's key template with
-- {{task_id}}, {{agent_id}} and {{params.<field>[.<field>…]}} (of the effective context: the
-- task's context with the instance's context merged over it) replaced by their values; a
-- missing parameter renders empty, a non-string one as its JSON text. Null when `lims` is empty.
create function kairos_render_limit_draws(lims jsonb, task_id text, agent_id text, ctx jsonb)
returns jsonb
language plpgsql immutable as $$
declare
    draws jsonb := '[]'::jsonb;
    entry jsonb;
    k text;
    m text[];
begin
    if lims is null or jsonb_typeof(lims) <> 'array' or jsonb_array_length(lims) = 0 then
        return null;
    end if;
    for entry in select value from jsonb_array_elements(lims) loop
        k := coalesce(entry->>'key', '');
        k := replace(replace(k, '{{task_id}}', task_id), '{{agent_id}}', agent_id);
        for m in select regexp_matches(k, '\{\{params\.([A-Za-z0-9_.-]+)\}\}', 'g') loop
            k := replace(k, '{{params.' || m[1] || '}}',
                         coalesce(ctx #>> (array['params'] || string_to_array(m[1], '.')), ''));
        end loop;
        draws := draws || jsonb_build_array(jsonb_build_object(
            'name', entry->>'name', 'key', k, 'cost', coalesce((entry->>'cost')::int, 1)));
    end loop;
    return draws;
end
$$;

-- When each agent was last seen claiming (recorded at most every few seconds per replica): an
-- instance's `waiting_on` says `no_agent` when its agent has been absent too long.
create table agent_claims (
    agent_id      text primary key,
    last_claim_at timestamptz not null
);
