//! An agent worker as a careful agent writes one: long-polls `POST /v1/claims` with a fresh
//! `claim_id` per claim and the SAME one when it retries a claim that failed or timed out,
//! "runs" each instance it gets (records it), and completes it with its lease token, retrying
//! errors and 503s with a short sleep. It never heartbeats.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Pause between retries of a failed call.
const RETRY_SLEEP: Duration = Duration::from_millis(200);

/// What the workers of a test saw.
#[derive(Default)]
pub struct Runs {
    inner: Mutex<RunsInner>,
}

#[derive(Default)]
struct RunsInner {
    /// (task_id, window_key) -> how many times a worker ran it.
    runs: HashMap<(String, String), u32>,
    /// task_id -> when a worker first received an instance of it.
    first_run: HashMap<String, Instant>,
    /// Instances received with attempt > 1: (task_id, window_key, attempt).
    retried: Vec<(String, String, i64)>,
    /// Completions refused with 409: the lease was lost. (task_id, window_key).
    lost_leases: Vec<(String, String)>,
    /// Calls that failed (no answer, or 5xx) and were retried, by kind: "claim 503", ...
    retries: HashMap<String, u64>,
    /// Answers a worker cannot handle (4xx other than 409 on a completion): it stops.
    fatal: Vec<String>,
    /// Claims answered 200 (with or without instances) and completions answered 200.
    claims_ok: u64,
    completions_ok: u64,
}

/// A copy of what the workers saw, for assertions and printing.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub runs: HashMap<(String, String), u32>,
    pub retried: Vec<(String, String, i64)>,
    pub lost_leases: Vec<(String, String)>,
    pub retries: HashMap<String, u64>,
    pub fatal: Vec<String>,
    pub claims_ok: u64,
    pub completions_ok: u64,
}

impl Snapshot {
    /// (task, window) pairs a worker ran more than once.
    pub fn twice(&self) -> Vec<(&(String, String), u32)> {
        let mut v: Vec<_> = self
            .runs
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, n)| (k, *n))
            .collect();
        v.sort();
        v
    }

    pub fn total_runs(&self) -> u64 {
        self.runs.values().map(|n| u64::from(*n)).sum()
    }
}

impl Runs {
    pub fn snapshot(&self) -> Snapshot {
        let g = self.inner.lock().expect("runs lock");
        Snapshot {
            runs: g.runs.clone(),
            retried: g.retried.clone(),
            lost_leases: g.lost_leases.clone(),
            retries: g.retries.clone(),
            fatal: g.fatal.clone(),
            claims_ok: g.claims_ok,
            completions_ok: g.completions_ok,
        }
    }

    /// When a worker first received an instance of `task_id`.
    pub fn first_run(&self, task_id: &str) -> Option<Instant> {
        self.inner
            .lock()
            .expect("runs lock")
            .first_run
            .get(task_id)
            .copied()
    }

    /// Panic with what a worker could not handle, if anything.
    pub fn assert_no_fatal(&self) {
        let fatal = self.inner.lock().expect("runs lock").fatal.clone();
        assert!(fatal.is_empty(), "a worker stopped: {fatal:?}");
    }

    fn with<T>(&self, f: impl FnOnce(&mut RunsInner) -> T) -> T {
        let mut g = self.inner.lock().expect("runs lock");
        f(&mut g)
    }

    fn retry(&self, kind: String) {
        self.with(|g| *g.retries.entry(kind).or_default() += 1);
    }
}

/// Settings of the workers of one test.
#[derive(Clone)]
pub struct AgentConfig {
    pub base: String,
    pub agent_id: String,
    pub max_instances: i64,
    pub lease_seconds: i64,
    pub wait_seconds: i64,
    /// The HTTP client's timeout for every call.
    pub timeout: Duration,
}

/// Workers running until `stop`; `stop` lets each finish the claim it is in (and complete what
/// it got) before it returns, so no lease is abandoned.
pub struct Workers {
    stop: CancellationToken,
    set: JoinSet<()>,
}

impl Workers {
    pub fn start(cfg: &AgentConfig, count: usize, runs: &Arc<Runs>) -> Workers {
        let stop = CancellationToken::new();
        let mut set = JoinSet::new();
        for i in 0..count {
            let worker = Worker {
                cfg: cfg.clone(),
                worker_id: format!("{}-w{i}", cfg.agent_id),
                client: reqwest::Client::builder()
                    .timeout(cfg.timeout)
                    .build()
                    .expect("http client"),
                runs: runs.clone(),
                stop: stop.clone(),
            };
            set.spawn(worker.run());
        }
        Workers { stop, set }
    }

    /// Ask every worker to stop and wait (at most `within`) until they have.
    pub async fn stop(mut self, within: Duration) {
        self.stop.cancel();
        let all = async {
            while let Some(r) = self.set.join_next().await {
                r.expect("worker task");
            }
        };
        tokio::time::timeout(within, all)
            .await
            .expect("the workers to stop (each finishes its claim and completions)");
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.set.abort_all();
    }
}

struct Worker {
    cfg: AgentConfig,
    worker_id: String,
    client: reqwest::Client,
    runs: Arc<Runs>,
    stop: CancellationToken,
}

enum Answer {
    /// 2xx with its body.
    Ok(Value),
    /// 409.
    Conflict,
    /// Worth retrying (no answer, 5xx, 429): what happened.
    Retry(String),
    /// Anything else: status and body.
    Fatal(String),
}

impl Worker {
    async fn post(&self, path: &str, body: &Value) -> Answer {
        let resp = match self
            .client
            .post(format!("{}{path}", self.cfg.base))
            .json(body)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return Answer::Retry("timeout".to_owned()),
            Err(e) if e.is_connect() => return Answer::Retry("connect".to_owned()),
            Err(_) => return Answer::Retry("transport".to_owned()),
        };
        let status = resp.status().as_u16();
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) if e.is_timeout() => return Answer::Retry("timeout".to_owned()),
            Err(_) => return Answer::Retry("transport".to_owned()),
        };
        match status {
            200..=299 => Answer::Ok(serde_json::from_str(&text).unwrap_or(Value::Null)),
            409 => Answer::Conflict,
            429 | 500..=599 => Answer::Retry(status.to_string()),
            _ => Answer::Fatal(format!("{path} answered {status}: {text}")),
        }
    }

    async fn run(self) {
        while !self.stop.is_cancelled() {
            let Some(instances) = self.claim().await else {
                return;
            };
            let mut completions = JoinSet::new();
            for inst in instances {
                let task = inst["task_id"].as_str().unwrap_or_default().to_owned();
                let window = inst["window_key"].as_str().unwrap_or_default().to_owned();
                let attempt = inst["attempt"].as_i64().unwrap_or(0);
                self.runs.with(|g| {
                    *g.runs.entry((task.clone(), window.clone())).or_default() += 1;
                    g.first_run.entry(task.clone()).or_insert_with(Instant::now);
                    if attempt != 1 {
                        g.retried.push((task.clone(), window.clone(), attempt));
                    }
                });
                let id = inst["id"].as_str().unwrap_or_default().to_owned();
                let token = inst["lease_token"].clone();
                let me = Worker {
                    cfg: self.cfg.clone(),
                    worker_id: self.worker_id.clone(),
                    client: self.client.clone(),
                    runs: self.runs.clone(),
                    stop: self.stop.clone(),
                };
                completions.spawn(async move { me.complete(&id, token, task, window).await });
            }
            while let Some(r) = completions.join_next().await {
                if !r.expect("completion task") {
                    return;
                }
            }
        }
    }

    /// One claim, retried with the same `claim_id` until it is answered; `None` when the worker
    /// must stop (a fatal answer).
    async fn claim(&self) -> Option<Vec<Value>> {
        let claim_id = uuid::Uuid::new_v4().to_string();
        let body = json!({
            "agent_id": self.cfg.agent_id,
            "worker_id": self.worker_id,
            "max_instances": self.cfg.max_instances,
            "lease_seconds": self.cfg.lease_seconds,
            "wait_seconds": self.cfg.wait_seconds,
            "claim_id": claim_id,
        });
        loop {
            match self.post("/v1/claims", &body).await {
                Answer::Ok(v) => {
                    self.runs.with(|g| g.claims_ok += 1);
                    return Some(v["instances"].as_array().cloned().unwrap_or_default());
                }
                Answer::Retry(why) => self.runs.retry(format!("claim {why}")),
                Answer::Conflict => self.runs.retry("claim 409".to_owned()),
                Answer::Fatal(what) => {
                    self.runs.with(|g| g.fatal.push(what));
                    return None;
                }
            }
            tokio::time::sleep(RETRY_SLEEP).await;
        }
    }

    /// Complete until answered: `true` on 200 or 409 (lease lost, recorded), `false` on a fatal
    /// answer.
    async fn complete(&self, id: &str, token: Value, task: String, window: String) -> bool {
        let body = json!({"lease_token": token});
        let path = format!("/v1/instances/{id}/complete");
        loop {
            match self.post(&path, &body).await {
                Answer::Ok(_) => {
                    self.runs.with(|g| g.completions_ok += 1);
                    return true;
                }
                Answer::Conflict => {
                    self.runs.with(|g| g.lost_leases.push((task, window)));
                    return true;
                }
                Answer::Retry(why) => self.runs.retry(format!("complete {why}")),
                Answer::Fatal(what) => {
                    self.runs.with(|g| g.fatal.push(what));
                    return false;
                }
            }
            tokio::time::sleep(RETRY_SLEEP).await;
        }
    }
}
