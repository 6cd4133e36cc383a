//! The command line: every option, its default, and which scenario it shapes.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Benchmark kairos against a PostgreSQL (DATABASE_URL)")]
pub struct Args {
    /// Scenarios to run: pgbench, trigger, claim, workers, lag, push, replicas, idle, memory,
    /// console (comma-separated) or all.
    #[arg(long, default_value = "all")]
    pub only: String,
    /// Task counts for the trigger throughput scenario.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub trigger_tasks: Vec<i64>,
    /// Pending instances drained in the claim→complete scenario.
    #[arg(long, default_value_t = 50_000)]
    pub claim_instances: i64,
    /// Agent counts for the claim→complete scenario.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    pub agents: Vec<usize>,
    /// Task counts the claim→complete scenario spreads its pending instances over (each task
    /// has concurrency_limit 1000). Every (tasks, agents, mode) combination runs, modes being
    /// one POST /v1/completions per claimed batch and one concurrent complete per instance.
    #[arg(long, value_delimiter = ',', default_value = "100,1")]
    pub claim_tasks: Vec<i64>,
    /// Instances per claim (and per batch completion in batched mode).
    #[arg(long, default_value_t = 100)]
    pub claim_batch: i64,
    /// Shared limits in the claim scenario: `none`, and/or `shared` (every instance draws on one
    /// limit of concurrency 1000 and on a per_key limit of concurrency 50 over 100 keys); one
    /// row each.
    #[arg(long, value_delimiter = ',', default_value = "none")]
    pub claim_limits: Vec<String>,
    /// The concurrency of the `shared` limit of `--claim-limits shared`.
    #[arg(long, default_value_t = 1000)]
    pub claim_limit_concurrency: i64,
    /// In the fire-lag scenario, every task draws on one shared limit of this concurrency
    /// (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub lag_limit: i64,
    /// In the fire-lag scenario, every task's trigger has this `jitter_seconds` (0: none); the
    /// row then also reports the starts per second over the jitter.
    #[arg(long, default_value_t = 0)]
    pub lag_jitter: i64,
    /// How the claim→complete agents report: single (one concurrent complete request per
    /// instance) and/or batch (one POST /v1/completions per claim); one row each.
    #[arg(long, value_delimiter = ',', default_value = "single,batch")]
    pub claim_modes: Vec<String>,
    /// Pending instances drained in the workers scenario (one agent's many workers against as
    /// many agents of one worker each).
    #[arg(long, default_value_t = 20_000)]
    pub workers_instances: i64,
    /// Long-polling workers in the workers scenario: all of one agent on one task, then one
    /// per agent, each agent with its own task.
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Which shapes the workers scenario runs: one-agent (every worker of one agent) and/or
    /// agents (one worker per agent); one row each.
    #[arg(long, value_delimiter = ',', default_value = "one-agent,agents")]
    pub workers_shapes: Vec<String>,
    /// `concurrency_limit` of the workers scenario's tasks (1-1000).
    #[arg(long, default_value_t = 1000)]
    pub workers_limit: i64,
    /// Tasks on the `0 * * * * *` cron (second 0 of every minute) in the fire-lag scenario.
    #[arg(long, default_value_t = 10_000)]
    pub lag_tasks: i64,
    /// Minute boundaries the fire-lag scenario measures.
    #[arg(long, default_value_t = 2)]
    pub lag_minutes: u32,
    /// How the fire-lag agents report: batch (one POST /v1/completions per claim) and/or
    /// single (one concurrent complete request per instance); one row each.
    #[arg(long, value_delimiter = ',', default_value = "batch,single")]
    pub lag_modes: Vec<String>,
    /// Due instances of the push scenario's one webhook task, pushed to a local receiver.
    #[arg(long, default_value_t = 5_000)]
    pub push_instances: i64,
    /// webhook_max_in_flight of the kairos server in the push scenario (default: the server's
    /// default).
    #[arg(long)]
    pub push_in_flight: Option<usize>,
    /// webhook_max_per_task of the kairos server in the push scenario (default: the server's
    /// default).
    #[arg(long)]
    pub push_per_task: Option<i64>,
    /// Replica counts (kairos serve processes on one database) for the replicas scenario.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub replicas: Vec<usize>,
    /// Tasks due at one instant in the replicas scenario's trigger part.
    #[arg(long, default_value_t = 20_000)]
    pub replica_tasks: i64,
    /// Pending instances (over 100 tasks, 16 agents, batched) in the replicas scenario's
    /// claim→complete part.
    #[arg(long, default_value_t = 20_000)]
    pub replica_instances: i64,
    /// Registered (never due) tasks in the idle-cost scenario.
    #[arg(long, default_value_t = 1_000_000)]
    pub idle_tasks: i64,
    /// Seconds the idle cost is measured over.
    #[arg(long, default_value_t = 20)]
    pub idle_seconds: u64,
    /// Registered tasks in the memory scenario.
    #[arg(long, default_value_t = 100_000)]
    pub memory_tasks: i64,
    /// Registered tasks in the console scenario.
    #[arg(long, default_value_t = 100_000)]
    pub console_tasks: i64,
    /// Instances (history) in the console scenario.
    #[arg(long, default_value_t = 10_000_000)]
    pub console_instances: i64,
    /// Requests per console page.
    #[arg(long, default_value_t = 20)]
    pub console_requests: usize,
    /// Keep the console scenario's seeded database under this name and reuse it on the next
    /// run (seeding 10M instances takes minutes); without it the database is dropped.
    #[arg(long)]
    pub console_keep_db: Option<String>,
    /// Run every `kairos serve` behind PgBouncer in transaction pooling mode: this URL names
    /// the PgBouncer in front of DATABASE_URL's server (its database part is replaced by each
    /// scenario's database), with `database_pooler = "pgbouncer"`; LISTEN, migrations and the
    /// bench's own connections stay on DATABASE_URL.
    #[arg(long)]
    pub via_pgbouncer: Option<String>,
}
