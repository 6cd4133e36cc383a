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
                Ok(handle) => Some(handle),
                Err(e) => {
                    tracing::warn!(error = %e, "metrics recorder not installed");
                    None
                }
            }
        })
        .as_ref()
}
