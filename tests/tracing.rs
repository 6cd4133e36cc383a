//! W3C trace context and OpenTelemetry export, end to end: a real kairos exporting to a real
//! local OTLP/HTTP receiver (a small axum server decoding the JSON export), real agents' calls
//! with `traceparent` headers, and a real webhook receiver.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use common::{eventually, json};
use kairos::app::{self, Options, Running};
use kairos::services::span_exporter::SpanExporterConfig;
use kairos::services::trigger_loop::TriggerLoopConfig;
use kairos::services::webhook_dispatcher::WebhookDispatcherConfig;
use serde_json::{Value, json};
use sqlx::PgPool;

/// One span as the receiver decoded it.
#[derive(Debug, Clone)]
struct Got {
    trace_id: String,
    span_id: String,
    parent: Option<String>,
    name: String,
    attrs: HashMap<String, String>,
    service: String,
    start_ns: u128,
    /// `(traceId, spanId, traceState)` of each span link.
    links: Vec<(String, String, Option<String>)>,
}

/// What an OTLP/HTTP receiver got: every span, and every request's content type.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Got>>>,
    content_types: Arc<Mutex<Vec<String>>>,
}

fn str_value(v: &Value) -> String {
    v.get("stringValue")
        .or_else(|| v.get("intValue"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn decode(body: &Value) -> Vec<Got> {
    let mut out = Vec::new();
    for rs in body["resourceSpans"].as_array().into_iter().flatten() {
        let service = rs["resource"]["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["key"] == "service.name")
            .map(|a| str_value(&a["value"]))
            .unwrap_or_default();
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for s in ss["spans"].as_array().into_iter().flatten() {
                let attrs = s["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        (
                            a["key"].as_str().unwrap_or_default().to_owned(),
                            str_value(&a["value"]),
                        )
                    })
                    .collect();
                out.push(Got {
                    trace_id: s["traceId"].as_str().unwrap_or_default().to_owned(),
                    span_id: s["spanId"].as_str().unwrap_or_default().to_owned(),
                    parent: s["parentSpanId"]
                        .as_str()
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned),
                    name: s["name"].as_str().unwrap_or_default().to_owned(),
                    attrs,
                    service: service.clone(),
                    start_ns: s["startTimeUnixNano"]
                        .as_str()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0),
                    links: s["links"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|l| {
                            (
                                l["traceId"].as_str().unwrap_or_default().to_owned(),
                                l["spanId"].as_str().unwrap_or_default().to_owned(),
                                l["traceState"].as_str().map(str::to_owned),
                            )
                        })
                        .collect(),
                });
            }
        }
    }
    out
}

async fn receive(State(c): State<Collector>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    c.content_types.lock().expect("lock").push(ct);
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    c.spans.lock().expect("lock").extend(decode(&v));
    axum::Json(json!({}))
}

impl Collector {
    async fn start() -> (Collector, SocketAddr) {
        let c = Collector::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind collector");
        let addr = listener.local_addr().expect("addr");
        let app = Router::new()
            .route("/v1/traces", axum::routing::post(receive))
            .with_state(c.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (c, addr)
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().expect("lock").clone()
    }

    fn of_trace(&self, trace_id: &str) -> Vec<Got> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }

    /// Wait until the trace holds a span of each of `names`.
    async fn wait_for(&self, trace_id: &str, names: &[&str]) -> Vec<Got> {
        eventually(
            Duration::from_secs(20),
            &format!("spans {names:?} of trace {trace_id}"),
            || {
                let spans = self.of_trace(trace_id);
                let all = names.iter().all(|n| spans.iter().any(|s| s.name == *n));
                async move { all.then_some(spans) }
            },
        )
        .await
    }
}

/// A kairos over `pool` on a loopback port; its spans go to `collector` when given.
struct Kairos {
    running: Option<Running>,
    base: String,
    http: reqwest::Client,
}

impl Kairos {
    async fn start(pool: &PgPool, mut opts: Options, collector: Option<SocketAddr>) -> Kairos {
        kairos::outbound::install_crypto_provider();
        opts.shutdown_grace = Duration::from_secs(5);
        opts.otel = collector.map(|addr| {
            let mut cfg = SpanExporterConfig::new(format!("http://{addr}"), "trace-test");
            cfg.flush_interval = Duration::from_millis(100);
            cfg
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let running = app::start(app::Pools::shared(pool.clone()), listener, opts).expect("start");
        let base = format!("http://{}", running.addr);
        Kairos {
            running: Some(running),
            base,
            http: reqwest::Client::new(),
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Value,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .json(&body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        json(req.send().await.expect("request")).await
    }

    async fn put(&self, path: &str, headers: &[(&str, &str)], body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PUT, path, headers, body).await
    }

    async fn post(&self, path: &str, headers: &[(&str, &str)], body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, headers, body).await
    }

    /// Claim one instance of `agent` (waiting up to 10 s for it).
    async fn claim_one(&self, agent: &str) -> Value {
        let (status, body) = self
            .post(
                "/v1/claims",
                &[],
                json!({"agent_id": agent, "worker_id": "w1", "wait_seconds": 10}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let list = body["instances"].as_array().cloned().unwrap_or_default();
        assert_eq!(list.len(), 1, "{body}");
        list[0].clone()
    }

    async fn shutdown(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

/// `(version, trace id, span id, flags)` of a `traceparent`.
fn parts(traceparent: &str) -> (String, String, String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    assert_eq!(
        (p[0].len(), p[1].len(), p[2].len(), p[3].len()),
        (2, 32, 16, 2),
        "{traceparent}"
    );
    (
        p[0].to_owned(),
        p[1].to_owned(),
        p[2].to_owned(),
        p[3].to_owned(),
    )
}

fn hex_id(id: &str) -> String {
    id.replace('-', "")
}

fn one<'a>(spans: &'a [Got], name: &str) -> &'a Got {
    let of: Vec<&Got> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(of.len(), 1, "one {name} span: {spans:#?}");
    of[0]
}

/// The spans of one trace as an indented tree, parents before children, siblings by start.
fn render_tree(spans: &[Got]) -> String {
    let ids: Vec<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut out = String::new();
    fn walk(spans: &[Got], ids: &[&str], parent: Option<&str>, depth: usize, out: &mut String) {
        let mut kids: Vec<&Got> = spans
            .iter()
            .filter(|s| match parent {
                None => s.parent.as_deref().is_none_or(|p| !ids.contains(&p)),
                Some(p) => s.parent.as_deref() == Some(p),
            })
            .collect();
        kids.sort_by_key(|s| s.start_ns);
        for s in kids {
            let mut attrs: Vec<String> = s
                .attrs
                .iter()
                .filter(|(k, _)| k.starts_with("kairos."))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            attrs.sort();
            out.push_str(&format!(
                "{}{} span={} parent={} [{}]\n",
                "  ".repeat(depth),
                s.name,
                s.span_id,
                s.parent.as_deref().unwrap_or("-"),
                attrs.join(" ")
            ));
            walk(spans, ids, Some(&s.span_id), depth + 1, out);
        }
    }
    walk(spans, &ids, None, 0, &mut out);
    out
}

fn with_trigger_loop(node: &str) -> Options {
    let mut opts = Options::api_only(node);
    let mut trigger = TriggerLoopConfig::new(node);
    trigger.max_sleep = Duration::from_millis(300);
    opts.trigger = Some(trigger);
    opts
}

#[sqlx::test]
async fn a_windows_spans_chain_from_window_to_claim_to_the_agents_span_to_completion(pool: PgPool) {
    let (collector, addr) = Collector::start().await;
    let kairos = Kairos::start(&pool, with_trigger_loop("trace-1"), Some(addr)).await;
    let now = kairos::store::now(&pool).await.expect("now");
    let at = kairos::domain::schedule::window_key(now);
    let (status, body) = kairos
        .put(
            "/v1/tasks/report",
            &[],
            json!({"agent_id": "a", "trigger": {"type": "once", "at": at}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");

    // The scheduled window is a trace of its own, named by its instance id.
    let claimed = kairos.claim_one("a").await;
    let traceparent = claimed["traceparent"].as_str().expect("traceparent");
    let (version, trace_id, claim_span, flags) = parts(traceparent);
    let instance_id = claimed["id"].as_str().expect("id").to_owned();
    assert_eq!(
        (version.as_str(), flags.as_str()),
        ("00", "01"),
        "{traceparent}"
    );
    assert_eq!(trace_id, hex_id(&instance_id));
    assert!(claimed.get("tracestate").is_none(), "{claimed}");

    // The test is the agent: its span is a child of the claim's, sent to the collector as an
    // instrumented agent would, and its completion carries the agent's traceparent.
    let agent_span = "a1b2c3d4e5f60718";
    let t = chrono::Utc::now()
        .timestamp_nanos_opt()
        .unwrap_or(0)
        .to_string();
    let export = json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]},
        "scopeSpans": [{"scope": {"name": "test-agent"}, "spans": [{
            "traceId": trace_id, "spanId": agent_span, "parentSpanId": claim_span,
            "name": "report", "kind": 1, "startTimeUnixNano": t, "endTimeUnixNano": t,
            "attributes": [{"key": "kairos.instance_id", "value": {"stringValue": instance_id}}],
        }]}],
    }]});
    let sent = reqwest::Client::new()
        .post(format!("http://{addr}/v1/traces"))
        .json(&export)
        .send()
        .await
        .expect("agent span sent");
    assert!(sent.status().is_success());
    let agent_traceparent = format!("00-{trace_id}-{agent_span}-01");
    let (status, body) = kairos
        .post(
            &format!("/v1/instances/{instance_id}/complete"),
            &[("traceparent", &agent_traceparent)],
            json!({"lease_token": claimed["lease_token"], "result": {"ok": true}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let spans = collector
        .wait_for(
            &trace_id,
            &["kairos.window", "kairos.claim", "report", "kairos.complete"],
        )
        .await;
    let window = one(&spans, "kairos.window");
    let claim = one(&spans, "kairos.claim");
    let agent = one(&spans, "report");
    let complete = one(&spans, "kairos.complete");
    assert_eq!(window.parent, None, "a new trace: the window is its root");
    assert_eq!(claim.parent.as_deref(), Some(window.span_id.as_str()));
    assert_eq!(
        claim.span_id, claim_span,
        "the claim answer names the claim span"
    );
    assert_eq!(agent.parent.as_deref(), Some(claim.span_id.as_str()));
    assert_eq!(complete.parent.as_deref(), Some(agent_span));
    for s in [window, claim, complete] {
        assert_eq!(s.service, "kairos");
        assert_eq!(s.attrs["kairos.task_id"], "report");
        assert_eq!(s.attrs["kairos.instance_id"], instance_id);
        assert_eq!(s.attrs["kairos.window_key"], at);
    }
    let content_types = collector.content_types.lock().expect("lock").clone();
    assert!(
        content_types
            .iter()
            .all(|c| c.starts_with("application/json")),
        "{content_types:?}"
    );
    println!(
        "span tree of instance {instance_id}:\n{}",
        render_tree(&spans)
    );
    kairos.shutdown().await;
}

#[sqlx::test]
async fn a_triggers_traceparent_keeps_its_trace_and_an_invalid_one_is_ignored(pool: PgPool) {
    let (collector, addr) = Collector::start().await;
    let kairos = Kairos::start(&pool, Options::api_only("trace-2"), Some(addr)).await;
    // An invalid traceparent on a task definition is ignored, never refused.
    let (status, body) = kairos
        .put(
            "/v1/tasks/manual",
            &[("traceparent", "not-a-traceparent")],
            json!({"agent_id": "b", "trigger": {"type": "manual"}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");

    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (status, body) = kairos
        .post(
            "/v1/tasks/manual/trigger",
            &[("traceparent", caller), ("tracestate", "vendor=opaque")],
            json!({}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let claimed = kairos.claim_one("b").await;
    let (_, trace_id, claim_span, _) = parts(claimed["traceparent"].as_str().expect("tp"));
    assert_eq!(trace_id, "4bf92f3577b34da6a3ce929d0e0e4736", "{claimed}");
    assert_ne!(
        claim_span, "00f067aa0ba902b7",
        "the claim is a span of its own"
    );
    assert_eq!(claimed["tracestate"], "vendor=opaque", "{claimed}");
    // A failure without a traceparent is a child of the claim.
    let id = claimed["id"].as_str().expect("id");
    let (status, body) = kairos
        .post(
            &format!("/v1/instances/{id}/fail"),
            &[],
            json!({"lease_token": claimed["lease_token"], "error": "boom", "retryable": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let spans = collector
        .wait_for(&trace_id, &["kairos.window", "kairos.claim", "kairos.fail"])
        .await;
    let window = one(&spans, "kairos.window");
    assert_eq!(
        window.parent.as_deref(),
        Some("00f067aa0ba902b7"),
        "the window continues the trigger's span"
    );
    assert!(window.links.is_empty(), "the task has no context to link");
    assert_eq!(
        one(&spans, "kairos.claim").parent.as_deref(),
        Some(window.span_id.as_str())
    );
    assert_eq!(
        one(&spans, "kairos.fail").parent.as_deref(),
        Some(claim_span.as_str())
    );

    // An invalid traceparent on a trigger is ignored: created all the same, a new trace.
    let (status, body) = kairos
        .post(
            "/v1/tasks/manual/trigger",
            &[(
                "traceparent",
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            )],
            json!({}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let claimed = kairos.claim_one("b").await;
    let (_, trace_id, _, _) = parts(claimed["traceparent"].as_str().expect("tp"));
    assert_eq!(trace_id, hex_id(claimed["id"].as_str().expect("id")));
    assert!(claimed.get("tracestate").is_none(), "{claimed}");

    kairos.shutdown().await;
}

#[sqlx::test]
async fn a_task_defined_under_a_traceparent_has_a_new_trace_per_window_linked_to_it(pool: PgPool) {
    let (collector, addr) = Collector::start().await;
    let kairos = Kairos::start(&pool, with_trigger_loop("trace-5"), Some(addr)).await;
    let definer = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (status, body) = kairos
        .put(
            "/v1/tasks/defined",
            &[("traceparent", definer), ("tracestate", "reg=1")],
            json!({"agent_id": "c", "trigger": {"type": "interval", "every_seconds": 1}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let link = (
        "0af7651916cd43dd8448eb211c80319c".to_owned(),
        "b7ad6b7169203331".to_owned(),
        Some("reg=1".to_owned()),
    );

    // Two scheduled windows: each a trace of its own (named by its instance id), each window
    // span a root linked to the definition's span.
    let mut traces = Vec::new();
    for _ in 0..2 {
        let claimed = kairos.claim_one("c").await;
        let id = claimed["id"].as_str().expect("id");
        let (_, trace_id, _, _) = parts(claimed["traceparent"].as_str().expect("tp"));
        assert_eq!(trace_id, hex_id(id), "a new trace per window: {claimed}");
        assert!(claimed.get("tracestate").is_none(), "{claimed}");
        let spans = collector.wait_for(&trace_id, &["kairos.window"]).await;
        let window = one(&spans, "kairos.window");
        assert_eq!(window.parent, None, "the window is its trace's root");
        assert_eq!(window.links, vec![link.clone()], "{window:?}");
        let (status, body) = kairos
            .post(
                &format!("/v1/instances/{id}/complete"),
                &[],
                json!({"lease_token": claimed["lease_token"]}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        traces.push(trace_id);
    }
    assert_ne!(traces[0], traces[1], "every window is a trace of its own");
    assert!(
        collector
            .of_trace("0af7651916cd43dd8448eb211c80319c")
            .is_empty(),
        "no window continues the definition's trace"
    );

    // A manual trigger without a traceparent is a new trace too, linked the same way; one with
    // a traceparent continues the caller's trace and still links to the definition.
    kairos
        .put(
            "/v1/tasks/defined",
            &[("traceparent", definer), ("tracestate", "reg=1")],
            json!({"agent_id": "c", "trigger": {"type": "manual"}}),
        )
        .await;
    for header in [
        None,
        Some("00-11112222333344445555666677778888-00f067aa0ba902b7-01"),
    ] {
        let headers: Vec<(&str, &str)> = header.map(|h| ("traceparent", h)).into_iter().collect();
        let (status, body) = kairos
            .post("/v1/tasks/defined/trigger", &headers, json!({}))
            .await;
        assert_eq!(status, 201, "{body}");
        let id = body["id"].as_str().expect("id");
        let trace_id = match header {
            None => hex_id(id),
            Some(_) => "11112222333344445555666677778888".to_owned(),
        };
        let spans = collector.wait_for(&trace_id, &["kairos.window"]).await;
        let window = one(&spans, "kairos.window");
        assert_eq!(window.attrs["kairos.instance_id"], id, "{window:?}");
        assert_eq!(window.links, vec![link.clone()], "{window:?}");
    }
    kairos.shutdown().await;
}

/// The pushes a receiver got: each one's headers and JSON body.
type Pushes = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

/// A webhook receiver that answers success and keeps each push's headers and body.
async fn push_receiver() -> (Pushes, String) {
    let hits: Pushes = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind receiver");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let app = Router::new()
        .fallback(
            |State(h): State<Pushes>, headers: HeaderMap, body: Bytes| async move {
                let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                h.lock().expect("lock").push((headers, v));
                axum::Json(json!({"status": "success", "result": {"pushed": true}}))
            },
        )
        .with_state(hits.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (hits, url)
}

#[sqlx::test]
async fn webhook_pushes_carry_the_claims_traceparent_as_a_header(pool: PgPool) {
    let (collector, addr) = Collector::start().await;
    let (hits, url) = push_receiver().await;
    let mut opts = Options::api_only("trace-3");
    let mut wh = WebhookDispatcherConfig::new("trace-3", "");
    wh.interval = Duration::from_millis(200);
    opts.webhook = Some(wh);
    let kairos = Kairos::start(&pool, opts, Some(addr)).await;
    let (status, body) = kairos
        .put(
            "/v1/tasks/pushed",
            &[],
            json!({"agent_id": "hooks", "trigger": {"type": "manual"},
                   "dispatch": {"mode": "webhook", "url": url, "secret": "push-secret-123"}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let caller = "00-11112222333344445555666677778888-1234567890abcdef-01";
    let (status, body) = kairos
        .post(
            "/v1/tasks/pushed/trigger",
            &[("traceparent", caller), ("tracestate", "k=v")],
            json!({}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (headers, pushed) = eventually(Duration::from_secs(20), "the push", || {
        let first = hits.lock().expect("lock").first().cloned();
        async move { first }
    })
    .await;
    let header = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .expect("traceparent header");
    assert_eq!(header, pushed["instance"]["traceparent"], "{pushed}");
    let (_, trace_id, claim_span, _) = parts(header);
    assert_eq!(trace_id, "11112222333344445555666677778888");
    assert_eq!(
        headers.get("tracestate").and_then(|v| v.to_str().ok()),
        Some("k=v")
    );
    let spans = collector
        .wait_for(&trace_id, &["kairos.window", "kairos.claim", "kairos.push"])
        .await;
    let claim = one(&spans, "kairos.claim");
    assert_eq!(claim.span_id, claim_span);
    let push = one(&spans, "kairos.push");
    assert_eq!(push.parent.as_deref(), Some(claim_span.as_str()));
    assert_eq!(push.attrs["kairos.push_outcome"], "succeeded");
    kairos.shutdown().await;
}

#[sqlx::test]
async fn with_no_otel_endpoint_nothing_is_exported_and_no_exporter_runs(pool: PgPool) {
    let (collector, _) = Collector::start().await;
    let cfg = kairos::config::Config::default();
    assert!(cfg.otel_endpoint.is_empty());
    assert!(Options::from_config(&cfg).expect("options").otel.is_none());
    let kairos = Kairos::start(&pool, Options::api_only("trace-4"), None).await;
    assert!(
        !kairos.running.as_ref().is_some_and(Running::exports_spans),
        "no exporter task"
    );
    let (status, _) = kairos
        .put(
            "/v1/tasks/quiet",
            &[],
            json!({"agent_id": "q", "trigger": {"type": "manual"}}),
        )
        .await;
    assert_eq!(status, 201);
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (status, _) = kairos
        .post("/v1/tasks/quiet/trigger", &[("traceparent", tp)], json!({}))
        .await;
    assert_eq!(status, 201);
    let claimed = kairos.claim_one("q").await;
    // Claims carry the trace context whether or not spans are exported.
    let (_, trace_id, _, _) = parts(claimed["traceparent"].as_str().expect("tp"));
    assert_eq!(trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    let (status, _) = kairos
        .post(
            &format!(
                "/v1/instances/{}/complete",
                claimed["id"].as_str().expect("id")
            ),
            &[("traceparent", tp)],
            json!({"lease_token": claimed["lease_token"]}),
        )
        .await;
    assert_eq!(status, 200);
    // A stopped kairos has sent everything it would ever send (the exporter flushes at stop).
    kairos.shutdown().await;
    assert!(collector.spans().is_empty(), "{:?}", collector.spans());
}

#[sqlx::test]
async fn a_reaped_attempt_ends_in_a_reap_span_under_its_claim(pool: PgPool) {
    let (collector, addr) = Collector::start().await;
    let mut opts = Options::api_only("trace-5");
    let mut reaper = kairos::services::timeout_reaper::TimeoutReaperConfig::new("trace-5");
    reaper.interval = Duration::from_millis(200);
    opts.reaper = Some(reaper);
    let kairos = Kairos::start(&pool, opts, Some(addr)).await;
    let (status, body) = kairos
        .put(
            "/v1/tasks/abandoned",
            &[],
            json!({"agent_id": "r", "trigger": {"type": "manual"}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = kairos
        .post("/v1/tasks/abandoned/trigger", &[], json!({}))
        .await;
    assert_eq!(status, 201, "{body}");
    // A one-second lease, never renewed: the reaper ends the attempt.
    let (status, body) = kairos
        .post(
            "/v1/claims",
            &[],
            json!({"agent_id": "r", "worker_id": "gone", "lease_seconds": 1}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let claimed = &body["instances"][0];
    let (_, trace_id, claim_span, _) = parts(claimed["traceparent"].as_str().expect("tp"));
    let spans = collector
        .wait_for(&trace_id, &["kairos.window", "kairos.claim", "kairos.reap"])
        .await;
    let reap = one(&spans, "kairos.reap");
    assert_eq!(reap.parent.as_deref(), Some(claim_span.as_str()));
    assert_eq!(
        reap.attrs["kairos.instance_id"],
        claimed["id"].as_str().unwrap_or("")
    );
    assert_eq!(reap.attrs["kairos.status"], "FAILED");
    kairos.shutdown().await;
}

#[sqlx::test]
async fn a_claim_repeated_under_its_claim_id_records_one_claim_span(pool: PgPool) {
    let (collector, addr) = Collector::start().await;
    let kairos = Kairos::start(&pool, Options::api_only("trace-replay"), Some(addr)).await;
    let (status, body) = kairos
        .put(
            "/v1/tasks/again",
            &[],
            json!({"agent_id": "r", "trigger": {"type": "manual"}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = kairos.post("/v1/tasks/again/trigger", &[], json!({})).await;
    assert_eq!(status, 201, "{body}");

    // The worker lost the first answer and asks again under the same claim_id: the same
    // instance and lease come back, and with them the same claim span, recorded once.
    let claim = json!({"agent_id": "r", "worker_id": "w1", "claim_id": "c-1"});
    let mut answers = Vec::new();
    for _ in 0..2 {
        let (status, body) = kairos.post("/v1/claims", &[], claim.clone()).await;
        assert_eq!(status, 200, "{body}");
        answers.push(body["instances"][0].clone());
    }
    assert_eq!(
        answers[0]["lease_token"], answers[1]["lease_token"],
        "{answers:?}"
    );
    assert_eq!(
        answers[0]["traceparent"], answers[1]["traceparent"],
        "{answers:?}"
    );
    let (_, trace_id, _, _) = parts(answers[0]["traceparent"].as_str().expect("tp"));
    let id = answers[0]["id"].as_str().expect("id");
    let (status, body) = kairos
        .post(
            &format!("/v1/instances/{id}/complete"),
            &[],
            json!({"lease_token": answers[0]["lease_token"]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let spans = collector
        .wait_for(&trace_id, &["kairos.claim", "kairos.complete"])
        .await;
    one(&spans, "kairos.claim");
    kairos.shutdown().await;
}
