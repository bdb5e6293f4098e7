//! Accepting connections: the connection cap, TLS, HTTP/1.1 with header
//! limits and timeouts, and graceful shutdown.
//!
//! A connection takes a permit before it is accepted, so beyond
//! [`HttpLimits::max_connections`] new clients wait in the kernel's accept
//! queue and cost nothing here. Each connection then has
//! [`HttpLimits::header_timeout`] to finish its TLS handshake and each of its
//! request heads, which also ends connections left idle; heads larger than
//! [`HttpLimits::max_header_bytes`] are answered 431. Body and request
//! limits are enforced per request in [`crate::app`].
//!
//! [`HttpLimits::max_connections`]: crate::limits::HttpLimits::max_connections
//! [`HttpLimits::header_timeout`]: crate::limits::HttpLimits::header_timeout
//! [`HttpLimits::max_header_bytes`]: crate::limits::HttpLimits::max_header_bytes

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;

use crate::app::{AppState, app};

/// How long in-flight requests may take to finish once shutdown began.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause after a failed accept (out of file descriptors, say), so the loop
/// does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `app(state)` on `listener` (with TLS when `tls` is set) until
/// `shutdown` resolves, then ends long polls, lets in-flight requests finish,
/// and flushes and closes the engine.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), crate::ServerError> {
    let engine = state.engine.clone();
    let limits = state.limits;
    let router = app(state);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(limits.max_header_bytes)
        .keep_alive(true);
    // Permits: taken by the accept loop, released when a connection ends.
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let connections = TaskTracker::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        let http = http.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let _permit = permit;
            let _open = crate::telemetry::connection_opened();
            match tls {
                None => {
                    let connection = http.serve_connection(TokioIo::new(stream), service);
                    finish(watcher.watch(connection), peer).await;
                }
                Some(acceptor) => {
                    match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => {
                            let connection = http.serve_connection(TokioIo::new(stream), service);
                            finish(watcher.watch(connection), peer).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "TLS handshake failed");
                        }
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    // Long polls return empty now instead of holding shutdown for 20 s.
    engine.shutdown_token().cancel();
    connections.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still running after {DRAIN_TIMEOUT:?}; closing anyway");
    }
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, connections.wait()).await;
    engine
        .shutdown()
        .await
        .map_err(|source| crate::ServerError::Close { source })?;
    tracing::info!("store flushed and closed");
    Ok(())
}

async fn finish<E: std::fmt::Display>(
    connection: impl Future<Output = Result<(), E>>,
    peer: SocketAddr,
) {
    // Client-side failures (resets, header timeouts, oversized heads) are
    // the client's business; they are worth a debug line, not an alarm.
    if let Err(error) = connection.await {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}
