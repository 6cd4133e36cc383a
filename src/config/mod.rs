//! Typed settings. Sources, later ones winning: built-in defaults, the TOML file
//! (`KAIROS_CONFIG`, else `config/kairos.toml` when it exists), then one `KAIROS_<KEY>` variable
//! per key, and `DATABASE_URL`. Every key carries its unit in its name. `Config::load` validates
//! everything and says exactly which key is wrong.
//!
//! Each key is written once, in the `settings!` table below: its type, its default and its
//! variable all come from that line. `values` holds the types of the keys that are not plain
//! numbers or strings; `validate` the bounds and the rules between keys.

mod validate;
mod values;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

pub use crate::store::{DatabasePooler, LISTEN_CONNECTIONS};
pub use values::{DatabaseUrl, LogFormat, Secret, redact_database_url};

/// Declares every setting once, as `key: Type = default`, and makes from that one list the
/// [`Config`] struct, its `Default` and the reading of each key's `KAIROS_<KEY>` variable, so a
/// key cannot be added to one of them and missed in another.
macro_rules! settings {
    ($($(#[$doc:meta])* $key:ident: $ty:ty = $default:expr,)*) => {
        /// Every setting; see `config/kairos.toml` for the documented defaults.
        #[derive(Debug, Clone, PartialEq, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct Config {
            $($(#[$doc])* pub $key: $ty,)*
        }

        impl Default for Config {
            fn default() -> Self {
                Self {
                    $($key: $default,)*
                }
            }
        }

        impl Config {
            /// One `KAIROS_<KEY>` per key of the file, in the table's order; the field name is
            /// the key.
            fn apply_key_env(
                &mut self,
                env: &impl Fn(&str) -> Option<String>,
            ) -> Result<(), ConfigError> {
                $(
                    let var = format!("KAIROS_{}", stringify!($key).to_ascii_uppercase());
                    set_from_env(env, &var, &mut self.$key)?;
                )*
                Ok(())
            }
        }
    };
}

settings! {
    database_url: DatabaseUrl =
        DatabaseUrl("postgres://kairos:kairos@127.0.0.1:5432/kairos".to_owned()),
    /// `pgbouncer` when `database_url` goes through PgBouncer in transaction pooling mode.
    database_pooler: DatabasePooler = DatabasePooler::None,
    /// The URL of the LISTEN connections, which need a session of their own; empty: `database_url`.
    listen_database_url: DatabaseUrl = DatabaseUrl(String::new()),
    /// The URL migrations run over (they hold a session advisory lock); empty: `database_url`.
    migrate_database_url: DatabaseUrl = DatabaseUrl(String::new()),
    database_max_connections: u32 = 24,
    listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8080)),
    node_id: String = default_node_id(),
    log_format: LogFormat = LogFormat::Text,
    log_level: String = "info".to_owned(),
    max_body_bytes: usize = 256 * 1024,
    trigger_batch_size: i64 = 500,
    trigger_max_sleep_ms: u64 = 10_000,
    trigger_parallelism: usize = 4,
    trigger_lead_ms: u64 = 1000,
    retry_scan_interval_ms: u64 = 1000,
    retry_batch_size: i64 = 100,
    reaper_interval_ms: u64 = 1000,
    reaper_batch_size: i64 = 500,
    default_lease_seconds: i64 = 60,
    max_lease_seconds: i64 = 3600,
    claim_max_wait_seconds: i64 = 30,
    claim_max_waiters: usize = 1024,
    http_header_read_timeout_seconds: u64 = 10,
    http_request_timeout_seconds: u64 = 30,
    http_max_connections: usize = 4096,
    shutdown_grace_seconds: u64 = 10,
    shutdown_drain_ms: u64 = 1000,
    /// `"<token>:<role>[:<agent>|<agent>…],…"`; empty runs open, on loopback only.
    auth_tokens: Secret = Secret::default(),
    /// The base URL agents reach this replica at, for webhook callback URLs.
    public_url: String = String::new(),
    /// Hosts webhook and notification URLs may name (comma-separated); empty allows any.
    outbound_allowed_hosts: String = String::new(),
    /// Refuse loopback and private destinations too (link-local and the like always are).
    outbound_deny_private: bool = false,
    webhook_interval_ms: u64 = 1000,
    webhook_max_in_flight: usize = 512,
    webhook_max_per_task: i64 = 256,
    notifier_interval_ms: u64 = 1000,
    notify_max_age_seconds: i64 = 86_400,
    notify_timeout_seconds: u64 = 10,
    retention_days: i64 = 30,
    pruner_interval_ms: u64 = 60_000,
    pruner_batch_size: i64 = 1000,
    stats_interval_ms: u64 = 5000,
    database_unavailable_answer_ms: u64 = 2000,
    db_statement_timeout_ms: u64 = 15_000,
    db_lock_timeout_ms: u64 = 10_000,
    db_idle_in_transaction_timeout_ms: u64 = 30_000,
    db_keepalive_seconds: u64 = 5,
    loop_pass_timeout_ms: u64 = 30_000,
    agent_absent_seconds: i64 = 60,
    /// `serve` applies pending migrations at start; false: it never changes the schema and
    /// refuses to start on a database that lacks one of its migrations.
    migrate: bool = true,
    /// OpenTelemetry collector base URL (OTLP/HTTP, JSON): spans go to `<otel_endpoint>/v1/traces`.
    /// Empty: nothing is exported.
    otel_endpoint: String = String::new(),
}

/// Connections the background loops other than the trigger's batches share (retry scanner,
/// reaper, dispatcher, notifier, pruner, stats sampler: short transactions that may queue).
pub const SHARED_LOOP_CONNECTIONS: u32 = 2;
/// The database watch's own connection: it tells an outage from a lock wait, so no loop that
/// waits for a lock may hold the connection it probes with.
pub const WATCH_CONNECTIONS: u32 = 1;
/// Fewest connections the API pool may have (group commits plus a claim).
pub const MIN_API_CONNECTIONS: u32 = 4;

/// The database session bounds of this configuration.
impl From<&Config> for crate::store::DbSettings {
    fn from(cfg: &Config) -> Self {
        Self {
            acquire_timeout: std::time::Duration::from_millis(cfg.database_unavailable_answer_ms),
            statement_timeout_ms: cfg.db_statement_timeout_ms,
            lock_timeout_ms: cfg.db_lock_timeout_ms,
            idle_in_transaction_timeout_ms: cfg.db_idle_in_transaction_timeout_ms,
            keepalive_seconds: cfg.db_keepalive_seconds,
            ping_timeout: std::time::Duration::from_millis(cfg.database_unavailable_answer_ms),
            pooler: cfg.database_pooler,
        }
    }
}

/// The session bounds of the default configuration.
impl Default for crate::store::DbSettings {
    fn default() -> Self {
        Self::from(&Config::default())
    }
}

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

    /// Connections kept from the API: LISTEN's, the background loops' own pool, and the
    /// database watch's (the API cannot exhaust them).
    pub fn loop_connections(&self) -> u32 {
        LISTEN_CONNECTIONS + self.loop_pool_connections() + WATCH_CONNECTIONS
    }

    /// Size of the background loops' own pool: the trigger's batches and the shared loops.
    pub fn loop_pool_connections(&self) -> u32 {
        u32::try_from(self.trigger_parallelism)
            .unwrap_or(u32::MAX)
            .saturating_add(SHARED_LOOP_CONNECTIONS)
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
        self.apply_key_env(env)?;
        // The conventional variable wins over KAIROS_DATABASE_URL.
        set_from_env(env, "DATABASE_URL", &mut self.database_url)?;
        Ok(())
    }
}

/// Parses `var`, when it is set, into `slot`; a value that does not parse names the variable.
fn set_from_env<T: FromStr>(
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

/// Loads with `vars` as the whole environment.
#[cfg(test)]
fn load_with(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: std::collections::HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::load_from(|k| map.get(k).cloned())
}

#[cfg(test)]
mod tests {
    use super::load_with as load;
    use super::*;

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
