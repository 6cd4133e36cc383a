//! `kairos-bench`: measures a real `kairos serve` process against a PostgreSQL and prints a
//! Markdown table (see BENCHMARKS.md for how to run it and the numbers of the last run).
//!
//! Each scenario gets a fresh database on the server `DATABASE_URL` points at, and a fresh
//! `kairos serve` child (the binary next to this one), so numbers include HTTP, the pool and
//! the real loops. `pgbench -N` on the same server is printed as the hardware ceiling.
#![forbid(unsafe_code)]

mod agents;
mod args;
mod claim;
mod console;
mod db;
mod footprint;
mod lag;
mod measure;
mod output;
mod pgbench;
mod push;
mod replicas;
mod server;
mod trigger;
mod workers;

use anyhow::{Context, Result, bail};
use clap::Parser;

use crate::args::Args;
use crate::claim::claim_complete;
use crate::console::console_pages;
use crate::footprint::{idle_cost, memory};
use crate::lag::fire_lag;
use crate::output::{Row, print_table, row};
use crate::pgbench::pgbench;
use crate::push::push;
use crate::replicas::{replicas_claim, replicas_trigger};
use crate::server::VIA_PGBOUNCER;
use crate::trigger::{trigger_staged, trigger_throughput};
use crate::workers::workers_drain;

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new().context("tokio runtime")?;
    rt.block_on(run(args))
}

const SCENARIOS: [&str; 10] = [
    "pgbench", "trigger", "claim", "workers", "lag", "push", "replicas", "idle", "memory",
    "console",
];

fn wants(args: &Args, name: &str) -> bool {
    args.only == "all" || args.only.split(',').any(|s| s.trim() == name)
}

async fn run(args: Args) -> Result<()> {
    kairos::outbound::install_crypto_provider();
    let base = std::env::var("DATABASE_URL")
        .context("DATABASE_URL must name the PostgreSQL to measure")?;
    let _ = VIA_PGBOUNCER.set(args.via_pgbouncer.clone());
    for name in args.only.split(',').map(str::trim) {
        if name != "all" && !SCENARIOS.contains(&name) {
            bail!(
                "unknown scenario {name:?} in --only (one of {}, or all)",
                SCENARIOS.join(", ")
            );
        }
    }
    for mode in &args.lag_modes {
        if mode != "batch" && mode != "single" {
            bail!("unknown --lag-modes entry {mode:?} (batch or single)");
        }
    }
    for mode in &args.claim_modes {
        if mode != "batch" && mode != "single" {
            bail!("unknown --claim-modes entry {mode:?} (batch or single)");
        }
    }
    for shape in &args.workers_shapes {
        if shape != "one-agent" && shape != "agents" {
            bail!("unknown --workers-shapes entry {shape:?} (one-agent or agents)");
        }
    }
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    if !(1..=1000).contains(&args.workers_limit) {
        bail!("--workers-limit must be from 1 to 1000");
    }
    if args.lag_minutes == 0 {
        bail!("--lag-minutes must be at least 1");
    }
    if args.replicas.contains(&0) {
        bail!("--replicas entries must be at least 1");
    }
    let mut rows: Vec<Row> = Vec::new();
    println!(
        "kairos-bench on {} cores; PostgreSQL at {}{}",
        num_cpus(),
        kairos::config::redact_database_url(&base),
        match &args.via_pgbouncer {
            Some(b) => format!(
                "; kairos through PgBouncer at {}",
                kairos::config::redact_database_url(b)
            ),
            None => String::new(),
        }
    );

    if wants(&args, "pgbench") {
        match pgbench(&base).await {
            Ok(tps) => rows.push(row(
                "pgbench -N ceiling (8 clients, 10 s)",
                format!("{tps:.0} TPS"),
                "",
                "one fsync'd commit per transaction",
            )),
            Err(e) => rows.push(row(
                "pgbench -N ceiling",
                "not measured",
                "",
                &format!("{e:#}"),
            )),
        }
    }
    if wants(&args, "trigger") {
        for &n in &args.trigger_tasks {
            rows.push(trigger_throughput(&base, n).await?);
            rows.push(trigger_staged(&base, n).await?);
        }
    }
    if wants(&args, "claim") {
        for &tasks in &args.claim_tasks {
            for mode in &args.claim_modes {
                let batched = mode == "batch";
                for &k in &args.agents {
                    for limits in &args.claim_limits {
                        rows.push(
                            claim_complete(
                                &base,
                                args.claim_instances,
                                tasks,
                                k,
                                args.claim_batch,
                                batched,
                                (limits == "shared").then_some(args.claim_limit_concurrency),
                            )
                            .await?,
                        );
                    }
                }
            }
        }
    }
    if wants(&args, "workers") {
        for shape in &args.workers_shapes {
            rows.push(
                workers_drain(
                    &base,
                    args.workers_instances,
                    args.workers,
                    args.workers_limit,
                    shape == "one-agent",
                )
                .await?,
            );
        }
    }
    if wants(&args, "lag") {
        for mode in &args.lag_modes {
            rows.push(
                fire_lag(
                    &base,
                    args.lag_tasks,
                    args.lag_minutes,
                    mode == "single",
                    args.lag_limit,
                    args.lag_jitter,
                )
                .await?,
            );
        }
    }
    if wants(&args, "push") {
        rows.push(
            push(
                &base,
                args.push_instances,
                args.push_in_flight,
                args.push_per_task,
            )
            .await?,
        );
    }
    if wants(&args, "replicas") {
        for &k in &args.replicas {
            rows.push(replicas_trigger(&base, args.replica_tasks, k).await?);
            rows.push(replicas_claim(&base, args.replica_instances, k).await?);
        }
    }
    if wants(&args, "idle") {
        rows.push(idle_cost(&base, args.idle_tasks, args.idle_seconds).await?);
    }
    if wants(&args, "memory") {
        rows.push(memory(&base, args.memory_tasks).await?);
    }
    if wants(&args, "console") {
        rows.extend(console_pages(&base, &args).await?);
    }

    print_table(&rows);
    Ok(())
}

fn num_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
