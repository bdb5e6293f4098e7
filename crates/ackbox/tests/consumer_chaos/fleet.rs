//! The consumer processes, from the driver's side: start them (this test
//! binary again, in its consumer role), SIGKILL and restart them, stop them
//! gracefully, and add up what they report.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::consumer_role::{ConsumerSpec, Counts, REPORT_PREFIX, Report, SPEC_VARIABLE};

/// The latest counts of each consumer in each process incarnation, written
/// by the incarnation's stdout reader; a killed incarnation keeps its last.
type Reports = Arc<Mutex<BTreeMap<(usize, u32, String), Counts>>>;

/// One running incarnation of a consumer process.
struct Incarnation {
    child: Child,
    /// Closing it asks the process to stop.
    stdin: Option<ChildStdin>,
    reader: Option<JoinHandle<()>>,
}

impl Drop for Incarnation {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Consumer processes `0..n`, each always running (a killed one is
/// restarted at once, as a supervisor would).
pub(crate) struct Fleet {
    specs: Vec<ConsumerSpec>,
    running: Vec<Incarnation>,
    /// Incarnations started so far, per process.
    incarnations: Vec<u32>,
    reports: Reports,
}

impl Fleet {
    pub(crate) fn start(specs: Vec<ConsumerSpec>) -> Self {
        let reports = Reports::default();
        let running = specs.iter().map(|spec| spawn(spec, 0, &reports)).collect();
        Self {
            incarnations: vec![1; specs.len()],
            specs,
            running,
            reports,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.specs.len()
    }

    /// SIGKILLs process `process` (no shutdown, no goodbye: its open
    /// transactions roll back when the database sees the connection drop,
    /// its leases run out) and starts it again.
    pub(crate) fn kill_and_restart(&mut self, process: usize) {
        let incarnation = &mut self.running[process];
        let _ = incarnation.child.kill();
        let _ = incarnation.child.wait();
        let incarnation = self.incarnations[process];
        self.incarnations[process] += 1;
        self.running[process] = spawn(&self.specs[process], incarnation, &self.reports);
    }

    /// Processes that exited although nobody killed or stopped them, each
    /// restarted; a description of each, for the trial's failures.
    pub(crate) fn restart_exited(&mut self) -> Vec<String> {
        let mut exited = Vec::new();
        for process in 0..self.running.len() {
            if let Ok(Some(status)) = self.running[process].child.try_wait() {
                exited.push(format!(
                    "consumer process {process} exited on its own ({status}); restarted"
                ));
                let incarnation = self.incarnations[process];
                self.incarnations[process] += 1;
                self.running[process] = spawn(&self.specs[process], incarnation, &self.reports);
            }
        }
        exited
    }

    /// Asks every process to stop (closes its stdin) and waits up to
    /// `deadline` for all; returns a failure for each that did not stop
    /// cleanly in time (it is killed).
    pub(crate) fn stop(&mut self, deadline: Duration) -> Vec<String> {
        for incarnation in &mut self.running {
            incarnation.stdin = None;
        }
        let until = Instant::now() + deadline;
        let mut failures = Vec::new();
        for (process, incarnation) in self.running.iter_mut().enumerate() {
            match wait_until(&mut incarnation.child, until) {
                Some(status) if status.success() => {}
                Some(status) => failures.push(format!(
                    "consumer process {process} stopped with {status} instead of exiting cleanly"
                )),
                None => {
                    let _ = incarnation.child.kill();
                    let _ = incarnation.child.wait();
                    failures.push(format!(
                        "consumer process {process} had not stopped {deadline:?} after being asked to; killed"
                    ));
                }
            }
            if let Some(reader) = incarnation.reader.take() {
                let _ = reader.join();
            }
        }
        failures
    }

    /// Each consumer's counts summed over every incarnation's last report.
    pub(crate) fn counts(&self) -> BTreeMap<String, Counts> {
        let mut totals: BTreeMap<String, Counts> = BTreeMap::new();
        for ((_, _, consumer), counts) in self.reports.lock().expect("reports lock poisoned").iter()
        {
            totals.entry(consumer.clone()).or_default().add(counts);
        }
        totals
    }

    /// Incarnations started, per process.
    pub(crate) fn incarnations(&self) -> &[u32] {
        &self.incarnations
    }
}

fn spawn(spec: &ConsumerSpec, incarnation: u32, reports: &Reports) -> Incarnation {
    let executable = std::env::current_exe().expect("the test executable's path");
    let mut child = Command::new(executable)
        .env(
            SPEC_VARIABLE,
            serde_json::to_string(spec).expect("a spec serializes"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("a consumer process starts");
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("a piped stdout");
    let (process, reports) = (spec.process, Arc::clone(reports));
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            match line
                .strip_prefix(REPORT_PREFIX)
                .and_then(|json| serde_json::from_str::<Report>(json).ok())
            {
                Some(report) => {
                    reports
                        .lock()
                        .expect("reports lock poisoned")
                        .insert((process, incarnation, report.consumer), report.counts);
                }
                None => println!("[consumer {process}.{incarnation}] {line}"),
            }
        }
    });
    Incarnation {
        child,
        stdin,
        reader: Some(reader),
    }
}

fn wait_until(child: &mut Child, until: Instant) -> Option<ExitStatus> {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
