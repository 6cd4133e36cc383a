//! The schema's migrations: embedded in the binary, applied once however many replicas start
//! at once, and what a database still lacks.

use sqlx::PgPool;

use super::Result;
use super::statements::sql;

/// Embedded migrations. sqlx takes a PostgreSQL advisory lock while applying them, so several
/// replicas starting at once apply each migration exactly once.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Apply pending migrations. A database migrated by a newer release (migrations this binary
/// does not know) is accepted: migrations only expand the schema, so an older replica keeps
/// working beside the newer one.
///
/// Replicas starting at once apply each migration exactly once: they take the migrator's
/// session advisory lock (the key sqlx's migrator uses, so releases that lock the sqlx way
/// exclude this one too), but by polling `pg_try_advisory_lock` rather than waiting in
/// `pg_advisory_lock`. A waiting statement holds a snapshot, and `CREATE INDEX CONCURRENTLY`
/// (20261203000013_debounce_index.sql) waits for every older snapshot to end: a replica
/// waiting for the lock while another builds an index concurrently would deadlock with it.
/// The lock lives on a connection of its own, closed at the end, which releases the lock
/// whatever happened.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    use sqlx::Connection;
    let mut migrator = sqlx::migrate::Migrator::with_migrations(MIGRATOR.iter().cloned().collect());
    migrator.set_ignore_missing(true);
    migrator.set_locking(false);
    let mut conn = pool.acquire().await?.detach();
    let database: String = sqlx::query_scalar(sql!("migrations/current_database"))
        .fetch_one(&mut conn)
        .await?;
    let key = migration_lock_key(&database);
    let mut said = false;
    loop {
        let got: bool = sqlx::query_scalar(sql!("migrations/try_lock"))
            .bind(key)
            .fetch_one(&mut conn)
            .await?;
        if got {
            break;
        }
        if !said {
            tracing::info!(
                database,
                "another process is applying migrations; waiting for it to finish"
            );
            said = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let applied = migrator.run(&mut conn).await;
    let closed = conn.close().await;
    applied?;
    closed?;
    Ok(())
}

/// The key of the migrator's advisory lock for `database`: sqlx's (a CRC-32 of the name times
/// a constant), so every release of kairos, whichever way it locks, takes the same lock.
pub fn migration_lock_key(database: &str) -> i64 {
    const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
    0x3d32_ad9e * i64::from(CRC.checksum(database.as_bytes()))
}

/// The embedded migrations this database has not applied, as `version_description`, oldest
/// first (all of them when it has none).
pub async fn missing_migrations(pool: &PgPool) -> Result<Vec<String>> {
    let exists: bool = sqlx::query_scalar(sql!("migrations/history_exists"))
        .fetch_one(pool)
        .await?;
    let applied: Vec<i64> = if exists {
        sqlx::query_scalar(sql!("migrations/applied_versions"))
            .fetch_all(pool)
            .await?
    } else {
        Vec::new()
    };
    Ok(MIGRATOR
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| format!("{}_{}", m.version, m.description.replace(' ', "_")))
        .collect())
}

/// True when every embedded migration has been applied to this database.
pub async fn migrations_applied(pool: &PgPool) -> Result<bool> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> = sqlx::query_scalar(sql!("migrations/latest_applied"))
        .fetch_one(pool)
        .await?;
    Ok(applied.unwrap_or(0) >= latest)
}
