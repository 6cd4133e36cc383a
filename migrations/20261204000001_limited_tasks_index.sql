-- The tasks of an agent that draw on shared limits (`execution.limits` not empty), found
-- without reading the agent's other tasks: a claim's head read asks whether one of them waits
-- on a full budget, and most agents have none. Expand only: an index, which replicas of the
-- previous release ignore.
create index tasks_agent_limited_idx on tasks (agent_id)
    where spec->'execution'->'limits' <> '[]'::jsonb;
