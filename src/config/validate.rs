//! The rules a loaded [`Config`] must keep: the range of each key, the URLs' schemes, and the
//! rules between keys (the pool against the loops' connections, PgBouncer against LISTEN and
//! migrations, a public listener against running without tokens). Each refusal names its key.

use super::{
    Config, ConfigError, DatabasePooler, LISTEN_CONNECTIONS, MIN_API_CONNECTIONS,
    SHARED_LOOP_CONNECTIONS, WATCH_CONNECTIONS, invalid,
};

/// An absolute http(s) URL with a host.
fn is_http_url(s: &str) -> bool {
    url::Url::parse(s).is_ok_and(|u| {
        matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty())
    })
}

impl Config {
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

    /// Checks every key against its bounds and the rules between keys; the first broken one is
    /// the error, named by its key.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
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
                     loops, {WATCH_CONNECTIONS} for the database watch, and the API needs at \
                     least {MIN_API_CONNECTIONS}"
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
    use crate::config::load_with as load;

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
    fn too_few_connections_for_the_loops_and_the_api_are_refused() {
        let err = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_DATABASE_MAX_CONNECTIONS", "12"),
        ])
        .expect_err("refused");
        let text = err.to_string();
        assert!(
            text.starts_with("database_max_connections: must be from 13 to 1000"),
            "{text}"
        );
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            ("KAIROS_DATABASE_MAX_CONNECTIONS", "13"),
        ])
        .expect("the floor itself is accepted");
        assert_eq!((cfg.loop_connections(), cfg.api_connections()), (9, 4));
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
}
