-- Shared limits count the units in use in counters. Each RUNNING instance that draws on a limit
-- of concurrency carries the units it took when it started (`held_units`): the claim that makes
-- it RUNNING adds them to their budget's `taken`, and a statement trigger on task_instance adds
-- them to the budget's `limit_returns` when the row leaves RUNNING by any path (complete, fail,
-- reap, cancel, give-back, delete): one upsert per statement for all its rows. The units in use of a budget are its `taken` less
-- its returns. Starts and returns write different rows: a claim locks the budget's row to admit
-- starts, and a completion never waits for it. This replaces `limit_units` (a row per unit,
-- inserted by the claim and deleted by a row trigger: its writes, deletes and sums were a third
-- of a limited drain's database time). No release before this one had limits, so nothing else
-- reads the table this drops.

-- Units taken by starts on a budget (since it was last counted afresh).
alter table limit_state add column taken bigint not null default 0;

-- Units given back to a budget by instances leaving RUNNING, in a few rows per budget (`shard`:
-- the returning session's), so that returns of many sessions at once rarely wait for each other.
create table limit_returns (
    limit_name text not null references limits (name) on delete cascade,
    key        text not null,
    shard      integer not null,
    units      bigint not null,
    primary key (limit_name, key, shard)
);

-- The units an instance took when it last started: [{"name", "key", "cost"}], the key the
-- budget's ('' for a limit without per_key), only limits that have a concurrency. Written by
-- the claim that makes the row RUNNING.
alter table task_instance add column held_units jsonb;

-- Units held now move to the new bookkeeping.
update task_instance i
set held_units = u.units
from (
    select instance_id,
        jsonb_agg(jsonb_build_object('name', limit_name, 'key', key, 'cost', cost)
                  order by limit_name) as units
    from limit_units
    group by instance_id
) u
where i.id = u.instance_id and i.status = 'RUNNING';

insert into limit_state (limit_name, key, taken)
select u.limit_name, u.key, sum(u.cost)
from limit_units u
join task_instance i on i.id = u.instance_id and i.status = 'RUNNING'
join limits l on l.name = u.limit_name
group by u.limit_name, u.key
on conflict (limit_name, key) do update set taken = excluded.taken;

drop trigger task_instance_release_limit_units on task_instance;
drop trigger task_instance_release_limit_units_on_delete on task_instance;
drop function kairos_release_limit_units();
drop table limit_units;

-- The units of the rows a statement moves out of RUNNING (or deletes while RUNNING) are
-- returned on their budgets' return rows of this session's shard, summed per budget, written in
-- (limit_name, key) order; units of a limit that no longer exists are dropped. (Units are taken
-- by the claim's statement itself, the only one that makes rows RUNNING.) A statement that moves
-- no row holding units costs a scan of its transition table.
create function kairos_return_limit_units_on_update() returns trigger
language plpgsql as $$
begin
    if exists (select 1 from old_rows where status = 'RUNNING' and held_units is not null) then
        insert into limit_returns as r (limit_name, key, shard, units)
        select u->>'name', u->>'key', pg_backend_pid() % 8, sum((u->>'cost')::bigint)
        from old_rows o
        join new_rows n on n.id = o.id
        cross join lateral jsonb_array_elements(o.held_units) u
        join limits l on l.name = u->>'name'
        where o.status = 'RUNNING' and n.status <> 'RUNNING' and o.held_units is not null
        group by 1, 2
        order by 1, 2
        on conflict (limit_name, key, shard) do update set units = r.units + excluded.units;
    end if;
    return null;
end
$$;

create function kairos_return_limit_units_on_delete() returns trigger
language plpgsql as $$
begin
    insert into limit_returns as r (limit_name, key, shard, units)
    select u->>'name', u->>'key', pg_backend_pid() % 8, sum((u->>'cost')::bigint)
    from old_rows o
    cross join lateral jsonb_array_elements(o.held_units) u
    join limits l on l.name = u->>'name'
    where o.status = 'RUNNING' and o.held_units is not null
    group by 1, 2
    order by 1, 2
    on conflict (limit_name, key, shard) do update set units = r.units + excluded.units;
    return null;
end
$$;

create trigger task_instance_return_limit_units
    after update on task_instance
    referencing old table as old_rows new table as new_rows
    for each statement
    execute function kairos_return_limit_units_on_update();

create trigger task_instance_return_limit_units_on_delete
    after delete on task_instance
    referencing old table as old_rows
    for each statement
    execute function kairos_return_limit_units_on_delete();
