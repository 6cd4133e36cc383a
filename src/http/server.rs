//! The HTTP server: hyper under kairos's own accept loop, so that every connection gets a
//! header-read timeout (a client trickling its headers, slowloris, is cut off), the number of
//! open connections is capped (past the cap the listener stops accepting until one closes), and
//! shutdown stops accepting at once and then lets open connections finish.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Limits on connections, from `http_header_read_timeout_seconds` and `http_max_connections`.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

impl ServerLimits {
    pub fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            header_read_timeout: Duration::from_secs(cfg.http_header_read_timeout_seconds),
            max_connections: cfg.http_max_connections,
        }
    }
}

/// After an accept error (e.g. out of file descriptors), wait this long before the next accept.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Serve `app` on `listener` until `stop` fires, then wait for open connections to finish their
/// requests (callers bound that wait with the shutdown grace).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServerLimits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    // HTTP/1 only: its header-read timer runs from the connection's first moment (a client that
    // connects and sends nothing, or idles between requests, is cut off too). Detecting HTTP/2
    // first would wait for bytes without any timeout.
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    let mut at_cap_logged = false;

    loop {
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => {
                at_cap_logged = false;
                p
            }
            Err(_) => {
                if !at_cap_logged {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        reason = "connection cap reached",
                        "not accepting new connections until one closes"
                    );
                    at_cap_logged = true;
                }
                tokio::select! {
                    _ = stop.cancelled() => break,
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                }
            }
        };
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, %peer, "cannot set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            drop(permit);
        });
    }
    // Stop accepting first, then let open connections finish their requests.
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
