//! A shared limit's live usage, read the same way for `/v1/limits` and the console's Limits page.

use sqlx::PgPool;

use crate::store::{self, limits as store_limits};

/// Most keys a per_key limit's view lists (the busiest).
pub const MAX_KEYS_SHOWN: i64 = 20;

/// The usage of limit `name`: units in use, and its busiest keys (at most [`MAX_KEYS_SHOWN`]).
pub async fn usage(pool: &PgPool, name: &str) -> Result<store_limits::Usage, store::Error> {
    store_limits::usage(pool, name, MAX_KEYS_SHOWN).await
}
