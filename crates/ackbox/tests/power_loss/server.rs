//! `ackbox serve` as a child process whose failures are findings, not
//! panics: a server that does not come up on what a cut left is the bug
//! this test looks for, and is reported with its seed and what it said.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ackbox_testkit::process::{free_port, serves};

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");

/// How long a start may take on the model disk before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// What a server says when its port was taken between `free_port` and
/// its bind: not a finding, a reason to start it again elsewhere.
const PORT_TAKEN: &str = "cannot listen on";

/// A running `ackbox serve`.
pub(crate) struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
    /// Where this server's output starts in the log.
    log_start: u64,
}

impl Server {
    /// Starts `ackbox serve` on `data_dir` with `args`; its standard error
    /// goes to `log` (appended, so a lineage's starts read in order).
    pub(crate) fn spawn(data_dir: &Path, args: &[String], log: &Path) -> Self {
        let stderr = File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("the server's log opens");
        let log_start = stderr.metadata().map_or(0, |metadata| metadata.len());
        let port = free_port();
        let child = Command::new(BINARY)
            .arg("serve")
            .arg("--port")
            .arg(port.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .env("ACKBOX_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("the ackbox binary starts");
        Self {
            child,
            port,
            log: log.to_owned(),
            log_start,
        }
    }

    /// Starts the server as [`Server::spawn`] does and waits until it is
    /// healthy; otherwise why not, with the end of what it said.
    pub(crate) async fn start(
        data_dir: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Self, String> {
        loop {
            let mut server = Self::spawn(data_dir, args, log);
            match server.wait_healthy().await {
                Ok(()) => return Ok(server),
                Err(why) if why.contains(PORT_TAKEN) => {}
                Err(why) => return Err(why),
            }
        }
    }

    async fn wait_healthy(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited with {status}: {}", self.log_tail()));
            }
            let (pid, port) = (self.child.id(), self.port);
            if tokio::task::spawn_blocking(move || serves(pid, port))
                .await
                .unwrap_or(false)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "not healthy after {START_TIMEOUT:?}: {}",
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, and waits until the process is gone (with its open files).
    pub(crate) fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM: the server starts to stop.
    pub(crate) fn signal_stop(&self) -> Result<(), String> {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .map_err(|error| format!("kill -TERM: {error}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -TERM: {status}"))
        }
    }

    /// SIGTERM and a clean exit; otherwise what happened.
    pub(crate) async fn terminate(mut self) -> Result<(), String> {
        self.signal_stop()?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(format!("exited with {status}: {}", self.log_tail()));
                }
                Ok(None) if Instant::now() > deadline => {
                    return Err(format!(
                        "still running {START_TIMEOUT:?} after SIGTERM: {}",
                        self.log_tail()
                    ));
                }
                Ok(None) => tokio::time::sleep(Duration::from_millis(10)).await,
                Err(error) => return Err(format!("wait: {error}")),
            }
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read(&self.log).unwrap_or_default();
        let own = log
            .get(usize::try_from(self.log_start).unwrap_or(0)..)
            .unwrap_or_default();
        let own = String::from_utf8_lossy(own);
        let lines: Vec<&str> = own.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
