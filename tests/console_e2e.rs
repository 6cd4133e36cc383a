//! The console in a real headless Chromium (over WebDriver) against a real kairos with tokens
//! and a real database: log in, act through the pages, and check what the database holds.
//!
//! With `KAIROS_SCREENSHOTS=<dir>`, `screenshots_of_the_tour` also saves the README's
//! screenshots (overview, task, dead-queue) there at 1280x800, and
//! `an_admin_holds_a_limit_and_the_waiting_instance_says_why` saves `limits` and
//! `instance-waiting`.

mod browser;
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use browser::{Browser, DEADLINE};
use chrono::{DateTime, Utc};
use common::{TestApp, eventually, json};
use kairos::app::Options;
use kairos::domain::access::Tokens;
use kairos::services::trigger_loop::TriggerLoopConfig;
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, COOKIE};
use serde_json::{Value, json};
use sqlx::PgPool;

const ADMIN: &str = "admin-token-1";
const VIEWER: &str = "viewer-token-1";

/// A daemon with an admin and a viewer token, no loops.
fn secured(node: &str) -> Options {
    let mut opts = Options::api_only(node);
    opts.tokens =
        Arc::new(Tokens::parse(&format!("{ADMIN}:admin,{VIEWER}:viewer")).expect("tokens"));
    opts
}

/// With a trigger loop that wakes at least every 200 ms.
fn with_trigger(mut opts: Options) -> Options {
    let mut cfg = TriggerLoopConfig::new(&opts.node_id);
    cfg.max_sleep = Duration::from_millis(200);
    opts.trigger = Some(cfg);
    opts
}

async fn start(pool: PgPool, opts: Options) -> (TestApp, Browser) {
    let app = TestApp::spawn_opts(pool, opts).await;
    let browser = Browser::new(&app.url("")).await;
    (app, browser)
}

/// An API call as the admin; the status and JSON body.
async fn api(app: &TestApp, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = app.client.request(method, app.url(path)).bearer_auth(ADMIN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    json(req.send().await.expect("request sent")).await
}

/// An API call as the admin that must succeed; its JSON body.
async fn api_ok(app: &TestApp, method: Method, path: &str, body: Value) -> Value {
    let (status, resp) = api(app, method.clone(), path, Some(body)).await;
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {resp}"
    );
    resp
}

async fn put_task(app: &TestApp, id: &str, spec: Value) {
    api_ok(app, Method::PUT, &format!("/v1/tasks/{id}"), spec).await;
}

/// Claim one instance of `agent`: (id, lease token, window key).
async fn claim_one(app: &TestApp, agent: &str) -> (String, String, String) {
    let resp = api_ok(
        app,
        Method::POST,
        "/v1/claims",
        json!({"agent_id": agent, "worker_id": format!("{agent}-w1"), "max_instances": 1}),
    )
    .await;
    let got = &resp["instances"][0];
    let field = |k: &str| {
        got[k]
            .as_str()
            .unwrap_or_else(|| panic!("claim of {agent}: no {k} in {resp}"))
            .to_owned()
    };
    (field("id"), field("lease_token"), field("window_key"))
}

/// How a claimed attempt ends.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Outcome {
    Success,
    /// Retryable: FAILED while attempts remain.
    Failed(&'static str),
    /// Not retryable: DEAD at once.
    Dead(&'static str),
}

async fn finish(app: &TestApp, id: &str, lease: &str, outcome: Outcome) {
    let (path, body) = match outcome {
        Outcome::Success => (
            "complete",
            json!({"lease_token": lease, "result": {"rows": 1204}}),
        ),
        Outcome::Failed(error) => (
            "fail",
            json!({"lease_token": lease, "error": error, "retryable": true}),
        ),
        Outcome::Dead(error) => (
            "fail",
            json!({"lease_token": lease, "error": error, "retryable": false}),
        ),
    };
    api_ok(
        app,
        Method::POST,
        &format!("/v1/instances/{id}/{path}"),
        body,
    )
    .await;
}

/// A DEAD instance of the manual task `task` (registered with no retries if new): triggered
/// with `window_key`, claimed, and failed with `error`, not retryable.
async fn dead_instance(app: &TestApp, task: &str, window_key: &str, error: &'static str) -> String {
    let agent = format!("{task}_agent");
    put_task(
        app,
        task,
        json!({"agent_id": agent, "trigger": {"type": "manual"}, "execution": {"max_retries": 0}}),
    )
    .await;
    let triggered = api_ok(
        app,
        Method::POST,
        &format!("/v1/tasks/{task}/trigger"),
        json!({"window_key": window_key}),
    )
    .await;
    let (id, lease, _) = claim_one(app, &agent).await;
    assert_eq!(json!(id), triggered["id"], "claimed the triggered instance");
    finish(app, &id, &lease, Outcome::Dead(error)).await;
    assert_eq!(status_in_db(&app.pool, &id).await, "DEAD");
    id
}

async fn status_in_db(pool: &PgPool, id: &str) -> String {
    sqlx::query_scalar("select status from task_instance where id = $1::uuid")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("instance status")
}

async fn instances_of(pool: &PgPool, task: &str) -> i64 {
    sqlx::query_scalar("select count(*) from task_instance where task_id = $1")
        .bind(task)
        .fetch_one(pool)
        .await
        .expect("count instances")
}

/// POST a DEAD-queue form to retry `id` with a session cookie and a CSRF field, as a script
/// outside the page would; the status and body.
async fn post_dead_form(
    app: &TestApp,
    cookie: &str,
    id: &str,
    csrf: Option<&str>,
) -> (u16, String) {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("ids", id).append_pair("action", "retry");
    if let Some(c) = csrf {
        form.append_pair("csrf", c);
    }
    let resp = app
        .client
        .post(app.url("/ui/dead"))
        .header(COOKIE, format!("{}={cookie}", kairos::ui::COOKIE))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form.finish())
        .send()
        .await
        .expect("form posted");
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    // The page's own part: what a failure message needs.
    let main = body
        .split_once("<main>")
        .and_then(|(_, rest)| rest.split_once("</main>"))
        .map_or(body.as_str(), |(main, _)| main);
    (status, main.to_owned())
}

#[sqlx::test]
async fn a_viewer_sees_the_dead_queue_but_cannot_retry(pool: PgPool) {
    let (app, browser) = start(pool, secured("e2e-viewer")).await;
    let id = dead_instance(&app, "nightly_export", "2026-03-01", "disk full").await;

    browser.login(VIEWER).await;
    assert_eq!(browser.text("#role").await, "viewer");
    browser.goto("/ui/dead").await;
    let row = format!("table#instances tr[data-instance-id='{id}']");
    browser.wait_for(&row, DEADLINE).await;
    assert!(browser.text(&row).await.contains("disk full"));
    for absent in [
        "#dead-form",
        "input[name=ids]",
        "#retry-selected",
        "#cancel-selected",
        "button.retry-one",
        "button.cancel-one",
        "main form[method=post]",
    ] {
        assert_eq!(browser.count(absent).await, 0, "a viewer sees {absent}");
    }

    // A form injected into the page, without a CSRF token: refused.
    browser
        .execute(
            "const form = document.createElement('form');
             form.method = 'post';
             form.action = '/ui/dead';
             for (const [name, value] of [['ids', arguments[0]], ['action', 'retry']]) {
                 const input = document.createElement('input');
                 input.type = 'hidden';
                 input.name = name;
                 input.value = value;
                 form.appendChild(input);
             }
             document.body.appendChild(form);
             form.submit();",
            vec![json!(id)],
        )
        .await;
    browser
        .wait_for_text("h1", DEADLINE, |t| t.starts_with("403"))
        .await;
    assert!(browser.text("#error").await.contains("CSRF"));

    // The viewer's own cookie from outside the page: no token, a forged one, and even the
    // session's real one (the logout form carries it) are all refused.
    browser.goto("/ui/dead").await;
    let cookie = browser.cookie(kairos::ui::COOKIE).await;
    let real = browser
        .attr("header form input[name=csrf]", "value")
        .await
        .expect("the logout form's CSRF token");
    let forged = "0".repeat(real.len());
    for (csrf, why) in [
        (None, "CSRF"),
        (Some(forged.as_str()), "CSRF"),
        (Some(real.as_str()), "may only read"),
    ] {
        let (status, body) = post_dead_form(&app, &cookie, &id, csrf).await;
        assert_eq!(status, 403, "csrf {csrf:?}: {body}");
        assert!(body.contains(why), "csrf {csrf:?}: {body}");
    }
    assert_eq!(status_in_db(&app.pool, &id).await, "DEAD");
}

#[sqlx::test]
async fn an_admin_retries_a_dead_instance_from_the_dead_queue(pool: PgPool) {
    let (app, browser) = start(pool, secured("e2e-admin")).await;
    let id = dead_instance(&app, "nightly_export", "2026-03-01", "disk full").await;
    let other = dead_instance(&app, "nightly_export", "2026-03-02", "disk full").await;

    browser.login(ADMIN).await;
    assert_eq!(browser.text("#role").await, "admin");
    browser.goto("/ui/dead").await;
    browser
        .click(&format!(
            "tr[data-instance-id='{id}'] input[type=checkbox][name=ids]"
        ))
        .await;
    browser.click("#retry-selected").await;
    browser
        .wait_for_text("#flash", DEADLINE, |t| t == "1 retried.")
        .await;
    assert_eq!(
        browser.count(&format!("tr[data-instance-id='{id}']")).await,
        0,
        "the retried instance left the DEAD queue"
    );
    assert_eq!(
        browser
            .count(&format!("tr[data-instance-id='{other}']"))
            .await,
        1,
        "the unselected one stays"
    );

    browser.goto(&format!("/ui/instances/{id}")).await;
    assert_eq!(browser.text("#status").await, "PENDING");
    assert!(
        browser
            .text("#events")
            .await
            .contains("retried by operator")
    );
    assert_eq!(status_in_db(&app.pool, &id).await, "PENDING");
    assert_eq!(status_in_db(&app.pool, &other).await, "DEAD");
}

#[sqlx::test]
async fn pausing_from_the_task_page_stops_new_windows(pool: PgPool) {
    let (app, browser) = start(pool.clone(), with_trigger(secured("e2e-pause"))).await;
    put_task(
        &app,
        "ticker",
        json!({"agent_id": "demo", "trigger": {"type": "interval", "every_seconds": 1}}),
    )
    .await;
    // The loop is creating windows.
    eventually(Duration::from_secs(10), "two windows of ticker", || async {
        (instances_of(&pool, "ticker").await >= 2).then_some(())
    })
    .await;

    browser.login(ADMIN).await;
    browser.goto("/ui/tasks/ticker").await;
    assert!(browser.text("#task-state").await.contains("active"));
    browser
        .fill("#pause-form input[name=reason]", "upstream maintenance")
        .await;
    browser.click("#pause").await;
    browser
        .wait_for_text("#flash", DEADLINE, |t| t.starts_with("Paused"))
        .await;
    let state = browser.text("#task-state").await;
    assert!(
        state.contains("paused") && state.contains("upstream maintenance"),
        "{state}"
    );
    assert_eq!(browser.count("#resume").await, 1);

    // No window after the pause: the count holds for three intervals.
    let paused_at = instances_of(&pool, "ticker").await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        assert_eq!(
            instances_of(&pool, "ticker").await,
            paused_at,
            "a window was created {:?} after the pause",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (paused, reason): (bool, Option<String>) =
        sqlx::query_as("select paused, paused_reason from tasks where id = 'ticker'")
            .fetch_one(&pool)
            .await
            .expect("task row");
    assert!(paused);
    assert_eq!(reason.as_deref(), Some("upstream maintenance"));
}

#[sqlx::test]
async fn the_playground_shows_the_dst_shifted_fire_time(pool: PgPool) {
    let (_app, browser) = start(pool, secured("e2e-playground")).await;
    browser.login(VIEWER).await;
    browser.goto("/ui/playground").await;
    browser.fill("#expr", "30 2 * * *").await;
    browser.fill("#tz", "America/New_York").await;
    browser.fill("#from", "2026-03-07T12:00:00Z").await;
    browser.click("#show").await;

    let first = "table#fire-times tbody tr:first-child";
    browser
        .wait_for_text(&format!("{first} td.local"), DEADLINE, |t| {
            t == "2026-03-08 03:00:00 EDT"
        })
        .await;
    assert_eq!(browser.count("#playground-error").await, 0);
    let class = browser.attr(first, "class").await.unwrap_or_default();
    assert!(class.split_whitespace().any(|c| c == "dst"), "{class:?}");
    let note = browser.text(&format!("{first} .dst-note")).await;
    assert!(note.contains("02:30 did not exist"), "{note}");
    // The day after is an ordinary 02:30, not marked.
    let second = "table#fire-times tbody tr:nth-child(2)";
    assert_eq!(
        browser.text(&format!("{second} td.local")).await,
        "2026-03-09 02:30:00 EDT"
    );
    assert_eq!(browser.count(&format!("{second}.dst")).await, 0);
}

/// Seed `task`'s windows over the last two hours one at a time, as a worker would have run
/// them: `S` succeeded, `F` failed (awaiting a retry), `D` DEAD, `K` skipped because the window
/// before was still running. Returns how many windows of each letter were written.
async fn seed_history(app: &TestApp, task: &str, agent: &str, pattern: &str) -> [usize; 4] {
    let now: DateTime<Utc> = sqlx::query_scalar("select now()")
        .fetch_one(&app.pool)
        .await
        .expect("now");
    let stamp = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let preview = api_ok(
        app,
        Method::POST,
        &format!("/v1/tasks/{task}/backfill"),
        json!({"from": stamp(now - chrono::Duration::hours(2)), "to": stamp(now), "dry_run": true}),
    )
    .await;
    let keys: Vec<String> = preview["windows"]
        .as_array()
        .expect("windows of the dry run")
        .iter()
        .filter_map(|w| w["window_key"].as_str().map(str::to_owned))
        .collect();
    let letters: Vec<char> = pattern.chars().cycle().take(keys.len()).collect();
    let backfill = |key: &str, overlap: &str| {
        let at = DateTime::parse_from_rfc3339(key)
            .expect("window key")
            .with_timezone(&Utc);
        json!({"from": stamp(at), "to": stamp(at + chrono::Duration::seconds(1)), "overlap": overlap})
    };
    let outcome = |c: char| match c {
        'F' => Outcome::Failed("upstream 503: inventory service unavailable"),
        'D' => Outcome::Dead("schema mismatch: column sku is missing in the export"),
        _ => Outcome::Success,
    };
    let mut counts = [0usize; 4];
    let mut running: Option<(String, String, char)> = None;
    for (i, key) in keys.iter().enumerate() {
        let c = letters[i];
        let path = format!("/v1/tasks/{task}/backfill");
        if c == 'K' && running.is_some() {
            let report = api_ok(app, Method::POST, &path, backfill(key, "skip")).await;
            assert_eq!(report["skipped"], 1, "{key}: {report}");
            counts[3] += 1;
            continue;
        }
        if let Some((id, lease, was)) = running.take() {
            finish(app, &id, &lease, outcome(was)).await;
        }
        api_ok(app, Method::POST, &path, backfill(key, "queue")).await;
        let (id, lease, claimed) = claim_one(app, agent).await;
        assert_eq!(&claimed, key, "claimed the window just written");
        let c = if c == 'K' { 'S' } else { c };
        counts[match c {
            'F' => 1,
            'D' => 2,
            _ => 0,
        }] += 1;
        if letters.get(i + 1) == Some(&'K') {
            running = Some((id, lease, c));
        } else {
            finish(app, &id, &lease, outcome(c)).await;
        }
    }
    if let Some((id, lease, was)) = running {
        finish(app, &id, &lease, outcome(was)).await;
    }
    counts
}

/// Save a PNG of the page when `KAIROS_SCREENSHOTS` names a directory.
async fn screenshot(browser: &Browser, name: &str) {
    let Some(dir) = std::env::var_os("KAIROS_SCREENSHOTS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    let png = browser.screenshot().await;
    let path = dir.join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

#[sqlx::test]
async fn screenshots_of_the_tour(pool: PgPool) {
    let mut opts = with_trigger(secured("kairos-1"));
    opts.stats_interval = Some(Duration::from_millis(200));
    let (app, browser) = start(pool.clone(), opts).await;

    put_task(
        &app,
        "daily_report_001",
        json!({"agent_id": "report_agent",
               "trigger": {"type": "cron", "expr": "0 30 8 * * *", "timezone": "Asia/Shanghai"}}),
    )
    .await;
    put_task(
        &app,
        "tick",
        json!({"agent_id": "demo", "trigger": {"type": "interval", "every_seconds": 1}}),
    )
    .await;
    put_task(
        &app,
        "sync_inventory",
        json!({"agent_id": "inventory_agent",
               "trigger": {"type": "cron", "expr": "*/2 * * * *", "timezone": "Europe/Berlin"},
               "execution": {"max_retries": 2, "overlap": "skip"}}),
    )
    .await;
    let [succeeded, failed, dead, skipped] = seed_history(
        &app,
        "sync_inventory",
        "inventory_agent",
        "SSSSSSSKSSSSFSSSSSSSSSSSDSSSSSKKSSSSSSSSSFSSSSSSSSSSSDSSSSSS",
    )
    .await;
    dead_instance(
        &app,
        "reindex_search",
        "reindex-2026-03-01",
        "index mapping conflict on field price",
    )
    .await;
    put_task(
        &app,
        "legacy_cleanup",
        json!({"agent_id": "ops_agent",
               "trigger": {"type": "cron", "expr": "0 3 * * 0", "timezone": "UTC"}}),
    )
    .await;
    api_ok(
        &app,
        Method::POST,
        "/v1/tasks/legacy_cleanup/pause",
        json!({"reason": "waiting for the new schema"}),
    )
    .await;
    let dead_total = dead + 1;

    browser.login(ADMIN).await;

    // The overview, once the sampler has counted what was just written and the live task's
    // windows are in the charts.
    let expected = dead_total.to_string();
    let start = Instant::now();
    loop {
        browser.goto("/ui/").await;
        if browser.text("#count-DEAD").await == expected
            && browser.count("figure.chart svg").await == 2
        {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the overview never showed {expected} DEAD instances and both charts"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(browser.text("#count-FAILED").await, failed.to_string());
    screenshot(&browser, "overview").await;

    // The task page: the windows timeline holds every seeded outcome.
    browser.goto("/ui/tasks/sync_inventory").await;
    for (class, n) in [
        ("s-success", succeeded),
        ("s-failed", failed),
        ("s-dead", dead),
    ] {
        assert_eq!(
            browser.count(&format!("#timeline .cell.{class}")).await,
            n,
            "{class} cells"
        );
    }
    // Windows the schedule itself adds meanwhile are skipped too (a FAILED one is unfinished).
    let skipped_cells = browser.count("#timeline .cell.s-skipped").await;
    assert!(skipped_cells >= skipped, "{skipped_cells} skipped cells");
    assert_eq!(browser.count("table#fire-times tbody tr").await, 10);
    screenshot(&browser, "task").await;

    // The DEAD queue with its actions: DEAD instances and FAILED ones waiting for a retry; only
    // FAILED rows can be cancelled (DEAD is final).
    browser.goto("/ui/dead").await;
    assert_eq!(
        browser.count("table#instances tr[data-instance-id]").await,
        dead_total + failed
    );
    assert_eq!(browser.count("button.retry-one").await, dead_total + failed);
    assert_eq!(browser.count("button.cancel-one").await, failed);
    assert_eq!(browser.count("#retry-selected").await, 1);
    screenshot(&browser, "dead-queue").await;
}

async fn held_until(pool: &PgPool, limit: &str, key: &str) -> Option<DateTime<Utc>> {
    sqlx::query_scalar::<_, Option<DateTime<Utc>>>(
        "select held_until from limit_state where limit_name = $1 and key = $2",
    )
    .bind(limit)
    .bind(key)
    .fetch_optional(pool)
    .await
    .expect("limit state")
    .flatten()
}

/// Trigger `task` `n` times with `context`; the instance ids.
async fn trigger_n(app: &TestApp, task: &str, n: usize, context: Value) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let i = api_ok(
            app,
            Method::POST,
            &format!("/v1/tasks/{task}/trigger"),
            json!({ "context": context }),
        )
        .await;
        ids.push(i["id"].as_str().expect("id").to_owned());
    }
    ids
}

/// Claim up to 10 instances of `agent`: (id, lease token) each.
async fn claim_all(app: &TestApp, agent: &str) -> Vec<(String, String)> {
    let resp = api_ok(
        app,
        Method::POST,
        "/v1/claims",
        json!({"agent_id": agent, "worker_id": format!("{agent}-w1"), "max_instances": 10}),
    )
    .await;
    resp["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .map(|i| {
            (
                i["id"].as_str().expect("id").to_owned(),
                i["lease_token"].as_str().expect("lease").to_owned(),
            )
        })
        .collect()
}

#[sqlx::test]
async fn an_admin_holds_a_limit_and_the_waiting_instance_says_why(pool: PgPool) {
    let (app, browser) = start(pool.clone(), secured("kairos-1")).await;
    for (name, body) in [
        (
            "openai-gpt4",
            json!({"concurrency": 8, "rate": {"count": 500, "per_seconds": 60, "burst": 20}}),
        ),
        (
            "crm-api",
            json!({"concurrency": 2, "rate": {"count": 30, "per_seconds": 60, "burst": 4}, "per_key": true}),
        ),
        (
            "search-api",
            json!({"rate": {"count": 2, "per_seconds": 3600}}),
        ),
        ("warehouse", json!({"concurrency": 6})),
    ] {
        api_ok(&app, Method::PUT, &format!("/v1/limits/{name}"), body).await;
    }
    let manual = |agent: &str, limits: Value| {
        json!({"agent_id": agent, "trigger": {"type": "manual"},
               "execution": {"concurrency_limit": 100, "limits": limits}})
    };
    put_task(
        &app,
        "summarize_tickets",
        manual(
            "support_agent",
            json!([{"name": "openai-gpt4"}, {"name": "crm-api", "key": "{{params.tenant}}"}]),
        ),
    )
    .await;
    put_task(
        &app,
        "embed_docs",
        manual("index_agent", json!([{"name": "openai-gpt4", "cost": 2}])),
    )
    .await;
    put_task(
        &app,
        "crawl_sites",
        manual("crawler_agent", json!([{"name": "search-api"}])),
    )
    .await;
    put_task(
        &app,
        "nightly_export",
        manual("etl_agent", json!([{"name": "warehouse", "cost": 3}])),
    )
    .await;
    for (tenant, n) in [("acme", 3), ("globex", 2), ("initech", 1), ("umbrella", 1)] {
        trigger_n(
            &app,
            "summarize_tickets",
            n,
            json!({"params": {"tenant": tenant}}),
        )
        .await;
    }
    trigger_n(&app, "embed_docs", 2, json!({})).await;
    trigger_n(&app, "crawl_sites", 4, json!({})).await;
    let exports = trigger_n(&app, "nightly_export", 3, json!({})).await;
    // Summaries: acme 2 of 3 (its key's concurrency), globex 2, initech, umbrella.
    let summaries = claim_all(&app, "support_agent").await;
    assert_eq!(summaries.len(), 6, "{summaries:?}");
    // Embeddings draw 2 units each: one fits in what openai-gpt4 has left (8 - 6).
    assert_eq!(claim_all(&app, "index_agent").await.len(), 1);
    assert_eq!(claim_all(&app, "crawler_agent").await.len(), 1);
    assert_eq!(claim_all(&app, "etl_agent").await.len(), 2);
    // A globex summary meets the CRM's 429: throttled, and the CRM's globex budget held.
    let globex: String = sqlx::query_scalar(
        "select i.id::text from task_instance i, jsonb_array_elements(i.limit_draws) d \
         where i.task_id = 'summarize_tickets' and i.status = 'RUNNING' \
           and d->>'name' = 'crm-api' and d->>'key' = 'globex' limit 1",
    )
    .fetch_one(&pool)
    .await
    .expect("a running globex summary");
    let lease = &summaries
        .iter()
        .find(|(id, _)| *id == globex)
        .expect("claimed")
        .1;
    api_ok(
        &app,
        Method::POST,
        &format!("/v1/instances/{globex}/fail"),
        json!({"lease_token": lease, "error": "HTTP 429 from the CRM",
               "retry_after_seconds": 120, "hold_limit": "crm-api"}),
    )
    .await;
    assert!(held_until(&pool, "crm-api", "globex").await.is_some());

    browser.login(ADMIN).await;
    browser.goto("/ui/limits").await;
    assert_eq!(browser.count("#limits tr[data-limit]").await, 4);
    let gpt = browser.text("#limit-openai-gpt4 td.concurrency").await;
    assert_eq!(
        gpt, "7 / 8 in use",
        "5 running summaries and one embedding of 2"
    );
    assert!(
        browser
            .text("#limit-openai-gpt4 td.rate")
            .await
            .contains("500 per 60 s, burst 20"),
    );
    let crm = browser.text("#limit-crm-api td.held").await;
    assert!(crm.contains("globex"), "{crm}");
    assert!(crm.contains("HTTP 429 from the CRM"), "{crm}");
    assert_eq!(
        browser
            .text("#limit-crm-api tr[data-key='acme'] td:nth-child(2)")
            .await,
        "2/2"
    );
    assert_eq!(
        browser.text("#limit-warehouse td.concurrency").await,
        "6 / 6 in use"
    );
    let search = browser.text("#limit-search-api td.rate").await;
    assert!(search.contains("0 of 1 starts available now"), "{search}");
    screenshot(&browser, "limits").await;

    // Hold the warehouse from its row: the flash, the row and the database say so.
    browser.click("#limit-warehouse details.hold summary").await;
    browser
        .fill("#limit-warehouse input[name='seconds']", "900")
        .await;
    browser
        .fill("#limit-warehouse input[name='reason']", "nightly vacuum")
        .await;
    browser.click("#limit-warehouse button.hold").await;
    browser
        .wait_for_text("#flash", DEADLINE, |t| t.starts_with("Held"))
        .await;
    let until = held_until(&pool, "warehouse", "").await.expect("held");
    let left = until - Utc::now();
    assert!(left > chrono::Duration::seconds(800), "{left}");
    let held = browser.text("#limit-warehouse td.held").await;
    assert!(held.contains("nightly vacuum"), "{held}");

    // The third export waits: its page says the warehouse is held.
    let waiting: String = sqlx::query_scalar(
        "select id::text from task_instance where task_id = 'nightly_export' and status = 'PENDING'",
    )
    .fetch_one(&pool)
    .await
    .expect("a waiting export");
    assert!(exports.contains(&waiting));
    browser.goto(&format!("/ui/instances/{waiting}")).await;
    let why = browser.text("#waiting").await;
    assert!(why.starts_with("Why is it waiting?"), "{why}");
    assert!(why.contains("warehouse: held until"), "{why}");
    assert_eq!(
        browser.count("#waiting li[data-reason='limit_held']").await,
        1
    );
    screenshot(&browser, "instance-waiting").await;
    browser
        .click("#waiting a[href='/ui/limits#limit-warehouse']")
        .await;
    browser.click("#limit-warehouse button.release").await;
    browser
        .wait_for_text("#flash", DEADLINE, |t| t.starts_with("Released"))
        .await;
    assert!(held_until(&pool, "warehouse", "").await.is_none());
}
