//! Wiring: builds the pool, applies migrations, starts the HTTP server and the background loops
//! under one supervisor, and stops them in order (stop triggering, let in-flight requests finish,
//! exit). The only module that knows every other one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::batching::claim_rounds::{self, ClaimRounds};
use crate::batching::group_commit::{self, GroupCommit};
use crate::config::Config;
use crate::domain::access::Tokens;
use crate::http;
use crate::http::server::ServerLimits;
use crate::otel::Spans;
use crate::outbound::{self, AllowList};
use crate::services::Heartbeats;
use crate::services::db_watch::DbWatch;
use crate::services::notifier::{Notifier, NotifierConfig};
use crate::services::pruner::{Pruner, PrunerConfig};
use crate::services::retry_scanner::{RetryScanner, RetryScannerConfig};
use crate::services::span_exporter::{SpanExporter, SpanExporterConfig};
use crate::services::stats::StatsSampler;
use crate::services::timeout_reaper::{TimeoutReaper, TimeoutReaperConfig};
use crate::services::trigger_loop::{TriggerLoop, TriggerLoopConfig};
use crate::services::webhook_dispatcher::{WebhookDispatcher, WebhookDispatcherConfig};
use crate::services::work_signal::WorkSignal;
use crate::state::{AppState, ClaimSettings};
use crate::store;
use crate::store::DbSettings;
use crate::store::health::DbHealth;

/// What to run in one process.
#[derive(Debug, Clone)]
pub struct Options {
    pub node_id: String,
    pub max_body_bytes: usize,
    /// `None` leaves a loop out (tests that drive loops by hand).
    pub trigger: Option<TriggerLoopConfig>,
    pub retry_scanner: Option<RetryScannerConfig>,
    pub reaper: Option<TimeoutReaperConfig>,
    pub claims: ClaimSettings,
    /// Header-read timeout and connection cap of the HTTP server.
    pub server: ServerLimits,
    /// Longest a request may take (a long poll gets its wait on top).
    pub request_timeout: Duration,
    pub shutdown_grace: Duration,
    /// After the loops stop and before the listener closes: new claims answer 503 meanwhile.
    pub shutdown_drain: Duration,
    /// Bearer tokens; empty runs open.
    pub tokens: Arc<Tokens>,
    /// Webhook pushes; its `public_url`, when empty, becomes `http://<bound address>`.
    pub webhook: Option<WebhookDispatcherConfig>,
    pub notifier: Option<NotifierConfig>,
    /// Where webhook pushes and notifications may go (checked at registration too).
    pub outbound: outbound::Policy,
    pub pruner: Option<PrunerConfig>,
    /// How long terminal instances are kept (`retention_days`), whichever replica prunes them:
    /// backfills and manual windows older than this are refused, since a pruned window could be
    /// created a second time.
    pub retention_days: i64,
    /// How often `kairos_instances{status}` is sampled; `None` leaves the sampler out.
    pub stats_interval: Option<Duration>,
    /// Bound of the database probe; while the database is unreachable, claims and writes
    /// answer 503 at once (`database_unavailable_answer_ms`).
    pub database_unavailable_answer: Duration,
    /// Wall-clock bound of every loop pass (`loop_pass_timeout_ms`).
    pub loop_pass_timeout: Duration,
    /// Where spans go (`otel_endpoint`); `None` exports nothing and runs no exporter.
    pub otel: Option<SpanExporterConfig>,
}

impl Options {
    /// Fails when a setting cannot be turned into what runs (e.g. unparsable tokens): never
    /// falls back to something more permissive.
    pub fn from_config(cfg: &Config) -> anyhow::Result<Self> {
        let tokens =
            Tokens::parse(&cfg.auth_tokens.0).map_err(|e| anyhow::anyhow!("auth_tokens: {e}"))?;
        for label in tokens.short_ones() {
            tracing::warn!(role = %label, min_chars = crate::domain::access::RECOMMENDED_TOKEN_CHARS, "an auth token is short and easy to guess; use a long random one");
        }
        Ok(Self {
            node_id: cfg.node_id.clone(),
            max_body_bytes: cfg.max_body_bytes,
            trigger: Some(TriggerLoopConfig::from_config(cfg)),
            retry_scanner: Some(RetryScannerConfig::from_config(cfg)),
            reaper: Some(TimeoutReaperConfig::from_config(cfg)),
            claims: ClaimSettings::from_config(cfg),
            server: ServerLimits::from_config(cfg),
            request_timeout: Duration::from_secs(cfg.http_request_timeout_seconds),
            shutdown_grace: Duration::from_secs(cfg.shutdown_grace_seconds),
            shutdown_drain: Duration::from_millis(cfg.shutdown_drain_ms),
            tokens: Arc::new(tokens),
            webhook: Some(WebhookDispatcherConfig::from_config(cfg)),
            notifier: Some(NotifierConfig::from_config(cfg)),
            outbound: outbound::Policy {
                allow_list: AllowList::parse(&cfg.outbound_allowed_hosts),
                deny_private: cfg.outbound_deny_private,
                pinned: Default::default(),
            },
            pruner: Some(PrunerConfig::from_config(cfg)),
            retention_days: cfg.retention_days,
            stats_interval: Some(Duration::from_millis(cfg.stats_interval_ms)),
            database_unavailable_answer: Duration::from_millis(cfg.database_unavailable_answer_ms),
            loop_pass_timeout: Duration::from_millis(cfg.loop_pass_timeout_ms),
            otel: SpanExporterConfig::from_config(cfg),
        })
    }

    /// The API only, every loop left out, default limits (tests).
    pub fn api_only(node_id: impl Into<String>) -> Self {
        let cfg = Config::default();
        Self {
            node_id: node_id.into(),
            max_body_bytes: cfg.max_body_bytes,
            trigger: None,
            retry_scanner: None,
            reaper: None,
            claims: ClaimSettings::from_config(&cfg),
            server: ServerLimits::from_config(&cfg),
            request_timeout: Duration::from_secs(cfg.http_request_timeout_seconds),
            shutdown_grace: Duration::from_secs(cfg.shutdown_grace_seconds),
            // Tests stop at once; the tests of the drain set it.
            shutdown_drain: Duration::ZERO,
            tokens: Arc::new(Tokens::default()),
            webhook: None,
            notifier: None,
            outbound: outbound::Policy::default(),
            pruner: None,
            retention_days: cfg.retention_days,
            stats_interval: None,
            database_unavailable_answer: Duration::from_millis(cfg.database_unavailable_answer_ms),
            loop_pass_timeout: Duration::from_millis(cfg.loop_pass_timeout_ms),
            otel: None,
        }
    }
}

/// A started kairos: its address and the handles to stop it.
pub struct Running {
    pub addr: SocketAddr,
    loops: CancellationToken,
    http: CancellationToken,
    signal: CancellationToken,
    loop_tasks: JoinSet<()>,
    signal_task: tokio::task::JoinHandle<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    shutdown_grace: Duration,
    shutdown_drain: Duration,
    /// The span exporter, when `otel_endpoint` is set: stopped last, so the spans of the
    /// requests that finished during the drain still leave.
    exporter: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

/// The database pools of one process: the API's, and the background loops' own, which API load
/// cannot exhaust (LISTEN connections, the trigger's batches, the scanners).
#[derive(Clone)]
pub struct Pools {
    pub api: PgPool,
    pub loops: PgPool,
    /// The LISTEN connections' ([`store::listen_pool`]: straight to PostgreSQL).
    pub listen: PgPool,
    /// The database watch's one connection: a probe that waits behind loops stuck on a lock
    /// would report an outage that is not one.
    pub watch: PgPool,
    /// Whether the database answers, shared with the pools' connection checks.
    pub health: DbHealth,
}

impl Pools {
    /// One pool for everything (tests, tools).
    pub fn shared(pool: PgPool) -> Self {
        Self {
            api: pool.clone(),
            listen: pool.clone(),
            watch: pool.clone(),
            loops: pool,
            health: DbHealth::default(),
        }
    }
}

/// Start the API on `listener` and the loops `opts` asks for, on already migrated pools.
pub fn start(pools: Pools, listener: TcpListener, opts: Options) -> anyhow::Result<Running> {
    let Pools {
        api: pool,
        loops: loop_pool,
        listen: listen_pool,
        watch: watch_pool,
        health,
    } = pools;
    crate::store::health::set_pass_bound(opts.loop_pass_timeout, health.clone());
    let addr = listener
        .local_addr()
        .context("reading the listen address")?;
    let heartbeats = Heartbeats::default();
    let group = GroupCommit::start(
        pool.clone(),
        group_commit::DEFAULT_COMMITTERS,
        group_commit::DEFAULT_MAX_BATCH,
    );
    // Fail closed: without the configured client nothing is sent.
    let client = outbound::Client::new(opts.outbound.clone())?;
    let loops = CancellationToken::new();
    let http_stop = CancellationToken::new();
    let mut loop_tasks = JoinSet::new();
    let (spans, exporter) = match opts.otel.clone() {
        None => (Spans::off(), None),
        Some(cfg) => {
            let (spans, queue) = Spans::queue(cfg.queue_capacity);
            let exporter = SpanExporter::new(cfg, queue)?;
            let stop = CancellationToken::new();
            let task = tokio::spawn(exporter.run(stop.clone()));
            (spans, Some((stop, task)))
        }
    };

    if let Some(cfg) = opts.trigger.clone() {
        let trigger = TriggerLoop::new(loop_pool.clone(), cfg, heartbeats.clone())
            .with_spans(spans.clone())
            .listening_on(listen_pool.clone());
        loop_tasks.spawn(trigger.run(loops.child_token()));
    }
    if let Some(cfg) = opts.retry_scanner.clone() {
        let scanner = RetryScanner::new(loop_pool.clone(), cfg, heartbeats.clone());
        loop_tasks.spawn(scanner.run(loops.child_token()));
    }
    if let Some(cfg) = opts.reaper.clone() {
        let reaper = TimeoutReaper::new(loop_pool.clone(), cfg, heartbeats.clone())
            .with_health(health.clone())
            .with_spans(spans.clone());
        loop_tasks.spawn(reaper.run(loops.child_token()));
    }
    let work_signal = WorkSignal::new();
    let signal = CancellationToken::new();
    let signal_task = tokio::spawn(work_signal.clone().run(listen_pool.clone(), signal.clone()));
    let watch = DbWatch::new(
        watch_pool,
        health.clone(),
        opts.node_id.clone(),
        opts.database_unavailable_answer,
        heartbeats.clone(),
        work_signal.clone(),
    );
    loop_tasks.spawn(watch.run(loops.child_token()));
    if let Some(mut cfg) = opts.webhook.clone() {
        if cfg.public_url.is_empty() {
            cfg.public_url = format!("http://{addr}");
        }
        let dispatcher = WebhookDispatcher::new(
            loop_pool.clone(),
            cfg,
            heartbeats.clone(),
            group.clone(),
            client.clone(),
        )
        .with_spans(spans.clone());
        loop_tasks.spawn(dispatcher.run(work_signal.clone(), loops.child_token()));
    }
    if let Some(cfg) = opts.pruner.clone() {
        let pruner = Pruner::new(loop_pool.clone(), cfg, heartbeats.clone());
        loop_tasks.spawn(pruner.run(loops.child_token()));
    }
    if let Some(interval) = opts.stats_interval {
        let stats = StatsSampler::new(loop_pool.clone(), interval, heartbeats.clone());
        loop_tasks.spawn(stats.run(loops.child_token()));
    }
    if let Some(cfg) = opts.notifier.clone() {
        let notifier = Notifier::new(loop_pool.clone(), cfg, heartbeats.clone(), client.clone());
        loop_tasks.spawn(notifier.run(loops.child_token()));
    }

    let claim_rounds =
        ClaimRounds::new(pool.clone(), claim_rounds::DEFAULT_MAX_ROUND, &opts.node_id);
    let state = AppState {
        pool,
        heartbeats,
        node_id: opts.node_id.clone(),
        claims: opts.claims.clone(),
        work_signal,
        // Long polls end when the loops stop: no new claims once shutdown begins.
        shutdown: loops.clone(),
        tokens: opts.tokens.clone(),
        outbound: opts.outbound.clone(),
        group,
        claim_rounds,
        claim_waiters: Arc::new(tokio::sync::Semaphore::new(opts.claims.max_waiters)),
        request_timeout: opts.request_timeout,
        retention_days: opts.retention_days,
        db_health: health,
        spans,
    };
    let app = crate::router::router(state, opts.max_body_bytes);
    let server = tokio::spawn(http::server::serve(
        listener,
        app,
        opts.server.clone(),
        http_stop.clone(),
    ));
    Ok(Running {
        addr,
        loops,
        http: http_stop,
        signal,
        loop_tasks,
        signal_task,
        server,
        shutdown_grace: opts.shutdown_grace,
        shutdown_drain: opts.shutdown_drain,
        exporter,
    })
}

impl Running {
    /// Whether a span exporter runs (`otel_endpoint` is set).
    pub fn exports_spans(&self) -> bool {
        self.exporter.is_some()
    }

    /// Take no new work: loops stop, new claims answer 503 with `Retry-After`, waiting long
    /// polls answer with what they have. Completions, failures and heartbeats still work, so
    /// agents can report what they hold. The first step of [`Running::shutdown`].
    pub fn stop_taking_work(&self) {
        self.loops.cancel();
    }

    /// Stop in order: loops first (no new windows, retries or reaps; waiting long polls return
    /// with what they have); then, for the drain period, the API still answers (new claims 503
    /// with `Retry-After`, reports of held instances recorded); then the HTTP server stops
    /// accepting and lets in-flight requests finish for up to the grace period; then the work
    /// signal.
    pub async fn shutdown(mut self) {
        self.stop_taking_work();
        while self.loop_tasks.join_next().await.is_some() {}
        if !self.shutdown_drain.is_zero() {
            tracing::info!(
                drain_ms = self.shutdown_drain.as_millis() as u64,
                "taking no new work; new claims answer 503 until the listener closes"
            );
            tokio::time::sleep(self.shutdown_drain).await;
        }
        self.http.cancel();
        match tokio::time::timeout(self.shutdown_grace, &mut self.server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::error!(error = %e, "HTTP server failed"),
            Ok(Err(e)) => tracing::error!(error = %e, "HTTP server task failed"),
            Err(_) => {
                tracing::warn!(
                    grace_s = self.shutdown_grace.as_secs(),
                    "in-flight requests did not finish within the grace period; closing"
                );
                self.server.abort();
            }
        }
        self.signal.cancel();
        let _ = (&mut self.signal_task).await;
        if let Some((stop, task)) = self.exporter.take() {
            stop.cancel();
            let _ = task.await;
        }
    }

    /// Abort everything at once, as a crash would (tests).
    pub fn abort(mut self) {
        self.loop_tasks.abort_all();
        self.server.abort();
        self.signal_task.abort();
        if let Some((_, task)) = self.exporter.take() {
            task.abort();
        }
    }
}

/// A pool of `size` connections on `database_url`; `what` names it when it cannot connect.
async fn connect_pool(
    cfg: &Config,
    what: &str,
    size: u32,
    settings: &DbSettings,
    health: &DbHealth,
) -> anyhow::Result<PgPool> {
    store::connect(&cfg.database_url, size, settings, health.clone())
        .await
        .with_context(|| {
            format!(
                "connecting {what} (database_url of {})",
                cfg.database_url.redacted()
            )
        })
}

/// `kairos serve`: connect, migrate (or, with `migrate = false`, check that nothing is
/// missing), listen, run until SIGTERM/SIGINT, stop in order.
pub async fn serve(cfg: Config) -> anyhow::Result<()> {
    if cfg.migrate {
        connect_and_migrate(&cfg, 2).await?.close().await;
    } else {
        check_migrated(&cfg).await?;
    }
    let health = DbHealth::default();
    let settings = DbSettings::from(&cfg);
    let pool = connect_pool(
        &cfg,
        "the API's pool",
        cfg.api_connections(),
        &settings,
        &health,
    )
    .await?;
    // The loops wait longer for a connection than a request should: a pass that waits is not
    // a caller that gives up.
    let loop_settings = DbSettings {
        acquire_timeout: Duration::from_secs(10),
        ..settings.clone()
    };
    let loop_pool = connect_pool(
        &cfg,
        "the background loops' pool",
        cfg.loop_pool_connections(),
        &loop_settings,
        &health,
    )
    .await?;
    let watch_pool = connect_pool(
        &cfg,
        "the database watch's pool",
        crate::config::WATCH_CONNECTIONS,
        &loop_settings,
        &health,
    )
    .await?;
    let listen_pool = store::listen_pool(cfg.listen_url(), &loop_settings, health.clone())
        .await
        .with_context(|| {
            format!(
                "connecting the LISTEN connections' pool (listen_database_url of {})",
                cfg.listen_url().redacted()
            )
        })?;
    let _ = crate::telemetry::metrics_handle();
    let listener = TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding {}", cfg.listen))?;
    let pools = Pools {
        api: pool.clone(),
        loops: loop_pool.clone(),
        listen: listen_pool.clone(),
        watch: watch_pool.clone(),
        health,
    };
    let running = start(pools, listener, Options::from_config(&cfg)?)?;
    tracing::info!(listen = %running.addr, node_id = %cfg.node_id, "kairos serving");
    shutdown_signal().await;
    tracing::info!("shutdown signal received; stopping loops, then the API");
    running.shutdown().await;
    pool.close().await;
    loop_pool.close().await;
    listen_pool.close().await;
    watch_pool.close().await;
    tracing::info!("kairos stopped");
    Ok(())
}

/// `kairos migrate`.
pub async fn migrate(cfg: Config) -> anyhow::Result<()> {
    connect_and_migrate(&cfg, 2).await?;
    tracing::info!("migrations applied");
    Ok(())
}

/// Refuse to serve a database that lacks a migration this release needs (without changing it).
async fn check_migrated(cfg: &Config) -> anyhow::Result<()> {
    let settings = DbSettings {
        acquire_timeout: Duration::from_secs(30),
        ..DbSettings::from(cfg)
    };
    let pool = store::connect(&cfg.database_url, 1, &settings, DbHealth::default())
        .await
        .with_context(|| {
            format!(
                "connecting to the database (database_url of {})",
                cfg.database_url.redacted()
            )
        })?;
    let missing = store::missing_migrations(&pool)
        .await
        .context("reading the applied migrations")?;
    pool.close().await;
    if let Some(first) = missing.first() {
        anyhow::bail!(
            "the database lacks migration {first} ({} missing in all) and migrate is off \
             (serve --no-migrate or KAIROS_MIGRATE=false): run `kairos migrate` first",
            missing.len()
        );
    }
    tracing::info!("schema checked: every migration is applied; serving without migrating");
    Ok(())
}

/// A pool on `migrate_database_url` (else `database_url`) with every migration applied (safe
/// when replicas start at once: the migrator's session advisory lock orders them, which is why
/// this connection goes straight to PostgreSQL, never through PgBouncer).
async fn connect_and_migrate(cfg: &Config, max_connections: u32) -> anyhow::Result<PgPool> {
    cfg.check_migrate_url()?;
    // Migrations run without statement and lock timeouts: an index build may take long.
    let settings = DbSettings {
        acquire_timeout: Duration::from_secs(30),
        ..DbSettings::from(cfg).unbounded().direct()
    };
    let pool = store::connect(
        cfg.migrate_url(),
        max_connections,
        &settings,
        DbHealth::default(),
    )
    .await
    .with_context(|| {
        format!(
            "connecting to the database (database_url of {})",
            cfg.database_url.redacted()
        )
    })?;
    store::migrate(&pool).await.context("applying migrations")?;
    Ok(pool)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::Options;
    use crate::config::{Config, Secret};

    #[test]
    fn unparsable_tokens_fail_closed() {
        let cfg = Config {
            auth_tokens: Secret("no-role-here".to_owned()),
            ..Config::default()
        };
        let err = Options::from_config(&cfg).expect_err("refused");
        assert!(err.to_string().contains("auth_tokens"), "{err}");
    }
}
