//! Steps the database fault tests share: the test's own connection, HTTP sends retried until
//! an expected answer, checks polled until a deadline, and progress lines.

use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// The test's own look at the database, straight to the cluster (never through a proxy or a pooler).
pub async fn connect(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .expect("connect to the test cluster")
}

pub fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .expect("http client")
}

/// Send until an answer with a status in `ok` comes, retrying errors and other statuses
/// every 200 ms; panic after `deadline` with the last thing seen.
pub async fn send_until(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: &Value,
    ok: &[u16],
    deadline: Duration,
) -> (u16, Value) {
    let start = Instant::now();
    loop {
        let last = match client.request(method.clone(), url).json(body).send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let text = resp.text().await.unwrap_or_default();
                let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
                if ok.contains(&status) {
                    return (status, v);
                }
                format!("{status}: {v}")
            }
            Err(e) => format!("{e}"),
        };
        assert!(
            start.elapsed() < deadline,
            "{method} {url}: no answer in {ok:?} within {deadline:?}; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Poll `check` every 100 ms until it gives `Some`; `None` after `deadline`.
pub async fn within<T, F, Fut>(deadline: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if start.elapsed() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn scalar(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A line per outage phase, with the time since the test began.
pub fn phase(start: Instant, what: &str) {
    eprintln!("[{:>6.1} s] {what}", start.elapsed().as_secs_f64());
}

/// The instances of the tasks `like` (a `LIKE` pattern) due by a cutoff two seconds before it
/// was taken, by the database clock: what the workers must have drained once they catch up.
pub struct Due {
    pool: PgPool,
    like: &'static str,
    cutoff: chrono::DateTime<chrono::Utc>,
}

impl Due {
    pub async fn now(pool: &PgPool, like: &'static str) -> Due {
        let cutoff = sqlx::query_scalar("select now() - interval '2 seconds'")
            .fetch_one(pool)
            .await
            .expect("database clock");
        Due {
            pool: pool.clone(),
            like,
            cutoff,
        }
    }

    /// How many of them are not SUCCESS.
    pub async fn undrained(&self) -> i64 {
        sqlx::query_scalar(
            "select count(*) from task_instance \
             where task_id like $1 and scheduled_at <= $2 and status <> 'SUCCESS'",
        )
        .bind(self.like)
        .bind(self.cutoff)
        .fetch_one(&self.pool)
        .await
        .expect("count undrained")
    }

    /// Whether every one of them is SUCCESS within `deadline`.
    pub async fn drained_within(&self, deadline: Duration) -> bool {
        within(deadline, || async {
            (self.undrained().await == 0).then_some(())
        })
        .await
        .is_some()
    }
}

/// The windows of the tasks `like`, counted per task from its first window to its last (one
/// per second): how many there are, how many seconds have none, how many keys are repeated,
/// how many keys are not the schedule's spelling of their instant.
pub struct Windows {
    pub tasks: usize,
    pub windows: i64,
    pub lost: i64,
    pub duplicate_keys: i64,
    pub misspelled: i64,
    /// The fewest windows of one task.
    pub fewest: i64,
}

impl Windows {
    pub async fn of(pool: &PgPool, like: &'static str) -> Windows {
        let per_task: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
            "select task_id, count(*), count(distinct window_key), \
                 extract(epoch from max(scheduled_at) - min(scheduled_at))::bigint + 1, \
                 count(*) filter (where window_key <> \
                     to_char(scheduled_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')) \
             from task_instance where task_id like $1 group by task_id order by task_id",
        )
        .bind(like)
        .fetch_all(pool)
        .await
        .expect("windows per task");
        Windows {
            tasks: per_task.len(),
            windows: per_task.iter().map(|r| r.1).sum(),
            lost: per_task.iter().map(|r| r.3 - r.1).sum(),
            duplicate_keys: per_task.iter().map(|r| r.1 - r.2).sum(),
            misspelled: per_task.iter().map(|r| r.4).sum(),
            fewest: per_task.iter().map(|r| r.1).min().unwrap_or(0),
        }
    }
}
