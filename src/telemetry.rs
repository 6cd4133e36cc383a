//! Logging (tracing, text or JSON, `RUST_LOG` filters) and the process-wide Prometheus recorder.
//! Metric names live beside the code that moves them; this module only installs the exporter.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Histogram buckets for `kairos_schedule_lag_seconds`: 1 ms to 60 s.
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Install the tracing subscriber once; `RUST_LOG` wins over `level`. Later calls do nothing.
pub fn init_logging(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

static METRICS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process-wide Prometheus handle, installing the recorder on first use. `None` only if
/// another recorder was installed first.
pub fn metrics_handle() -> Option<&'static PrometheusHandle> {
    METRICS
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("kairos_schedule_lag_seconds".to_owned()),
                    LAG_BUCKETS,
                )
                .ok()?;
            match builder.install_recorder() {
                Ok(handle) => {
                    describe_metrics();
                    Some(handle)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics recorder not installed");
                    None
                }
            }
        })
        .as_ref()
}

/// Describe every kairos metric and register the counters at zero, so a scrape shows them
/// before they first move and rates can be computed from the first sample.
fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    let counters: &[(&'static str, &'static str)] = &[
        (
            "kairos_windows_created_total",
            "Windows materialised as PENDING instances",
        ),
        (
            "kairos_windows_staged_total",
            "Of those, windows the trigger loop wrote ahead and published at their instant (trigger_lead_ms)",
        ),
        (
            "kairos_debounced_triggers_total",
            "Manual triggers taken by a debounced task's waiting instance instead of making a new one",
        ),
        (
            "kairos_window_conflicts_total",
            "Window inserts that found the window already there (lost to another replica or an earlier pass)",
        ),
        (
            "kairos_fence_rejections_total",
            "heartbeat/complete/fail calls refused because the lease token no longer holds the instance",
        ),
        (
            "kairos_retries_total",
            "FAILED instances moved back to PENDING by the retry scanner",
        ),
        (
            "kairos_catchup_not_recorded_total",
            "Missed windows beyond the catch-up bound, neither run nor recorded",
        ),
        (
            "kairos_circuit_opened_total",
            "Tasks paused by their circuit breaker",
        ),
    ];
    for (name, help) in counters {
        describe_counter!(*name, *help);
        metrics::counter!(*name).increment(0);
    }
    describe_counter!(
        "kairos_skipped_total",
        "Windows recorded SKIPPED, by reason (missed, overlap)"
    );
    for reason in ["missed", "overlap"] {
        metrics::counter!("kairos_skipped_total", "reason" => reason).increment(0);
    }
    describe_counter!(
        "kairos_reaped_total",
        "RUNNING instances failed by the timeout reaper, by kind (lease_expired, timeout)"
    );
    for kind in ["lease_expired", "timeout"] {
        metrics::counter!("kairos_reaped_total", "kind" => kind).increment(0);
    }
    describe_counter!(
        "kairos_webhook_pushes_total",
        "Webhook pushes by outcome (succeeded, accepted, failed, stale)"
    );
    describe_counter!(
        "kairos_notifications_total",
        "Notification delivery attempts by outcome (delivered, retry, undeliverable)"
    );
    describe_counter!(
        "kairos_pruned_total",
        "Rows deleted by the retention pruner, by table"
    );
    describe_counter!(
        "kairos_claims_total",
        "Claim looks over HTTP by outcome (claimed, empty); many empty looks per claimed one mean claimers contend"
    );
    for outcome in ["claimed", "empty"] {
        metrics::counter!("kairos_claims_total", "outcome" => outcome).increment(0);
    }
    describe_gauge!(
        "kairos_claim_waiters",
        "Long-poll claims waiting in this process (capped by claim_max_waiters)"
    );
    describe_counter!(
        "kairos_claim_waiters_refused_total",
        "Long-poll claims answered 429 because claim_max_waiters were already waiting"
    );
    describe_gauge!("kairos_instances", "Instances per status");
    describe_gauge!(
        "kairos_loop_last_tick_timestamp",
        Unit::Seconds,
        "Unix time of each background loop's last completed pass"
    );
    describe_histogram!(
        "kairos_schedule_lag_seconds",
        Unit::Seconds,
        "started_at - scheduled_at of first attempts, at claim"
    );
}

/// Log an error with its whole cause chain.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}
