//! The `kairos` binary: parse the command line, load configuration, hand over to `app`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use kairos::cli::{self, Conn, InstanceCommand, LimitCommand, TaskCommand};
use kairos::config::Config;
use kairos::domain::schedule::{CronSchedule, format_instant};

/// The daemon's allocator: every request builds and drops JSON values and buffers on many
/// threads, which mimalloc's thread-local free lists serve far more cheaply than glibc's malloc
/// (docs/decisions.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "kairos",
    version,
    about = "A scheduler daemon for AI-agent tasks"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: apply migrations, serve the API, run the loops (the default).
    Serve {
        /// Never change the schema: refuse to start, naming the missing migration, when the
        /// database is older than this release needs (as `migrate = false`).
        #[arg(long)]
        no_migrate: bool,
    },
    /// Apply pending database migrations and exit.
    Migrate,
    /// Evaluate cron expressions.
    Cron {
        #[command(subcommand)]
        command: CronCommand,
    },
    /// Manage tasks on a running daemon.
    Task {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: TaskCommand,
    },
    /// Inspect, retry and cancel instances on a running daemon.
    Instance {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: InstanceCommand,
    },
    /// Manage shared limits (budgets of concurrency and rate) on a running daemon.
    Limit {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: LimitCommand,
    },
    /// Print a shell completion script, e.g. `kairos completions bash > /etc/bash_completion.d/kairos`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
enum CronCommand {
    /// Print the next fire times of an expression, in UTC (RFC 3339).
    Next {
        /// 5 or 6 fields, or a macro such as @daily.
        expr: String,
        /// IANA time zone the expression is evaluated in.
        #[arg(long, default_value = "UTC")]
        timezone: String,
        /// How many fire times to print (1-1000).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
        count: u16,
        /// Start strictly after this RFC 3339 instant (default: now).
        #[arg(long)]
        from: Option<String>,
    },
}

/// Exit status of a command whose reader went away (`kairos … | head`): what a shell reports for
/// a process that SIGPIPE ended.
const BROKEN_PIPE_EXIT: i32 = 141;

/// For the client commands: when whoever reads standard output stops reading (`| head`), end
/// quietly with [`BROKEN_PIPE_EXIT`], as `cat` or `ls` do, instead of with a panic message.
/// `println!` panics on a broken pipe, and Rust ignores SIGPIPE, which would otherwise end the
/// process; this crate forbids the `unsafe` that restoring SIGPIPE would take.
fn quiet_on_broken_pipe() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(BROKEN_PIPE_EXIT);
        }
        report(info);
    }));
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve { no_migrate: false });
    if !matches!(command, Command::Serve { .. } | Command::Migrate) {
        quiet_on_broken_pipe();
    }
    match command {
        Command::Cron {
            command:
                CronCommand::Next {
                    expr,
                    timezone,
                    count,
                    from,
                },
        } => cron_next(&expr, &timezone, count, from.as_deref()),
        Command::Task { conn, command } => cli::run_task(conn, command),
        Command::Instance { conn, command } => cli::run_instance(conn, command),
        Command::Limit { conn, command } => cli::run_limit(conn, command),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "kairos", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        cmd @ (Command::Serve { .. } | Command::Migrate) => {
            let cfg = match Config::load() {
                Ok(mut c) => {
                    if let Command::Serve { no_migrate: true } = cmd {
                        c.migrate = false;
                    }
                    c
                }
                Err(e) => {
                    eprintln!("kairos: invalid configuration: {e}");
                    return ExitCode::from(2);
                }
            };
            kairos::telemetry::init_logging(cfg.log_format, &cfg.log_level);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("kairos: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let result = runtime.block_on(async {
                match cmd {
                    Command::Migrate => kairos::app::migrate(cfg).await,
                    _ => kairos::app::serve(cfg).await,
                }
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "kairos failed");
                    eprintln!("kairos: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn cron_next(expr: &str, timezone: &str, count: u16, from: Option<&str>) -> ExitCode {
    let schedule = match CronSchedule::parse(expr, timezone) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kairos: {e}");
            return ExitCode::from(2);
        }
    };
    let mut cursor = match from {
        None => chrono::Utc::now(),
        Some(f) => match kairos::domain::task::parse_timestamp(f) {
            Some(t) => t,
            None => {
                eprintln!(
                    "kairos: --from must be an RFC 3339 timestamp, e.g. 2026-11-29T08:30:00Z"
                );
                return ExitCode::from(2);
            }
        },
    };
    // An expression that never fires is refused here as by the API (openapi.yaml).
    if count > 0
        && let Err(e) = schedule.first_fire_after(cursor)
    {
        eprintln!("kairos: {}", e.message);
        return ExitCode::from(2);
    }
    for _ in 0..count {
        match schedule.next_after(cursor) {
            Some(t) => {
                println!("{}", format_instant(t));
                cursor = t;
            }
            None => break,
        }
    }
    ExitCode::SUCCESS
}
