//! Typed settings. Sources, later ones winning: built-in defaults, the TOML file
//! (`KAIROS_CONFIG`, else `config/kairos.toml` when it exists), then one `KAIROS_<KEY>` variable
//! per key, and `DATABASE_URL`. Every key carries its unit in its name. `Config::load` validates
//! everything and says exactly which key is wrong.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err("must be text or json".to_owned()),
        }
    }
}

/// What stands between kairos and PostgreSQL on `database_url` (docs/pgbouncer.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatabasePooler {
    /// `database_url` is PostgreSQL itself (or a pooler in session mode).
    None,
    /// PgBouncer in transaction pooling mode with its stock settings: no session state, no
    /// prepared statement outlives a transaction, every statement runs inside one.
    Pgbouncer,
}

impl FromStr for DatabasePooler {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(DatabasePooler::None),
            "pgbouncer" => Ok(DatabasePooler::Pgbouncer),
            _ => Err("must be none or pgbouncer".to_owned()),
        }
    }
}

/// A secret string: never shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

/// The database URL. `Debug` shows it with its password hidden ([`redact_database_url`]);
/// everywhere a `&str` is wanted it is the URL itself.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(pub String);

impl DatabaseUrl {
    /// The URL with its password hidden, for messages and logs.
    pub fn redacted(&self) -> String {
        redact_database_url(&self.0)
    }
}

impl std::ops::Deref for DatabaseUrl {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.redacted(), f)
    }
}

impl FromStr for DatabaseUrl {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(DatabaseUrl(s.to_owned()))
    }
}

impl PartialEq<&str> for DatabaseUrl {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// A database URL with its passwords hidden, for messages and logs: the password of the user
/// info and the value of every query parameter whose name holds `password` (`password`,
/// `sslpassword`) become `***`; the user, host, port, database and other parameters stay, so a
/// message still says which server it means. A string the URL parser refuses (one naming
/// several hosts, `h1:5432,h2:5432`) has everything between the first `:` after `://` and the
/// last `@` hidden, and every `password…=` value.
///
/// The one redactor of database URLs: the daemon's messages, `Config`'s `Debug` and
/// `kairos-bench` use it. (Webhook and notification URLs shown to non-admins are cut to their
/// origin by `domain::access::redact_url`, a different rule: their path and query are secret.)
pub fn redact_database_url(url: &str) -> String {
    const HIDDEN: &str = "***";
    fn hides(key: &str) -> bool {
        url::form_urlencoded::parse(key.as_bytes())
            .next()
            .is_some_and(|(key, _)| key.to_ascii_lowercase().contains("password"))
    }
    fn redact_query(query: &str) -> String {
        query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if hides(key) => format!("{key}={HIDDEN}"),
                _ => pair.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("&")
    }
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() && parsed.set_password(Some(HIDDEN)).is_err() {
                return HIDDEN.to_owned();
            }
            if let Some(query) = parsed.query().map(redact_query) {
                parsed.set_query(Some(&query));
            }
            parsed.to_string()
        }
        Err(_) => {
            let (mut head, query) = match url.split_once('?') {
                Some((h, q)) => (h.to_owned(), Some(redact_query(q))),
                None => (url.to_owned(), None),
            };
            // The user stays: the password is what follows its `:` (a URL naming several
            // hosts, `h1:5432,h2:5432`, is not one the parser takes).
            if let (Some(s), Some(at)) = (head.find("://"), head.rfind('@'))
                && at > s
                && let Some(colon) = head[s + 3..at].find(':')
            {
                head.replace_range(s + 3 + colon + 1..at, HIDDEN);
            }
            match query {
                Some(q) => format!("{head}?{q}"),
                None => head,
            }
        }
    }
}

/// Every setting; see `config/kairos.toml` for the documented defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database_url: DatabaseUrl,
    /// `pgbouncer` when `database_url` goes through PgBouncer in transaction pooling mode.
    pub database_pooler: DatabasePooler,
    /// The URL of the LISTEN connections, which need a session of their own; empty: `database_url`.
    pub listen_database_url: DatabaseUrl,
    /// The URL migrations run over (they hold a session advisory lock); empty: `database_url`.
    pub migrate_database_url: DatabaseUrl,
    pub database_max_connections: u32,
    pub listen: SocketAddr,
    pub node_id: String,
    pub log_format: LogFormat,
    pub log_level: String,
    pub max_body_bytes: usize,
    pub trigger_batch_size: i64,
    pub trigger_max_sleep_ms: u64,
    pub trigger_parallelism: usize,
    pub trigger_lead_ms: u64,
    pub retry_scan_interval_ms: u64,
    pub retry_batch_size: i64,
    pub reaper_interval_ms: u64,
    pub reaper_batch_size: i64,
    pub default_lease_seconds: i64,
    pub max_lease_seconds: i64,
    pub claim_max_wait_seconds: i64,
    pub claim_max_waiters: usize,
    pub http_header_read_timeout_seconds: u64,
    pub http_request_timeout_seconds: u64,
    pub http_max_connections: usize,
    pub shutdown_grace_seconds: u64,
    pub shutdown_drain_ms: u64,
    /// `"<token>:<role>[:<agent>|<agent>…],…"`; empty runs open, on loopback only.
    pub auth_tokens: Secret,
    /// The base URL agents reach this replica at, for webhook callback URLs.
    pub public_url: String,
    /// Hosts webhook and notification URLs may name (comma-separated); empty allows any.
    pub outbound_allowed_hosts: String,
    /// Refuse loopback and private destinations too (link-local and the like always are).
    pub outbound_deny_private: bool,
    pub webhook_interval_ms: u64,
    pub webhook_max_in_flight: usize,
    pub webhook_max_per_task: i64,
    pub notifier_interval_ms: u64,
    pub notify_max_age_seconds: i64,
    pub notify_timeout_seconds: u64,
    pub retention_days: i64,
    pub pruner_interval_ms: u64,
    pub pruner_batch_size: i64,
    pub stats_interval_ms: u64,
    pub database_unavailable_answer_ms: u64,
    pub db_statement_timeout_ms: u64,
    pub db_lock_timeout_ms: u64,
    pub db_idle_in_transaction_timeout_ms: u64,
    pub db_keepalive_seconds: u64,
    pub loop_pass_timeout_ms: u64,
    pub agent_absent_seconds: i64,
    /// `serve` applies pending migrations at start; false: it never changes the schema and
    /// refuses to start on a database that lacks one of its migrations.
    pub migrate: bool,
    /// OpenTelemetry collector base URL (OTLP/HTTP, JSON): spans go to `<otel_endpoint>/v1/traces`.
    /// Empty: nothing is exported.
    pub otel_endpoint: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            database_url: DatabaseUrl("postgres://kairos:kairos@127.0.0.1:5432/kairos".to_owned()),
            database_pooler: DatabasePooler::None,
            listen_database_url: DatabaseUrl(String::new()),
            migrate_database_url: DatabaseUrl(String::new()),
            database_max_connections: 24,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            node_id: default_node_id(),
            log_format: LogFormat::Text,
            log_level: "info".to_owned(),
            max_body_bytes: 256 * 1024,
            trigger_batch_size: 500,
            trigger_max_sleep_ms: 10_000,
            trigger_parallelism: 4,
            trigger_lead_ms: 1000,
            retry_scan_interval_ms: 1000,
            retry_batch_size: 100,
            reaper_interval_ms: 1000,
            reaper_batch_size: 500,
            default_lease_seconds: 60,
            max_lease_seconds: 3600,
            claim_max_wait_seconds: 30,
            claim_max_waiters: 1024,
            http_header_read_timeout_seconds: 10,
            http_request_timeout_seconds: 30,
            http_max_connections: 4096,
            shutdown_grace_seconds: 10,
            shutdown_drain_ms: 1000,
            auth_tokens: Secret::default(),
            public_url: String::new(),
            outbound_allowed_hosts: String::new(),
            outbound_deny_private: false,
            webhook_interval_ms: 1000,
            webhook_max_in_flight: 512,
            webhook_max_per_task: 256,
            notifier_interval_ms: 1000,
            notify_max_age_seconds: 86_400,
            notify_timeout_seconds: 10,
            retention_days: 30,
            pruner_interval_ms: 60_000,
            pruner_batch_size: 1000,
            stats_interval_ms: 5000,
            database_unavailable_answer_ms: 2000,
            db_statement_timeout_ms: 15_000,
            db_lock_timeout_ms: 10_000,
            db_idle_in_transaction_timeout_ms: 30_000,
            db_keepalive_seconds: 5,
            loop_pass_timeout_ms: 30_000,
            agent_absent_seconds: 60,
            migrate: true,
            otel_endpoint: String::new(),
        }
    }
}

/// Connections held by LISTEN: the claims' work signal and the trigger loop's task changes.
pub const LISTEN_CONNECTIONS: u32 = 2;
/// Connections the background loops other than the trigger's batches share (retry scanner,
/// reaper, dispatcher, notifier, pruner, stats sampler: short transactions that may queue).
pub const SHARED_LOOP_CONNECTIONS: u32 = 2;
/// Fewest connections the API pool may have (group commits plus a claim).
pub const MIN_API_CONNECTIONS: u32 = 4;

impl Config {
    /// The URL of the LISTEN connections: `listen_database_url`, else `database_url`.
    pub fn listen_url(&self) -> &DatabaseUrl {
        if self.listen_database_url.is_empty() {
            &self.database_url
        } else {
            &self.listen_database_url
        }
    }

    /// The URL migrations run over: `migrate_database_url`, else `database_url`.
    pub fn migrate_url(&self) -> &DatabaseUrl {
        if self.migrate_database_url.is_empty() {
            &self.database_url
        } else {
            &self.migrate_database_url
        }
    }

    /// Refuse to migrate through PgBouncer: the migrator holds a session advisory lock, which
    /// transaction pooling would leave on a server connection other clients then use.
    pub fn check_migrate_url(&self) -> Result<(), ConfigError> {
        if self.database_pooler == DatabasePooler::Pgbouncer
            && self.migrate_url() == &self.database_url
        {
            return Err(invalid(
                "migrate_database_url",
                "must name PostgreSQL directly when database_pooler is pgbouncer: migrations \
                 hold a session advisory lock (or serve with migrate = false and run `kairos \
                 migrate` with DATABASE_URL naming PostgreSQL directly)",
            ));
        }
        Ok(())
    }

    /// Size of the background loops' own pool: the API cannot exhaust it.
    pub fn loop_connections(&self) -> u32 {
        LISTEN_CONNECTIONS
            + u32::try_from(self.trigger_parallelism).unwrap_or(u32::MAX)
            + SHARED_LOOP_CONNECTIONS
    }

    /// Size of the API's pool: what `database_max_connections` leaves after the loops' pool.
    pub fn api_connections(&self) -> u32 {
        self.database_max_connections
            .saturating_sub(self.loop_connections())
    }
}

/// `hostname-pid`: distinct for every process, readable in logs and event actors.
pub fn default_node_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "kairos".to_owned());
    format!("{host}-{}", std::process::id())
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// An absolute http(s) URL with a host.
fn is_http_url(s: &str) -> bool {
    url::Url::parse(s).is_ok_and(|u| {
        matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty())
    })
}

impl Config {
    /// Load from the process environment.
    pub fn load() -> Result<Config, ConfigError> {
        Self::load_from(|k| std::env::var(k).ok())
    }

    /// Load with an explicit environment (tests).
    pub fn load_from(env: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let path = match env("KAIROS_CONFIG") {
            Some(p) => Some(PathBuf::from(p)),
            None => {
                let default = Path::new("config/kairos.toml");
                default.exists().then(|| default.to_path_buf())
            }
        };
        let mut cfg = match path {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                toml::from_str::<Config>(&text).map_err(|e| ConfigError::Parse {
                    path,
                    message: e.to_string(),
                })?
            }
            None => Config::default(),
        };
        cfg.apply_env(&env)?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn apply_env(&mut self, env: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        fn set<T: FromStr>(
            env: &impl Fn(&str) -> Option<String>,
            var: &str,
            slot: &mut T,
        ) -> Result<(), ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            if let Some(raw) = env(var) {
                *slot = raw
                    .trim()
                    .parse()
                    .map_err(|e: T::Err| invalid(var, format!("cannot parse {raw:?}: {e}")))?;
            }
            Ok(())
        }
        // One KAIROS_<KEY> per key of the file; the field name is the key.
        macro_rules! from_env {
            ($($field:ident),* $(,)?) => {
                $(
                    let var = format!("KAIROS_{}", stringify!($field).to_ascii_uppercase());
                    set(env, &var, &mut self.$field)?;
                )*
            };
        }
        from_env!(
            database_url,
            database_pooler,
            listen_database_url,
            migrate_database_url,
            database_max_connections,
            listen,
            node_id,
            log_format,
            log_level,
            max_body_bytes,
            trigger_batch_size,
            trigger_max_sleep_ms,
            trigger_parallelism,
            trigger_lead_ms,
            retry_scan_interval_ms,
            retry_batch_size,
            reaper_interval_ms,
            reaper_batch_size,
            default_lease_seconds,
            max_lease_seconds,
            claim_max_wait_seconds,
            claim_max_waiters,
            http_header_read_timeout_seconds,
            http_request_timeout_seconds,
            http_max_connections,
            shutdown_grace_seconds,
            shutdown_drain_ms,
            auth_tokens,
            public_url,
            outbound_allowed_hosts,
            outbound_deny_private,
            webhook_interval_ms,
            webhook_max_in_flight,
            webhook_max_per_task,
            notifier_interval_ms,
            notify_max_age_seconds,
            notify_timeout_seconds,
            retention_days,
            pruner_interval_ms,
            pruner_batch_size,
            stats_interval_ms,
            database_unavailable_answer_ms,
            db_statement_timeout_ms,
            db_lock_timeout_ms,
            db_idle_in_transaction_timeout_ms,
            db_keepalive_seconds,
            loop_pass_timeout_ms,
            agent_absent_seconds,
            migrate,
            otel_endpoint,
        );
        // The conventional variable wins over KAIROS_DATABASE_URL.
        set(env, "DATABASE_URL", &mut self.database_url)?;
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !(self.database_url.starts_with("postgres://")
            || self.database_url.starts_with("postgresql://"))
        {
            return Err(invalid(
                "database_url",
                "must be a postgres:// or postgresql:// URL",
            ));
        }
        crate::store::connect::Target::parse(&self.database_url)
            .map_err(|e| invalid("database_url", e.0))?;
        for (key, url) in [
            ("listen_database_url", &self.listen_database_url),
            ("migrate_database_url", &self.migrate_database_url),
        ] {
            if !(url.is_empty()
                || url.starts_with("postgres://")
                || url.starts_with("postgresql://"))
            {
                return Err(invalid(
                    key,
                    "must be empty (database_url) or a postgres:// or postgresql:// URL",
                ));
            }
        }
        if self.database_pooler == DatabasePooler::Pgbouncer {
            // In transaction pooling a session belongs to no client: a LISTEN would stay on a
            // server connection that other clients' transactions then use, and its
            // notifications would not reach this process.
            if self.listen_url() == &self.database_url {
                return Err(invalid(
                    "listen_database_url",
                    "must name PostgreSQL directly when database_pooler is pgbouncer: LISTEN \
                     needs a session of its own, which transaction pooling does not give",
                ));
            }
        }
        if !(1..=16).contains(&self.trigger_parallelism) {
            return Err(invalid("trigger_parallelism", "must be from 1 to 16"));
        }
        if self.trigger_lead_ms > 10_000 {
            return Err(invalid("trigger_lead_ms", "must be from 0 to 10000"));
        }
        let floor = self.loop_connections() + MIN_API_CONNECTIONS;
        if !(floor..=1000).contains(&self.database_max_connections) {
            return Err(invalid(
                "database_max_connections",
                format!(
                    "must be from {floor} to 1000: {LISTEN_CONNECTIONS} are held by LISTEN, \
                     trigger_parallelism + {SHARED_LOOP_CONNECTIONS} are kept for the background \
                     loops, and the API needs at least {MIN_API_CONNECTIONS}"
                ),
            ));
        }
        if !crate::domain::task::valid_name(&self.node_id) {
            return Err(invalid(
                "node_id",
                "must be 1-128 characters of letters, digits, '_', '.', '-', ':'",
            ));
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.max_body_bytes) {
            return Err(invalid("max_body_bytes", "must be from 1024 to 16777216"));
        }
        if !(1..=10_000).contains(&self.trigger_batch_size) {
            return Err(invalid("trigger_batch_size", "must be from 1 to 10000"));
        }
        if !(10..=600_000).contains(&self.trigger_max_sleep_ms) {
            return Err(invalid("trigger_max_sleep_ms", "must be from 10 to 600000"));
        }
        for (key, v) in [
            ("retry_scan_interval_ms", self.retry_scan_interval_ms),
            ("reaper_interval_ms", self.reaper_interval_ms),
        ] {
            if !(10..=600_000).contains(&v) {
                return Err(invalid(key, "must be from 10 to 600000"));
            }
        }
        for (key, v) in [
            ("retry_batch_size", self.retry_batch_size),
            ("reaper_batch_size", self.reaper_batch_size),
        ] {
            if !(1..=10_000).contains(&v) {
                return Err(invalid(key, "must be from 1 to 10000"));
            }
        }
        if !(1..=86_400).contains(&self.max_lease_seconds) {
            return Err(invalid("max_lease_seconds", "must be from 1 to 86400"));
        }
        if !(1..=self.max_lease_seconds).contains(&self.default_lease_seconds) {
            return Err(invalid(
                "default_lease_seconds",
                "must be from 1 to max_lease_seconds",
            ));
        }
        if !(0..=300).contains(&self.claim_max_wait_seconds) {
            return Err(invalid("claim_max_wait_seconds", "must be from 0 to 300"));
        }
        if !(1..=300).contains(&self.http_header_read_timeout_seconds) {
            return Err(invalid(
                "http_header_read_timeout_seconds",
                "must be from 1 to 300",
            ));
        }
        if !(1..=3600).contains(&self.http_request_timeout_seconds) {
            return Err(invalid(
                "http_request_timeout_seconds",
                "must be from 1 to 3600",
            ));
        }
        if !(16..=1_000_000).contains(&self.http_max_connections) {
            return Err(invalid(
                "http_max_connections",
                "must be from 16 to 1000000",
            ));
        }
        if self.claim_max_waiters == 0 {
            return Err(invalid(
                "claim_max_waiters",
                "must be at least 1 (use wait_seconds 0 on claims to avoid long polls)",
            ));
        }
        if self.claim_max_waiters >= self.http_max_connections {
            return Err(invalid(
                "claim_max_waiters",
                "must be below http_max_connections, so waiting claims cannot hold every connection",
            ));
        }
        if !(1..=3600).contains(&self.shutdown_grace_seconds) {
            return Err(invalid("shutdown_grace_seconds", "must be from 1 to 3600"));
        }
        if self.shutdown_drain_ms > 60_000 {
            return Err(invalid("shutdown_drain_ms", "must be from 0 to 60000"));
        }
        let tokens = crate::domain::access::Tokens::parse(&self.auth_tokens.0)
            .map_err(|m| invalid("auth_tokens", m))?;
        if tokens.is_empty() && !self.listen.ip().is_loopback() {
            return Err(invalid(
                "listen",
                format!(
                    "refusing to listen on {} without authentication: set auth_tokens \
                     (KAIROS_AUTH_TOKENS=\"<token>:admin\") or listen on a loopback address",
                    self.listen
                ),
            ));
        }
        if !self.public_url.is_empty() && crate::domain::task::check_url(&self.public_url).is_err()
        {
            return Err(invalid("public_url", "must be an http:// or https:// URL"));
        }
        if !self.otel_endpoint.is_empty() && !is_http_url(&self.otel_endpoint) {
            return Err(invalid(
                "otel_endpoint",
                "must be an http:// or https:// URL of an OTLP/HTTP collector, e.g. http://127.0.0.1:4318",
            ));
        }
        for (key, v) in [
            ("webhook_interval_ms", self.webhook_interval_ms),
            ("notifier_interval_ms", self.notifier_interval_ms),
        ] {
            if !(10..=600_000).contains(&v) {
                return Err(invalid(key, "must be from 10 to 600000"));
            }
        }
        if !(1..=10_000).contains(&self.webhook_max_in_flight) {
            return Err(invalid("webhook_max_in_flight", "must be from 1 to 10000"));
        }
        if !(1..=1000).contains(&self.webhook_max_per_task) {
            return Err(invalid("webhook_max_per_task", "must be from 1 to 1000"));
        }
        if !(60..=30 * 86_400).contains(&self.notify_max_age_seconds) {
            return Err(invalid(
                "notify_max_age_seconds",
                "must be from 60 to 2592000",
            ));
        }
        if !(1..=3650).contains(&self.retention_days) {
            return Err(invalid("retention_days", "must be from 1 to 3650"));
        }
        for (key, v) in [
            ("pruner_interval_ms", self.pruner_interval_ms),
            ("stats_interval_ms", self.stats_interval_ms),
        ] {
            if !(100..=3_600_000).contains(&v) {
                return Err(invalid(key, "must be from 100 to 3600000"));
            }
        }
        if !(1..=100_000).contains(&self.pruner_batch_size) {
            return Err(invalid("pruner_batch_size", "must be from 1 to 100000"));
        }
        if !(1..=300).contains(&self.notify_timeout_seconds) {
            return Err(invalid("notify_timeout_seconds", "must be from 1 to 300"));
        }
        if !(100..=60_000).contains(&self.database_unavailable_answer_ms) {
            return Err(invalid(
                "database_unavailable_answer_ms",
                "must be from 100 to 60000",
            ));
        }
        for (key, v) in [
            ("db_statement_timeout_ms", self.db_statement_timeout_ms),
            ("db_lock_timeout_ms", self.db_lock_timeout_ms),
        ] {
            if v != 0 && !(100..=3_600_000).contains(&v) {
                return Err(invalid(key, "must be 0 (off) or from 100 to 3600000"));
            }
        }
        // A staging trigger pass keeps its transaction open, idle, up to trigger_lead_ms.
        let idle_floor = self.trigger_lead_ms + 1000;
        if self.db_idle_in_transaction_timeout_ms != 0
            && !(idle_floor..=3_600_000).contains(&self.db_idle_in_transaction_timeout_ms)
        {
            return Err(invalid(
                "db_idle_in_transaction_timeout_ms",
                format!(
                    "must be 0 (off) or from {idle_floor} (trigger_lead_ms + 1000: a staging \
                     trigger pass waits for its instant in an open transaction) to 3600000"
                ),
            ));
        }
        if self.db_keepalive_seconds > 600 {
            return Err(invalid(
                "db_keepalive_seconds",
                "must be 0 (off) or from 1 to 600",
            ));
        }
        if !(1000..=3_600_000).contains(&self.loop_pass_timeout_ms) {
            return Err(invalid(
                "loop_pass_timeout_ms",
                "must be from 1000 to 3600000",
            ));
        }
        if !(1..=86_400).contains(&self.agent_absent_seconds) {
            return Err(invalid("agent_absent_seconds", "must be from 1 to 86400"));
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log_level).is_err() {
            return Err(invalid(
                "log_level",
                "must be a tracing filter such as info or kairos=debug,sqlx=warn",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::load_from(|k| map.get(k).cloned())
    }

    #[test]
    fn passwords_are_redacted_from_database_urls() {
        let cases = [
            (
                "postgres://kairos:s3cret@db:5432/kairos",
                "postgres://kairos:***@db:5432/kairos",
            ),
            ("postgres://db/kairos", "postgres://db/kairos"),
            ("postgres://kairos@db/kairos", "postgres://kairos@db/kairos"),
            (
                "postgres://kairos@db/kairos?sslmode=require&password=s3cret",
                "postgres://kairos@db/kairos?sslmode=require&password=***",
            ),
            (
                "postgresql://u:p%40ss@[::1]:5433/db?PASSWORD=s3cret&sslpassword=s3cret&application_name=k",
                "postgresql://u:***@[::1]:5433/db?PASSWORD=***&sslpassword=***&application_name=k",
            ),
            // Not a URL the parser takes (a bad port): the password and password values still go.
            (
                "postgres://kairos:s3cret@db:99999/kairos?password=s3cret",
                "postgres://kairos:***@db:99999/kairos?password=***",
            ),
            // Several hosts (libpq style): the parser takes none of them.
            (
                "postgres://kairos:s3:cr@t@h1:5432,h2:5433/kairos?target_session_attrs=read-write",
                "postgres://kairos:***@h1:5432,h2:5433/kairos?target_session_attrs=read-write",
            ),
            (
                "postgres://kairos@h1:1,h2/kairos",
                "postgres://kairos@h1:1,h2/kairos",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_database_url(url), shown, "{url}");
        }
    }

    #[test]
    fn database_url_may_name_several_hosts_and_refuses_other_session_attrs() {
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            (
                "KAIROS_DATABASE_URL",
                "postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=any",
            ),
        ])
        .expect("several hosts are valid");
        assert_eq!(
            cfg.database_url,
            "postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=any"
        );
        for (url, says) in [
            (
                "postgres://u:s3cret@h1,h2/db?target_session_attrs=read-only",
                "target_session_attrs",
            ),
            ("postgres://u:s3cret@h1:5432,h2:x/db", "invalid port number"),
        ] {
            let e = load(&[
                ("KAIROS_CONFIG", "config/kairos.toml"),
                ("DATABASE_URL", url),
            ])
            .expect_err(url)
            .to_string();
            assert!(e.starts_with("database_url: "), "{e}");
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn debug_does_not_show_the_database_password() {
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            (
                "DATABASE_URL",
                "postgres://kairos:s3cret-user@db:5432/kairos?sslmode=require&password=s3cret-query",
            ),
        ])
        .expect("valid");
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("postgres://kairos:***@db:5432/kairos"),
            "{shown}"
        );
    }

    #[test]
    fn environment_overrides_the_defaults() {
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_LISTEN", "127.0.0.1:9999"),
            ("DATABASE_URL", "postgres://u@h/db"),
            ("KAIROS_TRIGGER_BATCH_SIZE", "7"),
        ])
        .expect("valid");
        assert_eq!(cfg.listen.port(), 9999);
        assert_eq!(cfg.database_url, "postgres://u@h/db");
        assert_eq!(cfg.trigger_batch_size, 7);
    }

    #[test]
    fn pgbouncer_needs_direct_urls_for_listen_and_migrations() {
        let pooled = "postgres://k@127.0.0.1:6432/kairos";
        let direct = "postgres://k@127.0.0.1:5432/kairos";
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("DATABASE_URL", pooled),
            ("KAIROS_DATABASE_POOLER", "pgbouncer"),
        ])
        .expect_err("LISTEN through PgBouncer");
        assert!(err.to_string().starts_with("listen_database_url:"), "{err}");
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("DATABASE_URL", pooled),
            ("KAIROS_DATABASE_POOLER", "pgbouncer"),
            ("KAIROS_LISTEN_DATABASE_URL", direct),
        ])
        .expect("valid");
        assert_eq!(cfg.database_pooler, DatabasePooler::Pgbouncer);
        assert_eq!(cfg.listen_url().0, direct);
        // Migrating through PgBouncer is refused when it is asked for, not at load: serve
        // --no-migrate needs no migrate_database_url.
        let err = cfg
            .check_migrate_url()
            .expect_err("migrations through PgBouncer");
        assert!(
            err.to_string().starts_with("migrate_database_url:"),
            "{err}"
        );
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("DATABASE_URL", pooled),
            ("KAIROS_DATABASE_POOLER", "pgbouncer"),
            ("KAIROS_LISTEN_DATABASE_URL", direct),
            ("KAIROS_MIGRATE_DATABASE_URL", direct),
        ])
        .expect("valid");
        cfg.check_migrate_url().expect("direct migrations");
        assert_eq!(cfg.migrate_url().0, direct);
        // Without a pooler both default to database_url.
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("DATABASE_URL", direct),
        ])
        .expect("valid");
        assert_eq!(
            (cfg.listen_url().0.as_str(), cfg.migrate_url().0.as_str()),
            (direct, direct)
        );
        cfg.check_migrate_url().expect("no pooler");
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_DATABASE_POOLER", "pgpool"),
        ])
        .expect_err("unknown pooler");
        assert!(err.to_string().contains("KAIROS_DATABASE_POOLER"), "{err}");
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_LISTEN_DATABASE_URL", "mysql://x"),
        ])
        .expect_err("not a PostgreSQL URL");
        assert!(err.to_string().starts_with("listen_database_url:"), "{err}");
    }

    #[test]
    fn the_shipped_file_matches_the_defaults() {
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_NODE_ID", "n1"),
        ])
        .expect("valid");
        // Every key, so a default changed in one place and not the other fails here.
        let expected = Config {
            node_id: "n1".to_owned(),
            ..Config::default()
        };
        assert_eq!(cfg, expected);
    }

    #[test]
    fn too_few_connections_for_the_loops_and_the_api_are_refused() {
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_DATABASE_MAX_CONNECTIONS", "11"),
        ])
        .expect_err("refused");
        let text = err.to_string();
        assert!(
            text.starts_with("database_max_connections: must be from 12 to 1000"),
            "{text}"
        );
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_DATABASE_MAX_CONNECTIONS", "12"),
        ])
        .expect("the floor itself is accepted");
        assert_eq!((cfg.loop_connections(), cfg.api_connections()), (8, 4));
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_CLAIM_MAX_WAITERS", "4096"),
        ])
        .expect_err("refused");
        assert!(err.to_string().starts_with("claim_max_waiters"), "{err}");
    }

    #[test]
    fn a_non_loopback_listen_without_tokens_is_refused() {
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_LISTEN", "0.0.0.0:8080"),
        ])
        .expect_err("refused");
        assert!(err.to_string().contains("without authentication"), "{err}");
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_LISTEN", "0.0.0.0:8080"),
            ("KAIROS_AUTH_TOKENS", "s3cr3t-admin-token:admin"),
        ])
        .expect("allowed with tokens");
        assert!(
            !format!("{cfg:?}").contains("s3cr3t"),
            "tokens are never printed"
        );
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_AUTH_TOKENS", "x:superuser"),
        ])
        .expect_err("unknown role");
        assert!(err.to_string().contains("auth_tokens"), "{err}");
    }

    #[test]
    fn every_key_of_the_file_has_its_environment_variable() {
        let text = std::fs::read_to_string("config/kairos.toml").expect("config file");
        let keys: Vec<String> = text
            .lines()
            .map(|l| l.trim_start_matches('#').trim())
            .filter_map(|l| l.split_once(" = ").map(|(k, _)| k.trim().to_owned()))
            .filter(|k| k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .collect();
        assert!(keys.len() >= 20, "{keys:?}");
        let asked = std::sync::Mutex::new(Vec::new());
        let _ = Config::load_from(|k| {
            if let Ok(mut a) = asked.lock() {
                a.push(k.to_owned());
            }
            (k == "KAIROS_CONFIG").then(|| "config/kairos.toml".to_owned())
        });
        let asked = asked.into_inner().unwrap_or_default();
        for key in keys {
            let var = format!("KAIROS_{}", key.to_ascii_uppercase());
            assert!(asked.contains(&var), "{var} is never read");
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_LISTEN", "nowhere"),
        ])
        .expect_err("invalid");
        assert!(err.to_string().contains("KAIROS_LISTEN"), "{err}");
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_TRIGGER_BATCH_SIZE", "0"),
        ])
        .expect_err("invalid");
        assert!(err.to_string().contains("trigger_batch_size"), "{err}");
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_OTEL_ENDPOINT", "collector:4318"),
        ])
        .expect_err("invalid");
        assert!(err.to_string().contains("otel_endpoint"), "{err}");
        let ok = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_OTEL_ENDPOINT", "http://127.0.0.1:4318"),
        ])
        .expect("valid");
        assert_eq!(ok.otel_endpoint, "http://127.0.0.1:4318");
        let err = load(&[("KAIROS_CONFIG", "/nonexistent/kairos.toml")]).expect_err("missing");
        assert!(
            err.to_string().contains("/nonexistent/kairos.toml"),
            "{err}"
        );
    }
}
