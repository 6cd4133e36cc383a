//! The span exporter: the one task that sends the spans recorded through [`crate::otel::Spans`]
//! to an OpenTelemetry collector, as OTLP/HTTP JSON (`POST <otel_endpoint>/v1/traces`).
//!
//! It takes spans from the bounded queue in batches of at most `batch_size`, sending a batch
//! when it is full or `flush_interval` after its first span. A batch the collector refuses or
//! that cannot be sent is dropped and counted (`kairos_otel_spans_dropped_total`), never
//! retried: tracing must not hold memory or delay anything while a collector is away. Runs
//! only when `otel_endpoint` is set.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::otel::{Span, SpanQueue, export_request};

/// Spans the queue holds before new ones are dropped.
pub const DEFAULT_QUEUE_CAPACITY: usize = 8192;
/// Most spans in one export request.
pub const DEFAULT_BATCH_SIZE: usize = 512;
/// Longest a span waits in a partial batch.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Longest one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// At shutdown, how long the last spans may take to leave.
const FINAL_FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone)]
pub struct SpanExporterConfig {
    /// The collector's base URL (`otel_endpoint`).
    pub endpoint: String,
    pub node_id: String,
    pub queue_capacity: usize,
    pub batch_size: usize,
    pub flush_interval: Duration,
}

impl SpanExporterConfig {
    /// Defaults, for `endpoint`.
    pub fn new(endpoint: impl Into<String>, node_id: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            node_id: node_id.into(),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            batch_size: DEFAULT_BATCH_SIZE,
            flush_interval: DEFAULT_FLUSH_INTERVAL,
        }
    }

    /// `None` when `otel_endpoint` is empty: then nothing is exported.
    pub fn from_config(cfg: &crate::config::Config) -> Option<Self> {
        (!cfg.otel_endpoint.is_empty())
            .then(|| Self::new(cfg.otel_endpoint.clone(), cfg.node_id.clone()))
    }

    fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.endpoint.trim_end_matches('/'))
    }
}

/// What one export did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportReport {
    pub num_exported: usize,
    pub num_dropped: usize,
}

pub struct SpanExporter {
    config: SpanExporterConfig,
    queue: SpanQueue,
    http: reqwest::Client,
}

impl SpanExporter {
    pub fn new(config: SpanExporterConfig, queue: SpanQueue) -> anyhow::Result<Self> {
        crate::outbound::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .user_agent(concat!("kairos/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            config,
            queue,
            http,
        })
    }

    /// Send `spans` in one request; they are dropped (and counted) when it fails.
    pub async fn export(&self, spans: &[Span]) -> ExportReport {
        if spans.is_empty() {
            return ExportReport::default();
        }
        let body = export_request(spans, &self.config.node_id);
        let sent = self
            .http
            .post(self.config.traces_url())
            .json(&body)
            .send()
            .await;
        let failure = match sent {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(format!("HTTP {}", r.status().as_u16())),
            Err(e) => Some(super::error_chain(&e)),
        };
        let n = spans.len();
        match failure {
            None => {
                metrics::counter!("kairos_otel_spans_exported_total").increment(n as u64);
                ExportReport {
                    num_exported: n,
                    num_dropped: 0,
                }
            }
            Some(reason) => {
                metrics::counter!("kairos_otel_spans_dropped_total").increment(n as u64);
                tracing::warn!(spans = n, reason = %reason, endpoint = %self.config.endpoint, "span export failed; the spans are dropped");
                ExportReport {
                    num_exported: 0,
                    num_dropped: n,
                }
            }
        }
    }

    /// Run until `shutdown`, then send what is queued (within a few seconds) and return.
    pub async fn run(mut self, shutdown: CancellationToken) {
        tracing::info!(endpoint = %self.config.endpoint, "exporting spans (OTLP/HTTP JSON)");
        let max = self.config.batch_size.max(1);
        let mut batch: Vec<Span> = Vec::with_capacity(max);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                n = self.queue.rx.recv_many(&mut batch, max) => {
                    if n == 0 {
                        break;
                    }
                }
            }
            // Fill the batch for up to `flush_interval` after its first span.
            let flush_at = Instant::now() + self.config.flush_interval;
            while batch.len() < max {
                let room = max - batch.len();
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep_until(flush_at) => break,
                    n = self.queue.rx.recv_many(&mut batch, room) => {
                        if n == 0 {
                            break;
                        }
                    }
                }
            }
            self.export(&batch).await;
            batch.clear();
        }
        // What is left: everything recorded before the stop, sent in batches.
        self.queue.rx.close();
        let deadline = Instant::now() + FINAL_FLUSH_TIMEOUT;
        while let Ok(s) = self.queue.rx.try_recv() {
            batch.push(s);
            if batch.len() >= max {
                if tokio::time::timeout_at(deadline, self.export(&batch))
                    .await
                    .is_err()
                {
                    return;
                }
                batch.clear();
            }
        }
        let _ = tokio::time::timeout_at(deadline, self.export(&batch)).await;
    }
}
