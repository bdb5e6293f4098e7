//! The traffic of one cycle, up to the power cut that ends it: queues
//! created, messages sent concurrently (`SendMessage` and
//! `SendMessageBatch`, to a standard and a FIFO queue, and in some cycles
//! bodies large enough to bring the WAL to a checkpoint), and a consumer
//! receiving and deleting. Every send and delete is in the ledger before it
//! leaves, and a send is acknowledged there only once answered 200. A task
//! stops at its first request not answered 200: the server is going. A
//! request refused as the client's fault (4xx) is the test's own bug, and
//! is reported.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::disk::SplitMix;
use super::ledger::{Ledger, PEEK_LIMIT, body};
use super::sqs::{Answer, sqs};

/// A ledger the tasks share; held only between awaits.
pub(crate) type SharedLedger = Arc<Mutex<Ledger>>;

fn record<T>(ledger: &SharedLedger, write: impl FnOnce(&mut Ledger) -> T) -> T {
    write(&mut ledger.lock().unwrap_or_else(PoisonError::into_inner))
}

/// What one sender does.
#[derive(Debug, Clone, Copy)]
enum Style {
    /// `SendMessage`, small and medium bodies.
    Singles,
    /// `SendMessageBatch` of 1 to 10.
    Batches,
    /// Both, to a FIFO queue, in three groups.
    Fifo,
    /// `SendMessage` of 100–250 KB: in a heavy lineage, they fill the WAL
    /// to the server's checkpoint threshold in a cycle or two.
    Bulk,
}

impl Style {
    fn queue_suffix(self) -> &'static str {
        match self {
            Self::Singles => "-singles",
            Self::Batches => "-batches",
            Self::Fifo => ".fifo",
            Self::Bulk => "-bulk",
        }
    }
}

/// One cycle's traffic, drawn from the lineage's generator.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Prefix of the cycle's queue names and message ids.
    label: String,
    senders: Vec<(Style, usize)>,
    seed: u64,
}

impl Plan {
    /// A cycle's traffic; a `heavy` one always sends large bodies, enough
    /// for the WAL to reach the server's checkpoint threshold in a cycle or
    /// two.
    pub(crate) fn draw(rng: &mut SplitMix, label: String, heavy: bool) -> Self {
        // Each queue stays below what a peek can check, whatever the cut.
        let most = PEEK_LIMIT as u64 - 10;
        let mut senders = vec![
            (Style::Singles, 10 + rng.up_to(40) as usize),
            (Style::Batches, 10 + rng.up_to(most - 10) as usize),
            (Style::Fifo, 10 + rng.up_to(most - 10) as usize),
        ];
        if heavy {
            senders.push((Style::Bulk, 60 + rng.up_to(most - 60) as usize));
        } else if rng.one_in(4) {
            senders.push((Style::Bulk, 10 + rng.up_to(20) as usize));
        }
        Self {
            label,
            senders,
            seed: rng.next_u64(),
        }
    }

    /// Messages the plan sends if no cut stops it.
    pub(crate) fn messages(&self) -> usize {
        self.senders.iter().map(|(_, budget)| budget).sum()
    }
}

/// What the tasks share besides the ledger.
#[derive(Default)]
struct Shared {
    /// Sends acknowledged in this cycle.
    acknowledged: AtomicUsize,
    /// The cycle's queues, once created.
    queues: Mutex<Vec<String>>,
    /// Requests refused as malformed.
    refusals: Mutex<Vec<String>>,
    /// Set once the server is gone.
    stop: AtomicBool,
}

impl Shared {
    /// Whether `answer` lets the task go on (a 200); a 4xx is noted.
    fn go_on(&self, action: &str, answer: &Answer) -> bool {
        if answer.ok().is_some() {
            return true;
        }
        if let Answer::Status(400..=499, _) = answer {
            self.refusals
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("{action}: {answer}"));
        }
        false
    }
}

/// A cycle's traffic, running.
pub(crate) struct Running {
    senders: Vec<JoinHandle<()>>,
    consumer: JoinHandle<()>,
    shared: Arc<Shared>,
}

impl Running {
    /// Sends acknowledged so far in this cycle.
    pub(crate) fn acknowledged(&self) -> usize {
        self.shared.acknowledged.load(Ordering::SeqCst)
    }

    /// Whether every sender has sent its budget (or stopped).
    pub(crate) fn senders_done(&self) -> bool {
        self.senders.iter().all(JoinHandle::is_finished)
    }

    /// Stops the tasks (the server is gone) and waits for them; the
    /// requests the server refused as malformed.
    ///
    /// # Panics
    /// When a task does not notice that the server is gone.
    pub(crate) async fn join(self) -> Vec<String> {
        self.shared.stop.store(true, Ordering::SeqCst);
        let tasks = self.senders.into_iter().chain([self.consumer]);
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("the workload notices the cut")
                .expect("a workload task");
        }
        std::mem::take(
            &mut self
                .shared
                .refusals
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// Starts `plan` against the server at `endpoint`.
pub(crate) fn start(endpoint: &str, plan: &Plan, ledger: &SharedLedger) -> Running {
    let shared = Arc::new(Shared::default());
    let mut rng = SplitMix(plan.seed);
    let senders = plan
        .senders
        .iter()
        .map(|&(style, budget)| {
            let sender = Sender {
                endpoint: endpoint.to_owned(),
                ledger: Arc::clone(ledger),
                shared: Arc::clone(&shared),
                queue: format!("{}{}", plan.label, style.queue_suffix()),
                style,
                budget,
                rng: SplitMix(rng.next_u64()),
            };
            tokio::spawn(sender.run())
        })
        .collect();
    let consumer = Consumer {
        endpoint: endpoint.to_owned(),
        ledger: Arc::clone(ledger),
        shared: Arc::clone(&shared),
        rng: SplitMix(rng.next_u64()),
    };
    Running {
        senders,
        consumer: tokio::spawn(consumer.run()),
        shared,
    }
}

struct Sender {
    endpoint: String,
    ledger: SharedLedger,
    shared: Arc<Shared>,
    queue: String,
    style: Style,
    budget: usize,
    rng: SplitMix,
}

/// One message about to be sent.
struct Outgoing {
    id: String,
    body_len: usize,
    group: Option<(String, u64)>,
}

impl Sender {
    async fn run(mut self) {
        let fifo = matches!(self.style, Style::Fifo);
        record(&self.ledger, |ledger| ledger.queue_attempted(&self.queue));
        let attributes = if fifo {
            json!({"FifoQueue": "true"})
        } else {
            json!({})
        };
        let created = sqs(
            &self.endpoint,
            "CreateQueue",
            &json!({"QueueName": self.queue, "Attributes": attributes}),
        )
        .await;
        if !self.shared.go_on("CreateQueue", &created) {
            return;
        }
        let Some(url) = created
            .ok()
            .and_then(|body| body["QueueUrl"].as_str())
            .map(str::to_owned)
        else {
            return;
        };
        record(&self.ledger, |ledger| ledger.queue_created(&self.queue));
        self.shared
            .queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(url.clone());
        let mut sent = 0;
        let mut next_in_group = [0u64; 3];
        while sent < self.budget && !self.shared.stop.load(Ordering::SeqCst) {
            let count = match self.style {
                Style::Singles | Style::Bulk => 1,
                Style::Batches | Style::Fifo => {
                    (1 + self.rng.up_to(9) as usize).min(self.budget - sent)
                }
            };
            let outgoing: Vec<Outgoing> = (sent..sent + count)
                .map(|number| {
                    let group = fifo.then(|| {
                        let group = self.rng.up_to(2) as usize;
                        next_in_group[group] += 1;
                        (format!("g{group}"), next_in_group[group])
                    });
                    Outgoing {
                        id: format!("{}-{number}", self.queue),
                        body_len: self.body_len(),
                        group,
                    }
                })
                .collect();
            sent += count;
            record(&self.ledger, |ledger| {
                for message in &outgoing {
                    ledger.sending(
                        &message.id,
                        &self.queue,
                        message.body_len,
                        message.group.clone(),
                    );
                }
            });
            let answered = if count == 1 && !matches!(self.style, Style::Batches) {
                self.send_one(&url, &outgoing[0]).await
            } else {
                self.send_batch(&url, &outgoing).await
            };
            if !answered {
                return;
            }
            let pause = self.rng.up_to(8);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    fn body_len(&mut self) -> usize {
        let len = match self.style {
            Style::Bulk => 100_000 + self.rng.up_to(150_000),
            _ if self.rng.one_in(20) => 4_000 + self.rng.up_to(16_000),
            _ if self.rng.one_in(4) => 200 + self.rng.up_to(3_000),
            _ => self.rng.up_to(200),
        };
        len as usize
    }

    fn entry(message: &Outgoing) -> Value {
        send_entry(&message.id, message.body_len, message.group.as_ref())
    }

    /// Whether the server answered (200 or not).
    async fn send_one(&self, url: &str, message: &Outgoing) -> bool {
        let mut request = Self::entry(message);
        request["QueueUrl"] = json!(url);
        let answer = sqs(&self.endpoint, "SendMessage", &request).await;
        if !self.shared.go_on("SendMessage", &answer) {
            return false;
        }
        let message_id = answer
            .ok()
            .and_then(|body| body["MessageId"].as_str())
            .unwrap_or_default()
            .to_owned();
        record(&self.ledger, |ledger| {
            ledger.acknowledged(&message.id, message_id);
        });
        self.shared.acknowledged.fetch_add(1, Ordering::SeqCst);
        true
    }

    async fn send_batch(&self, url: &str, outgoing: &[Outgoing]) -> bool {
        let entries: Vec<Value> = outgoing
            .iter()
            .enumerate()
            .map(|(index, message)| {
                let mut entry = Self::entry(message);
                entry["Id"] = json!(index.to_string());
                entry
            })
            .collect();
        let answer = sqs(
            &self.endpoint,
            "SendMessageBatch",
            &json!({"QueueUrl": url, "Entries": entries}),
        )
        .await;
        if !self.shared.go_on("SendMessageBatch", &answer) {
            return false;
        }
        let Some(answered) = answer.ok() else {
            return false;
        };
        let stored: Vec<(&Outgoing, String)> = answered["Successful"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let message = outgoing.get(entry["Id"].as_str()?.parse::<usize>().ok()?)?;
                Some((message, entry["MessageId"].as_str()?.to_owned()))
            })
            .collect();
        record(&self.ledger, |ledger| {
            for (message, message_id) in &stored {
                ledger.acknowledged(&message.id, message_id.clone());
            }
        });
        self.shared
            .acknowledged
            .fetch_add(stored.len(), Ordering::SeqCst);
        stored.len() == outgoing.len()
    }
}

/// A `SendMessage` request, or a `SendMessageBatch` entry, for message
/// `id`; a FIFO one is deduplicated by its id.
pub(crate) fn send_entry(id: &str, body_len: usize, group: Option<&(String, u64)>) -> Value {
    let mut entry = json!({"MessageBody": body(id, body_len)});
    if let Some((group, _)) = group {
        entry["MessageGroupId"] = json!(group);
        entry["MessageDeduplicationId"] = json!(id);
    }
    entry
}

/// Receives from the cycle's queues and deletes two in three of what it
/// gets; the rest come back when their short lease ends.
struct Consumer {
    endpoint: String,
    ledger: SharedLedger,
    shared: Arc<Shared>,
    rng: SplitMix,
}

impl Consumer {
    async fn run(mut self) {
        while !self.shared.stop.load(Ordering::SeqCst) {
            let urls = self
                .shared
                .queues
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let mut received_any = false;
            for url in urls {
                let received = sqs(
                    &self.endpoint,
                    "ReceiveMessage",
                    &json!({
                        "QueueUrl": url,
                        "MaxNumberOfMessages": 1 + self.rng.up_to(9),
                        "VisibilityTimeout": 1 + self.rng.up_to(2),
                    }),
                )
                .await;
                if !self.shared.go_on("ReceiveMessage", &received) {
                    return;
                }
                let Some(answer) = received.ok() else {
                    return;
                };
                let messages = answer["Messages"].as_array().cloned().unwrap_or_default();
                received_any |= !messages.is_empty();
                let deletes: Vec<(String, String)> = messages
                    .iter()
                    .filter(|_| !self.rng.one_in(3))
                    .filter_map(|message| {
                        let id = message["Body"].as_str()?.split('|').next()?.to_owned();
                        Some((id, message["ReceiptHandle"].as_str()?.to_owned()))
                    })
                    .collect();
                if deletes.is_empty() {
                    continue;
                }
                record(&self.ledger, |ledger| {
                    for (id, _) in &deletes {
                        ledger.deleting(id);
                    }
                });
                let entries: Vec<Value> = deletes
                    .iter()
                    .enumerate()
                    .map(|(index, (_, handle))| {
                        json!({"Id": index.to_string(), "ReceiptHandle": handle})
                    })
                    .collect();
                let deleted = sqs(
                    &self.endpoint,
                    "DeleteMessageBatch",
                    &json!({"QueueUrl": url, "Entries": entries}),
                )
                .await;
                if !self.shared.go_on("DeleteMessageBatch", &deleted) {
                    return;
                }
            }
            let pause = if received_any { 5 } else { 20 };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }
}
