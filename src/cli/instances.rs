//! `kairos instance …`: list and show instances with their history, and the operator's retry
//! and cancel.

use clap::Subcommand;
use serde_json::Value;

use super::client::{Client, Error, segment};
use super::output::{Output, items_of, print_json, show_page};
use super::table::{print_table, text};
use super::{list, push, reason_body};

#[derive(Subcommand, Debug)]
pub enum InstanceCommand {
    /// List instances, newest window first.
    List {
        /// Only this task's instances.
        #[arg(long)]
        task: Option<String>,
        /// Only this agent's instances.
        #[arg(long)]
        agent: Option<String>,
        /// Comma-separated statuses, e.g. FAILED,DEAD.
        #[arg(long)]
        status: Option<String>,
        /// Only this window key.
        #[arg(long)]
        window: Option<String>,
        /// Only instances of this priority (0 most urgent, 9 least).
        #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9))]
        priority: Option<u8>,
        /// scheduled_at >= this RFC 3339 instant.
        #[arg(long)]
        from: Option<String>,
        /// scheduled_at < this RFC 3339 instant.
        #[arg(long)]
        to: Option<String>,
        /// Page size (1-500).
        #[arg(long)]
        limit: Option<u32>,
        /// Start at this page (a `next_cursor` from an earlier answer).
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Follow `next_cursor` and print every page.
        #[arg(long)]
        all: bool,
    },
    /// Show one instance with its history.
    Get { id: String },
    /// Show an instance's transitions, oldest first.
    Events { id: String },
    /// Operator retry: DEAD, FAILED, CANCELLED or SKIPPED back to PENDING.
    Retry {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Cancel a PENDING, RUNNING or FAILED instance.
    Cancel {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
}

fn instance_path(id: &str) -> String {
    format!("/v1/instances/{}", segment(id))
}

pub(super) async fn run(client: &Client, out: Output, cmd: InstanceCommand) -> Result<(), Error> {
    match cmd {
        InstanceCommand::List {
            task,
            agent,
            status,
            window,
            priority,
            from,
            to,
            limit,
            cursor,
            all,
        } => {
            let mut q = Vec::new();
            push(&mut q, "task_id", task);
            push(&mut q, "agent_id", agent);
            push(&mut q, "status", status);
            push(&mut q, "window_key", window);
            push(&mut q, "priority", priority);
            push(&mut q, "from", from);
            push(&mut q, "to", to);
            push(&mut q, "limit", limit);
            let page = list(client, "/v1/instances", q, cursor, all).await?;
            show_page(out, &page, print_instances);
        }
        InstanceCommand::Get { id } => {
            let i = client.get(&instance_path(&id), &[]).await?;
            if out == Output::Json {
                print_json(&i);
            } else {
                let fields = [
                    "id",
                    "task_id",
                    "agent_id",
                    "window_key",
                    "status",
                    "priority",
                    "source",
                    "attempt",
                    "max_attempts",
                    "scheduled_at",
                    "available_at",
                    "started_at",
                    "finished_at",
                    "worker_id",
                    "lease_expires_at",
                    "error_kind",
                    "error",
                    "skip_reason",
                    "result",
                ];
                let rows = fields
                    .iter()
                    .map(|f| vec![format!("{f}:"), text(&i[*f])])
                    .collect();
                print_table(&[], rows);
                let waiting = items_of(&i, "waiting_on");
                if !waiting.is_empty() {
                    println!();
                    print_waiting(waiting);
                }
                println!();
                print_events(items_of(&i, "events"));
            }
        }
        InstanceCommand::Events { id } => {
            let i = client.get(&instance_path(&id), &[]).await?;
            if out == Output::Json {
                print_json(&i["events"]);
            } else {
                print_events(items_of(&i, "events"));
            }
        }
        InstanceCommand::Retry { id, reason } => {
            operator_action(client, out, &id, "retry", reason).await?;
        }
        InstanceCommand::Cancel { id, reason } => {
            operator_action(client, out, &id, "cancel", reason).await?;
        }
    }
    Ok(())
}

/// `retry` and `cancel`: the same optional reason body, the instance as the answer.
async fn operator_action(
    client: &Client,
    out: Output,
    id: &str,
    verb: &str,
    reason: Option<String>,
) -> Result<(), Error> {
    let path = format!("{}/{verb}", instance_path(id));
    let i = client.post(&path, &reason_body(reason)).await?.body;
    if out == Output::Json {
        print_json(&i);
    } else {
        println!(
            "instance {id} is {} (attempt {}/{})",
            text(&i["status"]),
            text(&i["attempt"]),
            text(&i["max_attempts"])
        );
    }
    Ok(())
}

fn print_instances(list: &[Value]) {
    let rows = list
        .iter()
        .map(|i| {
            vec![
                text(&i["id"]),
                text(&i["task_id"]),
                text(&i["window_key"]),
                text(&i["status"]),
                text(&i["priority"]),
                format!("{}/{}", text(&i["attempt"]), text(&i["max_attempts"])),
                text(&i["scheduled_at"]),
            ]
        })
        .collect();
    print_table(
        &[
            "ID",
            "TASK",
            "WINDOW",
            "STATUS",
            "PRIORITY",
            "ATTEMPT",
            "SCHEDULED",
        ],
        rows,
    );
}

/// Why a PENDING or FAILED instance is not running now (`waiting_on`).
fn print_waiting(waiting: &[Value]) {
    let rows = waiting
        .iter()
        .map(|w| vec![text(&w["reason"]), text(&w["until"]), text(&w["detail"])])
        .collect();
    print_table(&["WAITING ON", "UNTIL", "DETAIL"], rows);
}

fn print_events(events: &[Value]) {
    let rows = events
        .iter()
        .map(|e| {
            vec![
                text(&e["at"]),
                text(&e["from"]),
                text(&e["to"]),
                text(&e["attempt"]),
                text(&e["actor"]),
                text(&e["reason"]),
            ]
        })
        .collect();
    print_table(&["AT", "FROM", "TO", "ATTEMPT", "ACTOR", "REASON"], rows);
}
