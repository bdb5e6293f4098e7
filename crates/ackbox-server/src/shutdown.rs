//! The shutdown signal: SIGINT or SIGTERM, whichever comes first.
//!
//! Listen before anything else starts: until a handler is installed, a
//! signal's default action applies, and a SIGTERM sent while the server is
//! still starting (a supervisor's stop right after its start) would kill
//! it instead of stopping it.

/// SIGINT and SIGTERM, caught from the moment [`StopSignal::listen`]
/// returns.
pub struct StopSignal {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl StopSignal {
    /// Catches SIGINT and SIGTERM from now on; one that cannot be caught is
    /// logged and never arrives.
    pub fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let catch = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(stream) => Some(stream),
                Err(error) => {
                    tracing::error!(%error, "cannot listen for {name}");
                    None
                }
            };
            Self {
                interrupt: catch(SignalKind::interrupt(), "SIGINT"),
                terminate: catch(SignalKind::terminate(), "SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// Resolves at the first SIGINT or SIGTERM since [`StopSignal::listen`].
    pub async fn received(self) {
        #[cfg(unix)]
        {
            async fn next(stream: Option<tokio::signal::unix::Signal>) {
                match stream {
                    Some(mut stream) => {
                        stream.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = next(self.interrupt) => tracing::info!("SIGINT received; shutting down"),
                () = next(self.terminate) => tracing::info!("SIGTERM received; shutting down"),
            }
        }
        #[cfg(not(unix))]
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}

/// Resolves when the process is asked to stop, catching the signals from
/// its first poll: for a server that starts listening at once.
pub async fn signal() {
    StopSignal::listen().received().await;
}
