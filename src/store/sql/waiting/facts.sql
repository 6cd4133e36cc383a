-- What holds one instance back: its limit draws, its task's pause and concurrency limit with
-- the task's RUNNING instances (the first five by start), its agent's last claim, how many due
-- PENDING instances of the agent are more urgent (at most 1,000 counted), and the time now.
-- $1 instance id.
select i.limit_draws as draws, t.paused, t.paused_reason, t.resume_at, t.dispatch_mode,
    /* fragment: task concurrency_limit */ coalesce((t.spec->'execution'->>'concurrency_limit')::int, 1)
        as task_limit,
    (select count(*)
     from task_instance r
     where r.task_id = i.task_id and r.status = 'RUNNING') as running,
    array(select r.id
          from task_instance r
          where r.task_id = i.task_id and r.status = 'RUNNING'
          order by r.started_at
          limit 5) as running_ids,
    (select a.last_claim_at from agent_claims a where a.agent_id = i.agent_id) as last_claim_at,
    (select count(*)
     from (select 1
           from task_instance u
           where u.status = 'PENDING' and u.agent_id = i.agent_id and u.priority < i.priority
             and u.available_at <= now()
           limit 1000) x) as more_urgent,
    now()
from task_instance i
left join tasks t on t.id = i.task_id
where i.id = $1
