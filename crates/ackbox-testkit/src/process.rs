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
            if serves(self.child.id(), self.port) {
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

/// Whether process `pid` answers `GET /healthz` on `port` with 200.
///
/// A port from [`free_port`] is free only for a moment: another test's
/// server may bind it first, and its `/healthz` would answer for a server
/// that is still starting, or that is about to fail to bind. So the answer
/// counts only while `pid` holds the socket listening on the port.
pub fn serves(pid: u32, port: u16) -> bool {
    healthz(port) && listens_on(pid, port)
}

/// Whether process `pid` holds a socket listening on `port`: the listening
/// sockets of `/proc/net/tcp{,6}` matched by inode against the process's
/// open files.
#[cfg(target_os = "linux")]
pub fn listens_on(pid: u32, port: u16) -> bool {
    const LISTEN: &str = "0A";
    let listening: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let local_port = fields.get(1)?.rsplit(':').next()?;
                    let listening = u16::from_str_radix(local_port, 16).ok() == Some(port)
                        && fields.get(3) == Some(&LISTEN);
                    let inode = fields.get(9)?;
                    listening.then(|| format!("socket:[{inode}]"))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let Ok(open_files) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    open_files.flatten().any(|file| {
        std::fs::read_link(file.path()).is_ok_and(|target| {
            listening
                .iter()
                .any(|socket| target.as_os_str() == socket.as_str())
        })
    })
}

/// Elsewhere the owner cannot be read; the answer on the port has to do.
#[cfg(not(target_os = "linux"))]
pub fn listens_on(_pid: u32, _port: u16) -> bool {
    true
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_port_belongs_to_the_process_that_listens_on_it_only() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a listener");
        let port = listener.local_addr().expect("its address").port();
        let parent = std::os::unix::process::parent_id();
        assert!(listens_on(std::process::id(), port));
        assert!(
            !listens_on(parent, port),
            "another process does not hold it"
        );
        drop(listener);
        assert!(
            !listens_on(std::process::id(), port),
            "a closed one is nobody's"
        );
    }
}
