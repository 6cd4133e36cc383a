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
