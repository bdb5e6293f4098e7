//! A PostgreSQL primary and its synchronous streaming replica, each a child
//! process of the test, made from the machine's PostgreSQL binaries with
//! `initdb` and `pg_basebackup` in a temporary directory, on ports of their
//! own. PostgreSQL refuses to run as root, so under root its programs run as
//! the `postgres` user (`setpriv`, which execs: the child is the server).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ackbox_testkit::process::free_port;
use sqlx::{Connection, PgConnection};

/// One PostgreSQL server: the test's child process.
struct Server {
    child: Child,
    data: PathBuf,
    port: u16,
}

impl Server {
    /// Kills the postmaster and every backend it forked with SIGKILL, as a
    /// crash of its machine would: nothing is flushed or said goodbye.
    fn kill9(mut self) {
        let backends = children_of(self.child.id());
        self.child
            .kill()
            .expect("SIGKILL delivered to the postmaster");
        for pid in backends {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.child.wait();
    }

    /// An immediate shutdown (SIGQUIT): the server ends its backends and
    /// releases its shared memory.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-QUIT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

/// A primary replicating synchronously to one standby.
pub(crate) struct ReplicatedPostgres {
    bindir: PathBuf,
    primary: Option<Server>,
    replica: Option<Server>,
    _root: tempfile::TempDir,
}

impl ReplicatedPostgres {
    /// The PostgreSQL server binaries, from `ACKBOX_TEST_POSTGRES_BINDIR`;
    /// `None` (with a "skipped" line naming `what`) when it is not set.
    pub(crate) fn bindir(what: &str) -> Option<PathBuf> {
        let Ok(bindir) = std::env::var("ACKBOX_TEST_POSTGRES_BINDIR") else {
            eprintln!(
                "skipped: ACKBOX_TEST_POSTGRES_BINDIR is not set, so {what} is not tested here"
            );
            return None;
        };
        Some(PathBuf::from(bindir))
    }

    /// A new primary, a base backup of it started as its synchronous
    /// standby, and both streaming.
    pub(crate) async fn start(bindir: PathBuf) -> Self {
        let root = tempfile::tempdir().expect("a temporary directory");
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let sockets = owned_directory(&root.path().join("sockets"));
        let primary_data = owned_directory(&root.path().join("primary"));
        let replica_data = owned_directory(&root.path().join("replica"));
        let mut pair = Self {
            bindir,
            primary: None,
            replica: None,
            _root: root,
        };
        pair.run(
            "initdb",
            &[
                "-D",
                path_str(&primary_data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ],
        );
        let primary_port = free_port();
        append(
            &primary_data.join("postgresql.conf"),
            &format!(
                "listen_addresses = '127.0.0.1'\n\
                 port = {primary_port}\n\
                 unix_socket_directories = '{}'\n\
                 shared_buffers = '32MB'\n\
                 synchronous_standby_names = '*'\n",
                sockets.display()
            ),
        );
        pair.primary = Some(pair.launch(primary_data, primary_port).await);
        pair.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary_port.to_string(),
                "-U",
                "postgres",
                "-D",
                path_str(&replica_data),
                "--write-recovery-conf",
                "--wal-method=stream",
                "--checkpoint=fast",
            ],
        );
        let replica_port = free_port();
        // Promoted, the replica stands alone: it must not wait for a
        // standby of its own.
        append(
            &replica_data.join("postgresql.conf"),
            &format!("port = {replica_port}\nsynchronous_standby_names = ''\n"),
        );
        pair.replica = Some(pair.launch(replica_data, replica_port).await);
        pair.wait_until_synchronous().await;
        pair
    }

    /// A URL naming the primary, then the replica, as an application
    /// configures it to follow a failover.
    pub(crate) fn url(&self) -> String {
        let port = |server: &Option<Server>| server.as_ref().expect("running").port;
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            port(&self.primary),
            port(&self.replica)
        )
    }

    /// Crashes the primary.
    pub(crate) fn kill_primary(&mut self) {
        self.primary.take().expect("the primary runs").kill9();
    }

    /// Promotes the replica to primary, as an HA manager would once the
    /// primary is gone, and waits until it takes writes.
    pub(crate) async fn promote_replica(&self) {
        let replica = self.replica.as_ref().expect("the replica runs");
        let mut connection = PgConnection::connect(&replica.url()).await.unwrap();
        let promoted: bool = sqlx::query_scalar("SELECT pg_promote(wait => true)")
            .fetch_one(&mut connection)
            .await
            .unwrap();
        assert!(promoted, "the replica was not promoted");
    }

    fn run(&self, program: &str, args: &[&str]) {
        let output = as_postgres(&self.bindir.join(program))
            .args(args)
            .output()
            .unwrap_or_else(|error| panic!("{program} does not start: {error}"));
        assert!(
            output.status.success(),
            "{program} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    async fn launch(&self, data: PathBuf, port: u16) -> Server {
        let log = fs::File::create(data.with_extension("log")).unwrap();
        let child = as_postgres(&self.bindir.join("postgres"))
            .arg("-D")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("postgres starts");
        let server = Server { child, data, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while PgConnection::connect(&server.url()).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "PostgreSQL in {} did not accept connections within a minute: {}",
                server.data.display(),
                fs::read_to_string(server.data.with_extension("log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        server
    }

    async fn wait_until_synchronous(&self) {
        let primary = self.primary.as_ref().expect("the primary runs");
        let mut connection = PgConnection::connect(&primary.url()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let states: Vec<String> = sqlx::query_scalar(
                "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'",
            )
            .fetch_all(&mut connection)
            .await
            .unwrap();
            if states.iter().any(|state| state == "sync") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not become a synchronous standby within a minute"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ReplicatedPostgres {
    fn drop(&mut self) {
        for server in [self.primary.take(), self.replica.take()]
            .into_iter()
            .flatten()
        {
            server.stop();
        }
    }
}

/// `program` as the `postgres` user when the test runs as root.
fn as_postgres(program: &Path) -> Command {
    if !running_as_root() {
        return Command::new(program);
    }
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
    command
}

fn running_as_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|metadata| metadata.uid() == 0)
}

/// A directory that PostgreSQL, as the `postgres` user, owns with the mode
/// it requires of a data directory.
fn owned_directory(path: &Path) -> PathBuf {
    fs::create_dir(path).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o700)).unwrap();
    if running_as_root() {
        let id = |flag: &str| -> u32 {
            let output = Command::new("id")
                .args([flag, "postgres"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&output.stdout)
                .trim()
                .parse()
                .unwrap()
        };
        std::os::unix::fs::chown(path, Some(id("-u")), Some(id("-g"))).unwrap();
    }
    path.to_owned()
}

fn append(path: &Path, text: &str) {
    let mut file = OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                // The command name, in parentheses, may hold spaces; the
                // parent's pid is the second field after it.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .is_some_and(|parent| parent == pid.to_string())
            })
        })
        .collect()
}
