//! The built `ackbox` binary as a child process, for crash tests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port that was free a moment ago on 127.0.0.1.
///
/// # Panics
/// When no port can be bound.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free local port")
}

/// `ackbox serve` running as a child process.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    port: u16,
}

impl ServerProcess {
    /// Starts `binary serve` on `port` with `data_dir` and waits until `/healthz` answers.
    ///
    /// # Panics
    /// When the process cannot start or does not become healthy within 30 s.
    pub fn start(binary: &Path, data_dir: &Path, port: u16, extra_args: &[&str]) -> Self {
        let child = Command::new(binary)
            .arg("serve")
            .arg("--port")
            .arg(port.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra_args)
            .env("ACKBOX_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the ackbox binary starts");
        let mut process = Self { child, port };
        process.wait_healthy();
        process
    }

    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("ackbox serve exited early with {status}");
            }
            if healthz(self.port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("ackbox serve did not become healthy on port {}", self.port);
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process with SIGKILL (no flush, no goodbye) and reaps it.
    ///
    /// # Panics
    /// When the signal cannot be delivered.
    pub fn kill9(mut self) {
        self.child.kill().expect("SIGKILL delivered");
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for a clean exit; returns whether it exited successfully.
    ///
    /// # Panics
    /// When `kill` cannot be run.
    pub fn terminate(mut self) -> bool {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("kill -TERM runs");
        assert!(status.success(), "kill -TERM failed");
        self.child
            .wait()
            .map(|status| status.success())
            .unwrap_or(false)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether `GET /healthz` on `port` answers 200.
pub fn healthz(port: u16) -> bool {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.1 200")
}

/// The path of a sibling binary of the running test executable's target dir.
pub fn target_binary(name: &str) -> PathBuf {
    let mut path = std::env::current_exe().expect("the test executable's path");
    path.pop();
    if path.ends_with("deps") {
        path.pop();
    }
    path.join(name)
}
