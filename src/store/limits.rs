//! Shared limits: their definitions (`limits`), the state of each budget (`limit_state`: the
//! rate's theoretical arrival time and holds) and the units RUNNING instances hold
//! (`limit_units`). The rules are [`crate::domain::limit`]; how claims use them is
//! [`super::claim`].
//!
//! Lock order: an instance row, then budget rows in `(limit_name, key)` order. Claims lock the
//! budgets they admit starts on (and wait for them: admissions of one budget are serialised
//! across replicas); holds lock one budget. Units are written by the claim that makes an
//! instance RUNNING and deleted by a trigger when it leaves RUNNING by any path, so no exit can
//! forget to give them back.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::statements::sql;
use super::{Error, Result};
use crate::domain::limit::{Budget, LimitSpec, micros};
use crate::domain::task::FieldError;

/// A stored limit.
#[derive(Debug, Clone)]
pub struct Limit {
    pub name: String,
    pub spec: LimitSpec,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct LimitRow {
    name: String,
    spec: Json<LimitSpec>,
    version: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<LimitRow> for Limit {
    fn from(r: LimitRow) -> Self {
        Limit {
            name: r.name,
            spec: r.spec.0,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// What a PUT did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upserted {
    Created,
    Replaced,
    Unchanged,
}

pub async fn get_limit(pool: &PgPool, name: &str) -> Result<Limit> {
    let row: LimitRow = sqlx::query_as(sql!("limits/get"))
        .bind(name)
        .fetch_one(pool)
        .await?;
    Ok(row.into())
}

/// Up to `limit` limits by name, those after `after` (from the first when `None`).
pub async fn list_limits(pool: &PgPool, after: Option<&str>, limit: i64) -> Result<Vec<Limit>> {
    let rows: Vec<LimitRow> = sqlx::query_as(sql!("limits/list"))
        .bind(after)
        .bind(limit)
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(Limit::from).collect())
}

/// The tasks whose `execution.limits` name `name`, with the entry (cost, whether it has a key).
async fn tasks_drawing_on(conn: &mut PgConnection, name: &str) -> Result<Vec<(String, i64, bool)>> {
    sqlx::query_as(sql!("limits/tasks_drawing_on"))
        .bind(name)
        .fetch_all(&mut *conn)
        .await
        .map_err(crate::store::Error::from)
}

/// Create or replace a limit declaratively: the same spec changes nothing (not even the
/// version); a change that would leave a task drawing on it unable ever to start is a conflict
/// naming the task. A changed rate applies from the change on (the budget's state is kept).
pub async fn upsert_limit(
    pool: &PgPool,
    name: &str,
    spec: &LimitSpec,
    if_match: Option<i64>,
) -> Result<(Upserted, Limit)> {
    let mut tx = crate::store::begin(pool).await?;
    let existing: Option<LimitRow> = sqlx::query_as(sql!("limits/lock_for_upsert"))
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    if let Some(v) = if_match {
        match &existing {
            Some(l) if l.version == v => {}
            Some(l) => return Err(Error::VersionMismatch { current: l.version }),
            None => return Err(Error::VersionMismatch { current: 0 }),
        }
    }
    let outcome = match existing {
        Some(l) if l.spec.0 == *spec => {
            tx.commit().await?;
            return Ok((Upserted::Unchanged, l.into()));
        }
        Some(l) => {
            for (task, cost, has_key) in tasks_drawing_on(&mut tx, name).await? {
                if let Some(why) = spec.refuses_cost(cost) {
                    return Err(Error::Conflict(format!(
                        "task {task:?} draws {cost} units on this limit, whose cost {why}; \
                         change the task first"
                    )));
                }
                if spec.per_key && !has_key {
                    return Err(Error::Conflict(format!(
                        "task {task:?} draws on this limit without a key, which a per_key \
                         limit requires; give the task a key first"
                    )));
                }
            }
            // A hold belongs to a budget, and turning per_key on or off makes other budgets:
            // refused while one is held rather than moving a hold where it was not meant.
            if l.spec.0.per_key != spec.per_key {
                let held: i64 = sqlx::query_scalar(sql!("limits/held_budgets"))
                    .bind(name)
                    .fetch_one(&mut *tx)
                    .await?;
                if held > 0 {
                    return Err(Error::Conflict(format!(
                        "{held} budget(s) of this limit are held; per_key changes which budgets \
                         there are, so release the holds (or let them end) first"
                    )));
                }
            }
            // Units held by running instances move to the budgets the new spec keeps: every
            // key to '' when per_key is turned off, each instance's rendered key when it is
            // turned on.
            sqlx::query(sql!("limits/move_units"))
                .bind(name)
                .bind(spec.per_key)
                .execute(&mut *tx)
                .await?;
            sqlx::query(sql!("limits/replace"))
                .bind(name)
                .bind(Json(spec))
                .execute(&mut *tx)
                .await?;
            Upserted::Replaced
        }
        None => {
            let inserted = sqlx::query(sql!("limits/insert"))
                .bind(name)
                .bind(Json(spec))
                .execute(&mut *tx)
                .await?;
            if inserted.rows_affected() == 0 {
                return Err(Error::Conflict(format!(
                    "limit {name:?} was created concurrently; retry the request"
                )));
            }
            Upserted::Created
        }
    };
    let row: LimitRow = sqlx::query_as(sql!("limits/get"))
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok((outcome, row.into()))
}

/// Delete a limit: a conflict naming the tasks while any task draws on it.
pub async fn delete_limit(pool: &PgPool, name: &str) -> Result<()> {
    let mut tx = crate::store::begin(pool).await?;
    let found: Option<String> = sqlx::query_scalar(sql!("limits/lock_for_delete"))
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    if found.is_none() {
        return Err(Error::NotFound);
    }
    let users = tasks_drawing_on(&mut tx, name).await?;
    if !users.is_empty() {
        let names: Vec<&str> = users.iter().take(10).map(|u| u.0.as_str()).collect();
        return Err(Error::Conflict(format!(
            "tasks draw on limit {name:?}: {}{}",
            names.join(", "),
            if users.len() > 10 { ", …" } else { "" }
        )));
    }
    sqlx::query(sql!("limits/delete"))
        .bind(name)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// In a task's upsert transaction: check its `execution.limits` against the limits (locked
/// `for share` until the task is written, so none is deleted or changed meanwhile). Returns the
/// first problem, naming its field.
pub async fn check_draws(
    conn: &mut PgConnection,
    draws: &[crate::domain::limit::Draw],
) -> Result<()> {
    if draws.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = draws.iter().map(|d| d.name.as_str()).collect();
    let found: Vec<(String, Json<LimitSpec>)> = sqlx::query_as(sql!("limits/check_draws"))
        .bind(&names)
        .fetch_all(&mut *conn)
        .await?;
    let specs: HashMap<&str, &LimitSpec> = found.iter().map(|(n, s)| (n.as_str(), &s.0)).collect();
    for (i, d) in draws.iter().enumerate() {
        let Some(spec) = specs.get(d.name.as_str()) else {
            return Err(Error::Invalid(FieldError::new(
                format!("execution.limits[{i}].name"),
                format!(
                    "no limit named {:?} (create it with PUT /v1/limits/{{name}})",
                    d.name
                ),
            )));
        };
        if spec.per_key && d.key.as_deref().is_none_or(str::is_empty) {
            return Err(Error::Invalid(FieldError::new(
                format!("execution.limits[{i}].key"),
                format!("is required: limit {:?} keeps a budget per key", d.name),
            )));
        }
        if let Some(why) = spec.refuses_cost(d.cost) {
            return Err(Error::Invalid(FieldError::new(
                format!("execution.limits[{i}].cost"),
                why,
            )));
        }
    }
    Ok(())
}

/// Render the draws of a task's waiting (PENDING, FAILED) instances afresh, after its limits or
/// its context changed. Returns how many instances were rendered.
pub async fn render_waiting_draws(conn: &mut PgConnection, task_id: &str) -> Result<u64> {
    Ok(sqlx::query(sql!("limits/render_waiting_draws"))
        .bind(task_id)
        .execute(&mut *conn)
        .await?
        .rows_affected())
}

/// A budget's identity: the limit and the key (`""` for a limit without `per_key`).
pub type BudgetKey = (String, String);

#[derive(sqlx::FromRow)]
struct BudgetRow {
    name: String,
    key: String,
    spec: Json<LimitSpec>,
    running: i64,
    tat: Option<DateTime<Utc>>,
    held_until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
}

/// The budgets of `draws` (limit name, rendered key) as they are now: found by the rendered
/// key, each key mapped to its budget (`""` for a limit without `per_key`). Draws on a limit
/// that no longer exists have no budget. With `lock`, the budgets' rows are created when
/// missing and locked in `(limit_name, key)` order first, and the budgets are read after the
/// locks are held (a fresh snapshot: every admission committed before is seen), at
/// `clock_timestamp()`, the instant the caller must record its starts at.
pub async fn read_budgets(
    conn: &mut PgConnection,
    draws: &[(String, String)],
    lock: bool,
) -> Result<Budgets> {
    let mut names: Vec<&str> = Vec::new();
    let mut keys: Vec<&str> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (n, k) in draws {
        if seen.insert((n.as_str(), k.as_str())) {
            names.push(n);
            keys.push(k);
        }
    }
    if lock && !lock_budgets(conn, &names, &keys).await? {
        // Create missing budgets (a concurrent first insert waits for the other's commit),
        // then lock all of them in one order.
        sqlx::query(sql!("limits/create_budgets"))
            .bind(&names)
            .bind(&keys)
            .execute(&mut *conn)
            .await?;
        sqlx::query(sql!("limits/lock_budgets"))
            .bind(&names)
            .bind(&keys)
            .execute(&mut *conn)
            .await?;
    }
    let rows: Vec<BudgetRow> = sqlx::query_as(sql!("limits/read_budgets"))
        .bind(&names)
        .bind(&keys)
        .fetch_all(&mut *conn)
        .await?;
    let now = rows.first().map(|r| r.now).unwrap_or_else(Utc::now);
    // One budget per (limit, effective key): draws of one limit with different rendered keys
    // share it when the limit is not per_key.
    let mut out = Budgets {
        of_draw: HashMap::new(),
        list: Vec::new(),
        ids: Vec::new(),
        now,
    };
    let mut by_effective: HashMap<BudgetKey, usize> = HashMap::new();
    for r in rows {
        let effective = if r.spec.0.per_key {
            r.key.clone()
        } else {
            String::new()
        };
        let at = *by_effective
            .entry((r.name.clone(), effective.clone()))
            .or_insert_with(|| {
                out.list.push(Budget {
                    spec: r.spec.0.clone(),
                    running: r.running,
                    tat: r.tat.map(micros),
                    held_until: r.held_until.map(micros),
                    now: micros(now),
                });
                out.ids.push((r.name.clone(), effective));
                out.list.len() - 1
            });
        out.of_draw.insert((r.name, r.key), at);
    }
    Ok(out)
}

/// Budgets as [`read_budgets`] found them.
pub struct Budgets {
    /// (limit, rendered key) → index in `list`.
    pub of_draw: HashMap<BudgetKey, usize>,
    pub list: Vec<Budget>,
    /// Each budget's (limit, effective key), by index.
    pub ids: Vec<BudgetKey>,
    /// The instant they were read at.
    pub now: DateTime<Utc>,
}

impl Budgets {
    /// A row's draws as (budget index, cost); draws on limits that no longer exist are dropped.
    pub fn indexes(&self, draws: &[crate::domain::limit::RenderedDraw]) -> Vec<(usize, i64)> {
        draws
            .iter()
            .filter_map(|d| {
                self.of_draw
                    .get(&(d.name.clone(), d.key.clone()))
                    .map(|b| (*b, d.cost))
            })
            .collect()
    }
}

/// Lock the budgets of `(names, keys)` in `(limit_name, key)` order; whether every one of them
/// exists (otherwise the caller creates the missing ones and locks again).
async fn lock_budgets(conn: &mut PgConnection, names: &[&str], keys: &[&str]) -> Result<bool> {
    let (wanted, locked): (i64, i64) = sqlx::query_as(sql!("limits/lock_existing_budgets"))
        .bind(names)
        .bind(keys)
        .fetch_one(&mut *conn)
        .await?;
    Ok(locked >= wanted)
}

/// After admissions: store each rate budget's new theoretical arrival time. `tats` are
/// `(limit, effective key, tat)`; the rows are the ones [`read_budgets`] locked.
pub async fn store_tats(
    conn: &mut PgConnection,
    tats: &[(String, String, DateTime<Utc>)],
) -> Result<()> {
    if tats.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = tats.iter().map(|t| t.0.as_str()).collect();
    let keys: Vec<&str> = tats.iter().map(|t| t.1.as_str()).collect();
    let at: Vec<DateTime<Utc>> = tats.iter().map(|t| t.2).collect();
    sqlx::query(sql!("limits/store_tats"))
        .bind(&names)
        .bind(&keys)
        .bind(&at)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Units taken by starts, from their draws `(instance, draw)`: the unit's key is the draw's for
/// a `per_key` limit and `""` otherwise; a draw on a limit without concurrency takes none.
pub async fn insert_units(
    conn: &mut PgConnection,
    draws: &[(uuid::Uuid, &crate::domain::limit::RenderedDraw)],
) -> Result<()> {
    if draws.is_empty() {
        return Ok(());
    }
    let ids: Vec<uuid::Uuid> = draws.iter().map(|d| d.0).collect();
    let names: Vec<&str> = draws.iter().map(|d| d.1.name.as_str()).collect();
    let keys: Vec<&str> = draws.iter().map(|d| d.1.key.as_str()).collect();
    let costs: Vec<i32> = draws
        .iter()
        .map(|d| i32::try_from(d.1.cost).unwrap_or(i32::MAX))
        .collect();
    sqlx::query(sql!("limits/insert_units"))
        .bind(&ids)
        .bind(&names)
        .bind(&keys)
        .bind(&costs)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// In the caller's transaction: whether instance `id` is RUNNING under `lease_token`, its row
/// then locked (shared) until the transaction ends. A throttled attempt holds a limit only while
/// it holds its lease: a stale worker's late 429, or the same fail sent again after it landed,
/// holds nothing.
pub async fn attempt_holds_lease(
    conn: &mut PgConnection,
    id: uuid::Uuid,
    lease_token: uuid::Uuid,
) -> Result<bool> {
    let row: Option<uuid::Uuid> = sqlx::query_scalar(sql!("limits/attempt_holds_lease"))
        .bind(id)
        .bind(lease_token)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.is_some())
}

/// Hold a budget until `now + seconds` (never shortening a later hold): nothing starts on it
/// until then. `key` is the rendered key (ignored for a limit without `per_key`). Returns the
/// instant held until.
pub async fn hold(
    conn: &mut PgConnection,
    name: &str,
    key: &str,
    seconds: i64,
    reason: &str,
) -> Result<Held> {
    let row: Option<(DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(sql!("limits/hold"))
        .bind(name)
        .bind(key)
        .bind(seconds as f64)
        .bind(reason)
        .fetch_optional(&mut *conn)
        .await?;
    row.map(|(until, asked)| Held { until, asked })
        .ok_or(Error::NotFound)
}

/// What [`hold`] did.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    /// The budget is held until then (a later hold already in place is kept).
    pub until: DateTime<Utc>,
    /// The end this hold asked for: now + its seconds.
    pub asked: DateTime<Utc>,
}

/// Lift a hold (all keys of the limit when `key` is None). Returns the budgets released.
pub async fn release(pool: &PgPool, name: &str, key: Option<&str>) -> Result<u64> {
    let mut tx = super::begin(pool).await?;
    let released = sqlx::query(sql!("limits/release"))
        .bind(name)
        .bind(key)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(released)
}

/// One budget's live usage.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyUsage {
    pub key: String,
    pub running: i64,
    pub tat: Option<DateTime<Utc>>,
    pub held_until: Option<DateTime<Utc>>,
    pub held_reason: Option<String>,
}

/// A limit's live usage: its budgets with units running or state, busiest first (at most
/// `top` of them), the total units running, and the database's now.
pub struct Usage {
    pub keys: Vec<KeyUsage>,
    pub running: i64,
    pub now: DateTime<Utc>,
}

pub async fn usage(pool: &PgPool, name: &str, top: i64) -> Result<Usage> {
    let mut conn = pool.acquire().await?;
    let keys: Vec<KeyUsage> = sqlx::query_as(sql!("limits/usage_keys"))
        .bind(name)
        .bind(top)
        .fetch_all(&mut *conn)
        .await?;
    let (running, now): (i64, DateTime<Utc>) = sqlx::query_as(sql!("limits/usage_total"))
        .bind(name)
        .fetch_one(&mut *conn)
        .await?;
    Ok(Usage { keys, running, now })
}

/// The instance's draw on limit `name` (its rendered key), if it draws on it.
pub async fn instance_draw(
    pool: &PgPool,
    instance_id: uuid::Uuid,
    name: &str,
) -> Result<Option<String>> {
    let key: Option<Option<String>> = sqlx::query_scalar(sql!("limits/instance_draw"))
        .bind(instance_id)
        .bind(name)
        .fetch_optional(pool)
        .await?;
    match key {
        None => Err(Error::NotFound),
        Some(k) => Ok(k),
    }
}

/// Per limit: units held by RUNNING instances, and PENDING instances due now that draw on it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Gauge {
    pub name: String,
    pub in_use: i64,
    pub waiting: i64,
}

/// [`Gauge`]s of every limit (at most 1,000), for `kairos_limit_in_use` and
/// `kairos_limit_waiting`. The waiting count reads the due PENDING rows that draw on limits.
pub async fn gauges(pool: &PgPool) -> Result<Vec<Gauge>> {
    sqlx::query_as(sql!("limits/gauges"))
        .fetch_all(pool)
        .await
        .map_err(crate::store::Error::from)
}
