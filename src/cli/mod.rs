//! The operators' command line (`kairos task …`, `kairos instance …`, `kairos limit …`): a REST
//! client of a running daemon. It parses flags, calls the API and prints tables or the API's
//! JSON; it never opens the database. Exit codes: 0 done, 1 the API refused, 2 bad usage or an
//! unreachable daemon.
//!
//! One file per command family (`tasks`, `instances`, `limits`, and `apply` for files), each
//! with its subcommands, its calls and its tables; `output` holds what they share in printing,
//! `table` the aligned text, `client` the HTTP.

mod apply;
mod client;
mod instances;
mod limits;
mod output;
mod table;
mod tasks;

use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

pub use client::Error;
pub use instances::InstanceCommand;
pub use limits::LimitCommand;
pub use output::Output;
pub use tasks::TaskCommand;

use client::Client;

/// Where the daemon is and how to talk to it; shared by every client command.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// Base URL of the kairos API.
    #[arg(
        long,
        env = "KAIROS_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// Bearer token (not needed when the daemon runs open on loopback).
    #[arg(long, env = "KAIROS_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Output format: aligned tables for people, or the API's JSON for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

/// Runs a `task` command and turns its outcome into the exit code.
pub fn run_task(conn: Conn, cmd: TaskCommand) -> ExitCode {
    run(conn, |c, out| Box::pin(tasks::run(c, out, cmd)))
}

/// Runs an `instance` command and turns its outcome into the exit code.
pub fn run_instance(conn: Conn, cmd: InstanceCommand) -> ExitCode {
    run(conn, |c, out| Box::pin(instances::run(c, out, cmd)))
}

/// Runs a `limit` command and turns its outcome into the exit code.
pub fn run_limit(conn: Conn, cmd: LimitCommand) -> ExitCode {
    run(conn, |c, out| Box::pin(limits::run(c, out, cmd)))
}

type Fut<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + 'a>>;

fn run<F>(conn: Conn, f: F) -> ExitCode
where
    F: for<'a> FnOnce(&'a Client, Output) -> Fut<'a>,
{
    let result = Client::new(&conn.url, conn.token.clone()).and_then(|client| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Connection(format!("cannot start the async runtime: {e}")))?;
        runtime.block_on(f(&client, conn.output))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kairos: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The body of an action that takes an optional reason (pause, retry, cancel).
fn reason_body(reason: Option<String>) -> Value {
    match reason {
        Some(r) => json!({ "reason": r }),
        None => json!({}),
    }
}

/// Adds `key=v` to a query when `v` is given.
fn push(q: &mut Vec<(&'static str, String)>, key: &'static str, v: Option<impl ToString>) {
    if let Some(v) = v {
        q.push((key, v.to_string()));
    }
}

/// One page of a list (from `cursor`), or every page followed through `next_cursor` with `all`.
async fn list(
    client: &Client,
    path: &str,
    mut q: Vec<(&'static str, String)>,
    cursor: Option<String>,
    all: bool,
) -> Result<Value, Error> {
    if all {
        client.get_all(path, &q).await
    } else {
        push(&mut q, "cursor", cursor);
        client.get(path, &q).await
    }
}
