//! The operators' console over real HTTP: sessions, roles, CSRF, agent scope, the DEAD queue's
//! bulk actions, backfill preview, the playground, and the sampled overview. The browser-driven
//! tests are in `console_e2e.rs`.

mod common;

use std::sync::Arc;

use common::TestApp;
use kairos::app::Options;
use kairos::domain::access::Tokens;
use kairos::services::Heartbeats;
use kairos::services::stats::StatsSampler;
use reqwest::header::{COOKIE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use reqwest::{Client, Response, redirect};
use serde_json::{Value, json};
use sqlx::PgPool;

const ADMIN: &str = "admin-token-123";
const VIEWER: &str = "viewer-token-123";
const AGENT_A: &str = "agent-a-token-123";

async fn secured(pool: PgPool) -> TestApp {
    let mut opts = Options::api_only("console");
    opts.tokens = Arc::new(
        Tokens::parse(&format!(
            "{ADMIN}:admin,{AGENT_A}:agent:agent_a,{VIEWER}:viewer"
        ))
        .expect("tokens"),
    );
    TestApp::spawn_opts(pool, opts).await
}

/// A browser-like client of the console: no automatic redirects, one session cookie.
struct Browser<'a> {
    app: &'a TestApp,
    http: Client,
    cookie: Option<String>,
}

impl<'a> Browser<'a> {
    fn new(app: &'a TestApp) -> Self {
        Browser {
            app,
            http: Client::builder()
                .redirect(redirect::Policy::none())
                .build()
                .expect("client"),
            cookie: None,
        }
    }

    /// Open the login form as a browser does: its CSRF cookie (`name=value`) and hidden field.
    async fn login_form(&self) -> (String, String) {
        let resp = self.get("/ui/login").await;
        assert_eq!(resp.status().as_u16(), 200, "GET /ui/login");
        let set = resp
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("kairos_ui_login="))
            .expect("the login form sets its CSRF cookie")
            .to_owned();
        assert!(set.contains("HttpOnly"), "{set}");
        assert!(set.contains("SameSite=Strict"), "{set}");
        let cookie = set.split(';').next().unwrap_or("").to_owned();
        let html = resp.text().await.expect("body");
        let marker = "name=\"csrf\" value=\"";
        let start = html
            .find(marker)
            .expect("the login form carries a csrf field")
            + marker.len();
        let csrf = html[start..].split('"').next().unwrap_or("").to_owned();
        (cookie, csrf)
    }

    /// POST the login form with `token`, as a browser that opened the form does.
    async fn submit_login(&self, token: &str, extra: &[(&str, &str)]) -> Response {
        let (cookie, csrf) = self.login_form().await;
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([("token", token), ("csrf", csrf.as_str())])
            .finish();
        let mut req = self
            .http
            .post(self.app.url("/ui/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header(COOKIE, cookie)
            .body(body);
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        req.send().await.expect("sent")
    }

    async fn login(app: &'a TestApp, token: &str) -> Self {
        let mut b = Browser::new(app);
        let resp = b.submit_login(token, &[]).await;
        assert_eq!(resp.status().as_u16(), 303, "login with a valid token");
        let set = resp
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("kairos_ui="))
            .expect("a session cookie")
            .to_owned();
        assert!(set.contains("HttpOnly"), "{set}");
        assert!(set.contains("SameSite=Strict"), "{set}");
        assert!(set.contains("Path=/ui"), "{set}");
        // Plain HTTP, no proxy saying otherwise: a Secure cookie would never be sent back.
        assert!(!set.contains("Secure"), "{set}");
        b.cookie = set.split(';').next().map(str::to_owned);
        b
    }

    async fn get(&self, path: &str) -> Response {
        let mut req = self.http.get(self.app.url(path));
        if let Some(c) = &self.cookie {
            req = req.header(COOKIE, c);
        }
        req.send().await.expect("sent")
    }

    async fn page(&self, path: &str) -> String {
        let resp = self.get(path).await;
        assert_eq!(resp.status().as_u16(), 200, "GET {path}");
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap_or("")
                .starts_with("text/html"),
            "GET {path} is HTML"
        );
        resp.text().await.expect("body")
    }

    async fn form(&self, path: &str, fields: &[(&str, &str)]) -> Response {
        self.form_from(path, fields, None).await
    }

    async fn form_from(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Response {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let mut req = self
            .http
            .post(self.app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(c) = &self.cookie {
            req = req.header(COOKIE, c);
        }
        if let Some(o) = origin {
            req = req.header(ORIGIN, o);
        }
        req.send().await.expect("sent")
    }

    /// The CSRF token of the session, as its pages carry it.
    async fn csrf(&self) -> String {
        let html = self.page("/ui/playground").await;
        let marker = "name=\"csrf\" value=\"";
        let start = html.find(marker).expect("a page carries a csrf field") + marker.len();
        html[start..].split('"').next().unwrap_or("").to_owned()
    }
}

async fn api(app: &TestApp, method: reqwest::Method, path: &str, body: Value) -> Value {
    let resp = app
        .client
        .request(method, app.url(path))
        .bearer_auth(ADMIN)
        .json(&body)
        .send()
        .await
        .expect("sent");
    let status = resp.status();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{path}: {status} {v}");
    v
}

/// A manual task of `agent` with no retries.
async fn manual_task(app: &TestApp, id: &str, agent: &str) {
    api(
        app,
        reqwest::Method::PUT,
        &format!("/v1/tasks/{id}"),
        json!({"agent_id": agent, "trigger": {"type": "manual"},
               "execution": {"max_retries": 0, "concurrency_limit": 100}}),
    )
    .await;
}

/// `n` DEAD instances of task `id` (agent `agent`): triggered, claimed, failed for good.
async fn dead_instances(app: &TestApp, id: &str, agent: &str, n: usize) -> Vec<String> {
    for k in 0..n {
        api(
            app,
            reqwest::Method::POST,
            &format!("/v1/tasks/{id}/trigger"),
            json!({"window_key": format!("w{k}")}),
        )
        .await;
    }
    let claimed = api(
        app,
        reqwest::Method::POST,
        "/v1/claims",
        json!({"agent_id": agent, "worker_id": "w", "max_instances": n}),
    )
    .await;
    let mut ids = Vec::new();
    for inst in claimed["instances"].as_array().expect("instances") {
        let iid = inst["id"].as_str().expect("id").to_owned();
        api(
            app,
            reqwest::Method::POST,
            &format!("/v1/instances/{iid}/fail"),
            json!({"lease_token": inst["lease_token"], "error": "boom", "retryable": false}),
        )
        .await;
        ids.push(iid);
    }
    assert_eq!(ids.len(), n);
    ids
}

/// A FAILED instance (waiting for its retry) of a new task `id` with retries left.
async fn failed_instance(app: &TestApp, id: &str, agent: &str) -> String {
    api(
        app,
        reqwest::Method::PUT,
        &format!("/v1/tasks/{id}"),
        json!({"agent_id": agent, "trigger": {"type": "manual"},
               "execution": {"max_retries": 3, "retry_backoff": {"base_seconds": 3600, "max_seconds": 3600}}}),
    )
    .await;
    api(
        app,
        reqwest::Method::POST,
        &format!("/v1/tasks/{id}/trigger"),
        json!({}),
    )
    .await;
    let claimed = api(
        app,
        reqwest::Method::POST,
        "/v1/claims",
        json!({"agent_id": agent, "worker_id": "w", "max_instances": 1}),
    )
    .await;
    let inst = &claimed["instances"][0];
    let iid = inst["id"].as_str().expect("claimed one").to_owned();
    let failed = api(
        app,
        reqwest::Method::POST,
        &format!("/v1/instances/{iid}/fail"),
        json!({"lease_token": inst["lease_token"], "error": "flaky", "retryable": true}),
    )
    .await;
    assert_eq!(failed["status"], "FAILED");
    iid
}

async fn status_of(pool: &PgPool, id: &str) -> (String, i32) {
    sqlx::query_as("select status, attempt from task_instance where id = $1::uuid")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("instance")
}

#[sqlx::test]
async fn sessions_start_with_a_valid_token_and_end_at_logout(pool: PgPool) {
    let app = secured(pool).await;
    let anonymous = Browser::new(&app);
    let resp = anonymous.get("/ui/").await;
    assert_eq!(resp.status().as_u16(), 303);
    assert_eq!(resp.headers()[LOCATION], "/ui/login");
    assert!(anonymous.page("/ui/login").await.contains("id=\"token\""));

    let resp = anonymous.submit_login("not-a-token-at-all", &[]).await;
    assert_eq!(resp.status().as_u16(), 401);
    assert!(
        resp.headers()
            .get_all(SET_COOKIE)
            .iter()
            .all(|v| !v.to_str().unwrap_or("").starts_with("kairos_ui=")),
        "no session for a bad token"
    );

    // The API's bearer tokens do not open console pages, and the cookie does not open the API.
    let admin = Browser::login(&app, ADMIN).await;
    assert!(admin.page("/ui/").await.contains("Overview"));
    let api_with_cookie = admin.get("/v1/tasks").await;
    assert_eq!(api_with_cookie.status().as_u16(), 401);

    let csrf = admin.csrf().await;
    let forged = admin.form("/ui/logout", &[("csrf", "forged")]).await;
    assert_eq!(forged.status().as_u16(), 403);
    // The cookie names a session; it never holds the token.
    let cookie = admin.cookie.clone().expect("session cookie");
    assert!(!cookie.contains(ADMIN), "{cookie}");
    let copy = Browser {
        app: &app,
        http: admin.http.clone(),
        cookie: Some(cookie),
    };
    assert_eq!(copy.get("/ui/").await.status().as_u16(), 200);
    let out = admin.form("/ui/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status().as_u16(), 303);
    assert!(
        out.headers()[SET_COOKIE]
            .to_str()
            .unwrap_or("")
            .contains("Max-Age=0")
    );
    // Logging out ends the session on the server: a copy of the cookie opens nothing now.
    let resp = copy.get("/ui/").await;
    assert_eq!(resp.status().as_u16(), 303);
    assert_eq!(resp.headers()[LOCATION], "/ui/login");
    let stale = copy.form("/ui/tasks/x/pause", &[("csrf", &csrf)]).await;
    assert_eq!(stale.status().as_u16(), 303);
    // A cookie holding a token itself (as a hand-made one would) is no session either.
    let forged = Browser {
        app: &app,
        http: admin.http.clone(),
        cookie: Some(format!("kairos_ui={ADMIN}")),
    };
    assert_eq!(forged.get("/ui/").await.status().as_u16(), 303);
}

#[sqlx::test]
async fn a_session_ends_when_its_time_is_up_or_its_token_is_no_longer_configured(pool: PgPool) {
    let app = secured(pool.clone()).await;
    let viewer = Browser::login(&app, VIEWER).await;
    let admin = Browser::login(&app, ADMIN).await;
    assert_eq!(viewer.get("/ui/").await.status().as_u16(), 200);
    let (sessions, hours): (i64, f64) = sqlx::query_as(
        "select count(*), max(extract(epoch from expires_at - now()) / 3600)::float8 \
         from console_sessions",
    )
    .fetch_one(&pool)
    .await
    .expect("sessions");
    assert_eq!(sessions, 2);
    assert!((11.9..=12.0).contains(&hours), "{hours}");

    // The same database under a configuration that no longer has the viewer's token (a
    // restart with `auth_tokens` changed): that session opens nothing, the admin's still does.
    let mut opts = Options::api_only("console");
    opts.tokens = Arc::new(Tokens::parse(&format!("{ADMIN}:admin")).expect("tokens"));
    let restarted = TestApp::spawn_opts(pool.clone(), opts).await;
    let on = |b: &Browser<'_>| Browser {
        app: &restarted,
        http: b.http.clone(),
        cookie: b.cookie.clone(),
    };
    assert_eq!(on(&viewer).get("/ui/").await.status().as_u16(), 303);
    assert_eq!(on(&admin).get("/ui/").await.status().as_u16(), 200);

    // Twelve hours on, the admin's session has ended too.
    sqlx::query("update console_sessions set expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .expect("age the sessions");
    assert_eq!(admin.get("/ui/").await.status().as_u16(), 303);
    // The next login clears sessions whose time is up.
    let _again = Browser::login(&app, ADMIN).await;
    let left: i64 = sqlx::query_scalar("select count(*) from console_sessions")
        .fetch_one(&pool)
        .await
        .expect("sessions");
    assert_eq!(left, 1);
}

#[sqlx::test]
async fn a_login_is_refused_without_the_login_form_s_csrf_token_and_accepted_with_it(pool: PgPool) {
    let app = secured(pool).await;
    let b = Browser::new(&app);
    let session_of = |resp: &Response| {
        resp.headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("kairos_ui="))
            .map(str::to_owned)
    };
    let post = |cookie: Option<String>, fields: Vec<(&'static str, String)>| {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let mut req = b
            .http
            .post(app.url("/ui/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(c) = cookie {
            req = req.header(COOKIE, c);
        }
        req.send()
    };
    // A cross-site page can make a browser POST a token of the attacker's (login CSRF): with
    // no token, a token without its cookie, or a cookie without its token, nobody logs in.
    let (cookie, csrf) = b.login_form().await;
    let (other_cookie, _) = b.login_form().await;
    let refused = [
        (None, vec![("token", ADMIN.to_owned())]),
        (
            None,
            vec![("token", ADMIN.to_owned()), ("csrf", csrf.clone())],
        ),
        (Some(cookie.clone()), vec![("token", ADMIN.to_owned())]),
        (
            Some(other_cookie),
            vec![("token", ADMIN.to_owned()), ("csrf", csrf.clone())],
        ),
        (
            Some(cookie.clone()),
            vec![("token", ADMIN.to_owned()), ("csrf", "forged".to_owned())],
        ),
    ];
    for (cookie, fields) in refused {
        let resp = post(cookie.clone(), fields.clone()).await.expect("sent");
        assert_eq!(resp.status().as_u16(), 403, "{cookie:?} {fields:?}");
        assert!(session_of(&resp).is_none(), "{cookie:?} {fields:?}");
    }
    let resp = post(
        Some(cookie),
        vec![("token", ADMIN.to_owned()), ("csrf", csrf)],
    )
    .await
    .expect("sent");
    assert_eq!(resp.status().as_u16(), 303);
    assert!(session_of(&resp).is_some());
}

#[sqlx::test]
async fn the_session_cookie_is_secure_when_the_console_is_reached_over_https(pool: PgPool) {
    let app = secured(pool).await;
    let b = Browser::new(&app);
    // Behind a TLS-terminating proxy that says so.
    let resp = b
        .submit_login(ADMIN, &[("x-forwarded-proto", "https")])
        .await;
    assert_eq!(resp.status().as_u16(), 303);
    let set = resp
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("kairos_ui="))
        .expect("a session cookie")
        .to_owned();
    assert!(set.split("; ").any(|a| a == "Secure"), "{set}");
    let resp = b.get("/ui/login").await;
    let form_cookie = resp.headers()[SET_COOKIE].to_str().unwrap_or("").to_owned();
    assert!(!form_cookie.contains("Secure"), "{form_cookie}");
}

#[sqlx::test]
async fn actions_need_an_admin_session_a_csrf_token_and_the_same_origin(pool: PgPool) {
    let app = secured(pool.clone()).await;
    manual_task(&app, "nightly", "agent_a").await;
    let paused = || async {
        sqlx::query_scalar::<_, bool>("select paused from tasks where id = 'nightly'")
            .fetch_one(&pool)
            .await
            .expect("task")
    };
    let admin = Browser::login(&app, ADMIN).await;
    let csrf = admin.csrf().await;

    let without = admin
        .form("/ui/tasks/nightly/pause", &[("reason", "x")])
        .await;
    assert_eq!(without.status().as_u16(), 403);
    let cross_site = admin
        .form_from(
            "/ui/tasks/nightly/pause",
            &[("csrf", &csrf), ("reason", "x")],
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(cross_site.status().as_u16(), 403);
    // Without Origin, a browser's other marks of another site refuse it too.
    for (name, value) in [
        ("referer", "http://evil.example/page"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([("csrf", csrf.as_str()), ("reason", "x")])
            .finish();
        let mut req = admin
            .http
            .post(app.url("/ui/tasks/nightly/pause"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header(name, value)
            .body(body);
        if let Some(c) = &admin.cookie {
            req = req.header(COOKIE, c);
        }
        let refused = req.send().await.expect("sent");
        assert_eq!(refused.status().as_u16(), 403, "{name}: {value}");
    }
    assert!(!paused().await, "refused forms change nothing");

    let viewer = Browser::login(&app, VIEWER).await;
    let viewer_csrf = viewer.csrf().await;
    assert_ne!(viewer_csrf, csrf, "CSRF tokens are per token");
    let page = viewer.page("/ui/tasks/nightly").await;
    assert!(
        !page.contains("id=\"pause\""),
        "viewers get no action buttons"
    );
    let by_viewer = viewer
        .form(
            "/ui/tasks/nightly/pause",
            &[("csrf", &viewer_csrf), ("reason", "x")],
        )
        .await;
    assert_eq!(by_viewer.status().as_u16(), 403);
    assert!(!paused().await);

    let same_origin = format!("http://{}", app.addr);
    let ok = admin
        .form_from(
            "/ui/tasks/nightly/pause",
            &[("csrf", &csrf), ("reason", "maintenance window")],
            Some(&same_origin),
        )
        .await;
    assert_eq!(ok.status().as_u16(), 303);
    assert!(paused().await);
    let page = admin.page("/ui/tasks/nightly?done=paused").await;
    assert!(page.contains("maintenance window"));
    assert!(page.contains("id=\"resume\""));
}

#[sqlx::test]
async fn agent_tokens_see_only_their_agents_in_the_console(pool: PgPool) {
    let app = secured(pool).await;
    manual_task(&app, "mine", "agent_a").await;
    manual_task(&app, "theirs", "agent_b").await;
    let theirs = dead_instances(&app, "theirs", "agent_b", 1).await;
    let agent = Browser::login(&app, AGENT_A).await;
    let list = agent.page("/ui/tasks").await;
    assert!(list.contains("data-task-id=\"mine\""));
    assert!(!list.contains("data-task-id=\"theirs\""));
    assert_eq!(agent.get("/ui/tasks/theirs").await.status().as_u16(), 404);
    assert_eq!(
        agent
            .get(&format!("/ui/instances/{}", theirs[0]))
            .await
            .status()
            .as_u16(),
        404
    );
    assert!(!agent.page("/ui/dead").await.contains(&theirs[0]));
    assert!(!agent.page("/ui/instances").await.contains(&theirs[0]));
    let overview = agent.page("/ui/").await;
    assert!(
        overview.contains("id=\"scoped\""),
        "no cluster-wide numbers"
    );
    assert!(!overview.contains("count-DEAD"));
    // The admin sees both.
    let admin = Browser::login(&app, ADMIN).await;
    assert!(admin.page("/ui/dead").await.contains(&theirs[0]));
}

#[sqlx::test]
async fn the_dead_queue_retries_and_cancels_in_bulk_or_one_at_a_time(pool: PgPool) {
    let app = secured(pool.clone()).await;
    manual_task(&app, "flaky", "agent_a").await;
    let ids = dead_instances(&app, "flaky", "agent_a", 3).await;
    let admin = Browser::login(&app, ADMIN).await;
    let csrf = admin.csrf().await;
    let queue = admin.page("/ui/dead").await;
    for id in &ids {
        assert!(queue.contains(&format!("data-instance-id=\"{id}\"")));
    }

    let resp = admin
        .form(
            "/ui/dead",
            &[
                ("csrf", &csrf),
                ("action", "retry"),
                ("ids", &ids[0]),
                ("ids", &ids[1]),
                ("reason", "upstream fixed"),
            ],
        )
        .await;
    assert_eq!(resp.status().as_u16(), 303);
    let back = resp.headers()[LOCATION].to_str().unwrap_or("").to_owned();
    assert_eq!(back, "/ui/dead?action=retry&ok=2&failed=0");
    assert_eq!(status_of(&pool, &ids[0]).await, ("PENDING".to_owned(), 2));
    assert_eq!(status_of(&pool, &ids[1]).await, ("PENDING".to_owned(), 2));
    assert!(admin.page(&back).await.contains("2 retried."));

    // One row's own button cancels a FAILED instance; DEAD is final, so cancelling it is
    // reported as not done; retrying one that is no longer DEAD is reported too.
    let failed = failed_instance(&app, "flaky-retrying", "agent_c").await;
    let only = format!("{failed}:cancel");
    let resp = admin
        .form("/ui/dead", &[("csrf", &csrf), ("only", &only)])
        .await;
    assert_eq!(resp.status().as_u16(), 303);
    assert_eq!(status_of(&pool, &failed).await.0, "CANCELLED");
    let resp = admin
        .form(
            "/ui/dead",
            &[("csrf", &csrf), ("action", "cancel"), ("ids", &ids[2])],
        )
        .await;
    assert_eq!(
        resp.headers()[LOCATION],
        "/ui/dead?action=cancel&ok=0&failed=1"
    );
    assert_eq!(status_of(&pool, &ids[2]).await.0, "DEAD");
    let resp = admin
        .form(
            "/ui/dead",
            &[("csrf", &csrf), ("action", "retry"), ("ids", &ids[0])],
        )
        .await;
    assert_eq!(
        resp.headers()[LOCATION],
        "/ui/dead?action=retry&ok=0&failed=1"
    );
    let history = admin.page(&format!("/ui/instances/{}", ids[0])).await;
    assert!(
        history.contains("upstream fixed"),
        "the reason is in the event timeline"
    );

    let none = admin
        .form("/ui/dead", &[("csrf", &csrf), ("action", "retry")])
        .await;
    assert_eq!(none.status().as_u16(), 422);
}

#[sqlx::test]
async fn a_backfill_is_previewed_before_it_is_applied(pool: PgPool) {
    let app = secured(pool.clone()).await;
    api(
        &app,
        reqwest::Method::PUT,
        "/v1/tasks/hourly",
        json!({"agent_id": "agent_a", "trigger": {"type": "cron", "expr": "0 * * * *", "timezone": "UTC"}}),
    )
    .await;
    let admin = Browser::login(&app, ADMIN).await;
    let csrf = admin.csrf().await;
    let now = chrono::Utc::now();
    let from = (now - chrono::Duration::hours(6))
        .format("%Y-%m-%dT%H:00:00Z")
        .to_string();
    let to = (now - chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:00:00Z")
        .to_string();
    let fields = [
        ("csrf", csrf.as_str()),
        ("from", from.as_str()),
        ("to", to.as_str()),
        ("overlap", "queue"),
        ("reprocess", "none"),
    ];
    let preview = admin
        .form("/ui/tasks/hourly/backfill-preview", &fields)
        .await;
    assert_eq!(preview.status().as_u16(), 200);
    let html = preview.text().await.expect("body");
    assert!(html.contains("5 windows"), "{html}");
    assert!(html.contains("id=\"backfill-apply\""));
    let rows = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from task_instance where task_id = 'hourly'")
            .fetch_one(&pool)
            .await
            .expect("count")
    };
    assert_eq!(rows().await, 0, "a preview writes nothing");
    let applied = admin.form("/ui/tasks/hourly/backfill", &fields).await;
    assert_eq!(applied.status().as_u16(), 303);
    assert_eq!(rows().await, 5);

    let bad = admin
        .form(
            "/ui/tasks/hourly/backfill-preview",
            &[("csrf", &csrf), ("from", "yesterday"), ("to", &to)],
        )
        .await;
    assert_eq!(bad.status().as_u16(), 422);
    assert!(bad.text().await.expect("body").contains("from"));
}

#[sqlx::test]
async fn the_playground_shows_dst_rules_and_names_a_bad_field(pool: PgPool) {
    let app = secured(pool).await;
    let viewer = Browser::login(&app, VIEWER).await;
    let html = viewer
        .page("/ui/playground?expr=30+2+*+*+*&tz=America/New_York&from=2026-03-07T12:00:00Z")
        .await;
    let first = html.find("<tbody>").map(|i| &html[i..]).unwrap_or("");
    assert!(first.contains("2026-03-08 03:00:00 EDT"), "{first}");
    assert!(first.contains("02:30 did not exist on 2026-03-08"));
    // A refused expression or zone is shown with the form, answered 422 as the API's preview.
    let resp = viewer.get("/ui/playground?expr=61+*+*+*+*&tz=UTC").await;
    assert_eq!(resp.status().as_u16(), 422);
    let bad = resp.text().await.expect("body");
    assert!(bad.contains("id=\"playground-error\""));
    assert!(bad.contains("minute field"), "the error names the field");
    let resp = viewer
        .get("/ui/playground?expr=0+*+*+*+*&tz=Mars/Olympus")
        .await;
    assert_eq!(resp.status().as_u16(), 422);
    assert!(resp.text().await.expect("body").contains("time zone"));
}

#[sqlx::test]
async fn console_pages_refuse_text_holding_nul_before_the_database_sees_it(pool: PgPool) {
    let app = secured(pool).await;
    let admin = Browser::login(&app, ADMIN).await;
    for (path, field) in [
        ("/ui/instances?task_id=a%00", "task_id"),
        ("/ui/instances?agent_id=%00", "agent_id"),
        ("/ui/tasks?after=%00", "after"),
        ("/ui/dead?task_id=%00", "task_id"),
        ("/ui/playground?expr=%00&tz=UTC", "expr"),
        ("/ui/tasks/a%00", "id"),
    ] {
        let resp = admin.get(path).await;
        assert_eq!(resp.status().as_u16(), 422, "GET {path}");
        let body = resp.text().await.expect("body");
        assert!(
            body.contains(field) && body.contains("must not contain the character U+0000"),
            "GET {path}: {body}"
        );
        assert!(!body.contains('\0'), "GET {path} echoes U+0000");
    }
}

#[sqlx::test]
async fn the_overview_shows_the_sampled_counts(pool: PgPool) {
    let app = secured(pool.clone()).await;
    manual_task(&app, "flaky", "agent_a").await;
    dead_instances(&app, "flaky", "agent_a", 2).await;
    let sampler = StatsSampler::new(
        pool.clone(),
        std::time::Duration::from_secs(5),
        Heartbeats::default(),
    );
    sampler.run_once().await.expect("sample");
    let admin = Browser::login(&app, ADMIN).await;
    let html = admin.page("/ui/").await;
    assert!(html.contains("id=\"count-DEAD\">2<"), "{html}");
    assert!(html.contains("id=\"count-PENDING\">0<"));

    // While another replica holds the sampler's lock, a pass reads that replica's sample.
    let mut tx = pool.begin().await.expect("tx");
    sqlx::query("select pg_advisory_xact_lock($1)")
        .bind(kairos::store::console::SAMPLER_LOCK)
        .execute(&mut *tx)
        .await
        .expect("lock");
    assert!(
        kairos::store::console::sample(&pool)
            .await
            .expect("pass")
            .is_none()
    );
    let counts = sampler.run_once().await.expect("read the other sample");
    assert!(counts.contains(&("DEAD".to_owned(), 2)));
    tx.rollback().await.expect("rollback");
}

#[sqlx::test]
async fn open_mode_serves_the_console_on_loopback_only(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let browser = Browser::new(&app);
    assert!(browser.page("/ui/").await.contains("Overview"));
    let misdirected = browser
        .http
        .get(app.url("/ui/"))
        .header(HOST, "kairos.example")
        .send()
        .await
        .expect("sent");
    assert_eq!(misdirected.status().as_u16(), 421);
    let csrf = browser.csrf().await;
    let cross = browser
        .form_from(
            "/ui/dead",
            &[("csrf", &csrf), ("action", "retry")],
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(cross.status().as_u16(), 403);
    // A window filter needs its task (a window key is unique per task only).
    let across = browser.get("/ui/instances?window_key=w0").await;
    assert_eq!(across.status().as_u16(), 422);
    assert!(across.text().await.expect("body").contains("window_key"));
    browser.page("/ui/instances?window_key=w0&task_id=t").await;
}

#[sqlx::test]
async fn a_list_over_several_statuses_is_newest_first_and_pages_without_gaps(pool: PgPool) {
    let app = secured(pool.clone()).await;
    manual_task(&app, "mixed", "agent_a").await;
    // 12 windows a minute apart, cycling through four statuses.
    let statuses = ["DEAD", "FAILED", "SKIPPED", "SUCCESS"];
    for k in 0..12i32 {
        let st = statuses[k as usize % 4];
        sqlx::query(
            "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
                 agent_id, max_attempts, available_at, finished_at, skip_reason) \
             values (gen_random_uuid(), 'mixed', 'w' || $1, now() - make_interval(mins => $1), \
                 $2, 'manual', 'agent_a', 1, now(), \
                 case when $2 in ('DEAD', 'SKIPPED', 'SUCCESS') then now() end, \
                 case when $2 = 'SKIPPED' then 'overlap' end)",
        )
        .bind(k)
        .bind(st)
        .execute(&pool)
        .await
        .expect("insert");
    }
    let wanted: Vec<String> = (0..12)
        .filter(|k| statuses[*k % 4] != "SUCCESS")
        .map(|k| format!("w{k}"))
        .collect();
    let mut seen: Vec<String> = Vec::new();
    let mut path = "/v1/instances?status=DEAD,FAILED,SKIPPED,DEAD&limit=2".to_owned();
    for _ in 0..10 {
        let page = app
            .client
            .get(app.url(&path))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("sent")
            .json::<Value>()
            .await
            .expect("json");
        for item in page["items"].as_array().expect("items") {
            seen.push(item["window_key"].as_str().unwrap_or("").to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => {
                path = format!("/v1/instances?status=DEAD,FAILED,SKIPPED&limit=2&cursor={c}")
            }
            None => break,
        }
    }
    assert_eq!(seen, wanted, "newest first, each once, across pages");
}

/// Limits in use: `openai` (concurrency 3, a slow rate with burst 2) and `tenant-api` (2 per
/// key) drawn on by `summarize` (agent_a), `search` (a rate of 1 per hour, no concurrency)
/// by `crawl` (agent_b). Three acme and one globex summaries and two crawls are triggered and
/// claimed: acme's third summary and the second crawl wait. Returns (acme's waiting summary,
/// the waiting crawl, a running summary).
async fn limits_scene(app: &TestApp) -> (String, String, String) {
    use reqwest::Method;
    api(
        app,
        Method::PUT,
        "/v1/limits/openai",
        json!({"concurrency": 3, "rate": {"count": 3, "per_seconds": 3600, "burst": 2}}),
    )
    .await;
    api(
        app,
        Method::PUT,
        "/v1/limits/tenant-api",
        json!({"concurrency": 2, "per_key": true}),
    )
    .await;
    api(
        app,
        Method::PUT,
        "/v1/limits/search",
        json!({"rate": {"count": 1, "per_seconds": 3600}}),
    )
    .await;
    api(
        app,
        Method::PUT,
        "/v1/tasks/summarize",
        json!({"agent_id": "agent_a", "trigger": {"type": "manual"},
               "execution": {"concurrency_limit": 100, "limits": [
                   {"name": "openai"}, {"name": "tenant-api", "key": "{{params.tenant}}"}]}}),
    )
    .await;
    api(
        app,
        Method::PUT,
        "/v1/tasks/crawl",
        json!({"agent_id": "agent_b", "trigger": {"type": "manual"},
               "execution": {"concurrency_limit": 100, "limits": [{"name": "search"}]}}),
    )
    .await;
    let mut summaries = Vec::new();
    for tenant in ["acme", "acme", "globex", "acme"] {
        let i = api(
            app,
            Method::POST,
            "/v1/tasks/summarize/trigger",
            json!({"context": {"params": {"tenant": tenant}}}),
        )
        .await;
        summaries.push(i["id"].as_str().expect("id").to_owned());
    }
    let mut crawls = Vec::new();
    for _ in 0..2 {
        let i = api(app, Method::POST, "/v1/tasks/crawl/trigger", json!({})).await;
        crawls.push(i["id"].as_str().expect("id").to_owned());
    }
    let claimed = api(
        app,
        Method::POST,
        "/v1/claims",
        json!({"agent_id": "agent_a", "worker_id": "w", "max_instances": 10}),
    )
    .await;
    let mut running: Vec<String> = claimed["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .map(|i| i["id"].as_str().expect("id").to_owned())
        .collect();
    running.sort();
    let mut expected = summaries[..3].to_vec();
    expected.sort();
    assert_eq!(running, expected, "acme's third summary waits");
    let claimed = api(
        app,
        Method::POST,
        "/v1/claims",
        json!({"agent_id": "agent_b", "worker_id": "w", "max_instances": 10}),
    )
    .await;
    assert_eq!(claimed["instances"][0]["id"], crawls[0].as_str());
    assert_eq!(claimed["instances"].as_array().map(Vec::len), Some(1));
    api(
        app,
        Method::POST,
        "/v1/limits/tenant-api/hold",
        json!({"seconds": 600, "key": "globex", "reason": "429 from the tenant API"}),
    )
    .await;
    (
        summaries[3].clone(),
        crawls[1].clone(),
        summaries[0].clone(),
    )
}

/// The `<tr>` of `attr="value"` in `html`, up to its `</tr>` (nested key tables included).
fn row<'a>(html: &'a str, attr: &str) -> &'a str {
    let start = html
        .find(attr)
        .unwrap_or_else(|| panic!("no {attr} in {html}"));
    let rest = &html[start..];
    let (mut depth, mut at) = (0, 0);
    loop {
        let close = at + rest[at..].find("</tr>").expect("a closing </tr>");
        match rest[at..].find("<tr").map(|i| at + i) {
            Some(open) if open < close => {
                depth += 1;
                at = open + 3;
            }
            _ if depth == 0 => return &rest[..close],
            _ => {
                depth -= 1;
                at = close + 5;
            }
        }
    }
}

#[sqlx::test]
async fn the_limits_page_shows_usage_holds_busiest_keys_and_why_an_instance_waits(pool: PgPool) {
    let app = secured(pool.clone()).await;
    let (acme_waiting, crawl_waiting, running) = limits_scene(&app).await;
    let viewer = Browser::login(&app, VIEWER).await;
    let html = viewer.page("/ui/limits").await;
    assert!(
        html.contains("href=\"/ui/limits\" class=\"current\""),
        "{html}"
    );

    let openai = row(&html, "data-limit=\"openai\"");
    assert!(
        openai.contains("<strong class=\"num\">3</strong> / 3 in use"),
        "{openai}"
    );
    assert!(openai.contains("aria-label=\"3 of 3 in use\""), "{openai}");
    assert!(openai.contains("class=\"bar-full\""), "{openai}");
    assert!(openai.contains("3 per 3600 s, burst 2"), "{openai}");
    assert!(
        openai.contains("<strong class=\"num\">0</strong> of 3 starts available now"),
        "{openai}"
    );
    assert!(
        openai.contains("<strong class=\"num\">1</strong> due"),
        "{openai}"
    );

    let search = row(&html, "data-limit=\"search\"");
    assert!(search.contains("no concurrency cap"), "{search}");
    assert!(search.contains("class=\"usage exhausted\""), "{search}");
    assert!(
        search.contains("<strong class=\"num\">0</strong> of 1 starts available now"),
        "{search}"
    );

    let tenant = row(&html, "data-limit=\"tenant-api\"");
    assert!(
        tenant.contains("<strong class=\"num\">3</strong> units in use over all keys"),
        "{tenant}"
    );
    assert!(tenant.contains("at most 2 per key"), "{tenant}");
    let acme = row(tenant, "data-key=\"acme\"");
    assert!(acme.contains("2/2"), "{acme}");
    let globex = row(tenant, "data-key=\"globex\"");
    assert!(globex.contains("1/2"), "{globex}");
    assert!(globex.contains(">held<"), "{globex}");
    assert!(
        tenant.find("data-key=\"acme\"") < tenant.find("data-key=\"globex\""),
        "busiest first: {tenant}"
    );
    assert!(tenant.contains("429 from the tenant API"), "{tenant}");
    assert!(!html.contains("Release"), "viewers get no action buttons");
    assert!(!html.contains("name=\"seconds\""));

    let admin = Browser::login(&app, ADMIN).await;
    let html = admin.page("/ui/limits").await;
    let tenant = row(&html, "data-limit=\"tenant-api\"");
    assert!(tenant.contains("name=\"key\" value=\"globex\""), "{tenant}");
    assert!(tenant.contains(">Release<"), "{tenant}");
    assert!(html.contains("action=\"/ui/limits/openai/hold\""));

    // An agent token sees the limits (the API lets it read them) but no cluster-wide counts.
    let agent = Browser::login(&app, AGENT_A).await;
    let html = agent.page("/ui/limits").await;
    assert!(html.contains("data-limit=\"openai\""));
    assert!(!html.contains(" due"), "{html}");

    // Why is it waiting: acme's third summary finds both of its budgets full.
    let page = viewer.page(&format!("/ui/instances/{acme_waiting}")).await;
    assert!(page.contains("Why is it waiting?"), "{page}");
    assert!(page.contains("data-reason=\"limit_concurrency\""), "{page}");
    assert!(
        page.contains("openai: 3 of 3 units running, 1 needed"),
        "{page}"
    );
    assert!(
        page.contains("tenant-api (key &quot;acme&quot;): 2 of 2 units running, 1 needed"),
        "{page}"
    );
    assert!(page.contains("href=\"/ui/limits#limit-openai\""), "{page}");
    // The crawl waits for the rate.
    let page = viewer.page(&format!("/ui/instances/{crawl_waiting}")).await;
    assert!(page.contains("data-reason=\"limit_rate\""), "{page}");
    assert!(
        page.contains("search: rate 1 per 3600 s (burst 0) used up; next start at"),
        "{page}"
    );
    // A running instance waits for nothing; a FAILED one for its backoff.
    let page = viewer.page(&format!("/ui/instances/{running}")).await;
    assert!(!page.contains("Why is it waiting?"), "{page}");
    let failed = failed_instance(&app, "flaky", "agent_a").await;
    let page = viewer.page(&format!("/ui/instances/{failed}")).await;
    assert!(page.contains("data-reason=\"retry_backoff\""), "{page}");
    assert!(
        page.contains("attempt 1 failed; the next attempt waits"),
        "{page}"
    );
}

#[sqlx::test]
async fn the_limits_page_shows_the_first_two_hundred_limits_and_says_there_are_more(pool: PgPool) {
    let app = secured(pool.clone()).await;
    let viewer = Browser::login(&app, VIEWER).await;
    let add = |from: i32, to: i32| {
        let pool = pool.clone();
        async move {
            sqlx::query(
                "insert into limits (name, spec) select 'l' || lpad(g::text, 3, '0'), \
                 '{\"concurrency\": 1, \"per_key\": false}' from generate_series($1, $2) g",
            )
            .bind(from)
            .bind(to)
            .execute(&pool)
            .await
            .expect("limits");
        }
    };
    add(1, 200).await;
    let html = viewer.page("/ui/limits").await;
    assert_eq!(html.matches("data-limit=\"").count(), 200);
    assert!(!html.contains("more-limits"), "200 limits are all shown");
    add(201, 201).await;
    let html = viewer.page("/ui/limits").await;
    assert_eq!(html.matches("data-limit=\"").count(), 200);
    assert!(
        html.contains("data-limit=\"l200\""),
        "the first 200 by name"
    );
    assert!(!html.contains("data-limit=\"l201\""));
    assert!(html.contains("id=\"more-limits\""), "{html}");
    assert!(
        html.contains("Showing the first 200 limits by name"),
        "{html}"
    );
}

#[sqlx::test]
async fn limits_are_held_and_released_from_the_console_by_admins_only(pool: PgPool) {
    let app = secured(pool.clone()).await;
    limits_scene(&app).await;
    let held = |name: &'static str, key: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (Option<chrono::DateTime<chrono::Utc>>, Option<String>)>(
                "select held_until, held_reason from limit_state where limit_name = $1 and key = $2",
            )
            .bind(name)
            .bind(key)
            .fetch_optional(&pool)
            .await
            .expect("state")
            .and_then(|(until, reason)| until.map(|u| (u, reason)))
        }
    };
    let admin = Browser::login(&app, ADMIN).await;
    let csrf = admin.csrf().await;
    let viewer = Browser::login(&app, VIEWER).await;
    let viewer_csrf = viewer.csrf().await;

    let by_viewer = viewer
        .form(
            "/ui/limits/openai/hold",
            &[("csrf", &viewer_csrf), ("seconds", "60")],
        )
        .await;
    assert_eq!(by_viewer.status().as_u16(), 403);
    let without_csrf = admin
        .form("/ui/limits/openai/hold", &[("seconds", "60")])
        .await;
    assert_eq!(without_csrf.status().as_u16(), 403);
    assert!(
        held("openai", "").await.is_none(),
        "refused forms change nothing"
    );

    for (path, fields, says) in [
        ("/ui/limits/openai/hold", vec![("seconds", "0")], "seconds"),
        (
            "/ui/limits/openai/hold",
            vec![("seconds", "86401")],
            "seconds",
        ),
        ("/ui/limits/tenant-api/hold", vec![("seconds", "60")], "key"),
    ] {
        let mut f = vec![("csrf", csrf.as_str())];
        f.extend(fields);
        let resp = admin.form(path, &f).await;
        assert_eq!(resp.status().as_u16(), 422, "{path} {f:?}");
        assert!(resp.text().await.expect("body").contains(says));
    }
    let missing = admin
        .form(
            "/ui/limits/nope/hold",
            &[("csrf", &csrf), ("seconds", "60")],
        )
        .await;
    assert_eq!(missing.status().as_u16(), 404);

    let ok = admin
        .form(
            "/ui/limits/openai/hold",
            &[
                ("csrf", &csrf),
                ("seconds", "600"),
                ("reason", "provider incident"),
            ],
        )
        .await;
    assert_eq!(ok.status().as_u16(), 303);
    assert_eq!(
        ok.headers()[LOCATION].to_str().unwrap_or(""),
        "/ui/limits?done=held#limit-openai"
    );
    let (until, reason) = held("openai", "").await.expect("held");
    assert_eq!(reason.as_deref(), Some("provider incident"));
    let left = until - chrono::Utc::now();
    assert!(
        left > chrono::Duration::seconds(590) && left <= chrono::Duration::seconds(600),
        "{left}"
    );
    let html = admin.page("/ui/limits?done=held").await;
    assert!(html.contains("id=\"flash\""));
    assert!(row(&html, "data-limit=\"openai\"").contains("provider incident"));

    let released = admin
        .form(
            "/ui/limits/tenant-api/release",
            &[("csrf", &csrf), ("key", "globex")],
        )
        .await;
    assert_eq!(released.status().as_u16(), 303);
    assert!(held("tenant-api", "globex").await.is_none());
    let released = admin
        .form("/ui/limits/openai/release", &[("csrf", &csrf)])
        .await;
    assert_eq!(released.status().as_u16(), 303);
    assert!(held("openai", "").await.is_none());
}

#[sqlx::test]
async fn priorities_show_on_the_instance_list_task_and_instance_pages_and_filter_the_list(
    pool: PgPool,
) {
    let app = secured(pool).await;
    for (id, priority) in [("incident_check", 0), ("nightly_summary", 8)] {
        api(
            &app,
            reqwest::Method::PUT,
            &format!("/v1/tasks/{id}"),
            json!({"agent_id": "agent_a", "trigger": {"type": "manual"},
                   "execution": {"priority": priority}}),
        )
        .await;
    }
    let urgent = api(
        &app,
        reqwest::Method::POST,
        "/v1/tasks/incident_check/trigger",
        json!({}),
    )
    .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let batch = api(
        &app,
        reqwest::Method::POST,
        "/v1/tasks/nightly_summary/trigger",
        json!({}),
    )
    .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let viewer = Browser::login(&app, VIEWER).await;

    // The list has a priority column; 0-2 are marked urgent.
    let all = viewer.page("/ui/instances").await;
    assert!(
        all.contains("<th title=\"0 most urgent, 9 least\">priority</th>"),
        "{all}"
    );
    let urgent_row = row(&all, &format!("data-instance-id=\"{urgent}\""));
    assert!(
        urgent_row.contains("<td class=\"priority\"><span class=\"prio urgent\""),
        "{urgent_row}"
    );
    assert!(urgent_row.contains(">0</span>"), "{urgent_row}");
    let batch_row = row(&all, &format!("data-instance-id=\"{batch}\""));
    assert!(batch_row.contains("<span class=\"prio\""), "{batch_row}");
    assert!(batch_row.contains(">8</span>"), "{batch_row}");

    // The priority filter: one priority, the choice kept selected; `any` is every priority.
    let zero = viewer.page("/ui/instances?priority=0").await;
    assert!(zero.contains(&urgent) && !zero.contains(&batch), "{zero}");
    assert!(zero.contains("<select name=\"priority\">"), "{zero}");
    assert!(
        zero.contains("<option value=\"0\" selected>0 (most urgent)</option>"),
        "{zero}"
    );
    let eight = viewer.page("/ui/instances?priority=8&status=PENDING").await;
    assert!(
        eight.contains(&batch) && !eight.contains(&urgent),
        "{eight}"
    );
    let none = viewer.page("/ui/instances?priority=3").await;
    assert!(none.contains("No instances match."), "{none}");
    let any = viewer.page("/ui/instances?priority=any").await;
    assert!(any.contains(&urgent) && any.contains(&batch));
    for bad in ["10", "-1", "high"] {
        let resp = viewer.get(&format!("/ui/instances?priority={bad}")).await;
        assert_eq!(resp.status().as_u16(), 422, "priority={bad}");
        assert!(resp.text().await.expect("body").contains("priority"));
    }

    // The task page and the instance page show their priority.
    let task = viewer.page("/ui/tasks/nightly_summary").await;
    let at = task.find("id=\"task-priority\"").expect("a priority field");
    assert!(
        task[at..].starts_with("id=\"task-priority\"><span class=\"prio\""),
        "{task}"
    );
    assert!(task[at..].contains(">8</span>"), "{task}");
    let inst = viewer.page(&format!("/ui/instances/{urgent}")).await;
    let at = inst.find("id=\"priority\"").expect("a priority field");
    assert!(
        inst[at..].starts_with("id=\"priority\"><span class=\"prio urgent\""),
        "{inst}"
    );
    assert!(
        inst[at..].contains("href=\"/ui/instances?priority=0\""),
        "{inst}"
    );
}

#[sqlx::test]
async fn a_jittered_task_page_shows_when_each_window_becomes_claimable(pool: PgPool) {
    let app = secured(pool).await;
    api(
        &app,
        reqwest::Method::PUT,
        "/v1/tasks/spread",
        json!({"agent_id": "agent_a", "trigger": {"type": "cron", "expr": "0 * * * *",
               "timezone": "UTC", "jitter_seconds": 1800}}),
    )
    .await;
    let preview = api(
        &app,
        reqwest::Method::GET,
        "/v1/tasks/spread/preview?count=3",
        Value::Null,
    )
    .await;
    let admin = Browser::login(&app, ADMIN).await;
    let page = admin.page("/ui/tasks/spread").await;
    assert!(page.contains("claimable (jittered, UTC)"), "{page}");
    // The console's instants are the API preview's (whole seconds on the page).
    for w in preview["windows"].as_array().expect("windows") {
        let at = w["available_at"].as_str().expect("available_at");
        assert!(page.contains(&at[..19]), "{at} not on the page");
    }
    // A task without jitter has no such column.
    manual_task(&app, "plain", "agent_a").await;
    let plain = admin.page("/ui/tasks/plain").await;
    assert!(!plain.contains("claimable (jittered"), "{plain}");
}
