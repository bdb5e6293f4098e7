//! Producers and consumers through the SQS API while the database fails
//! under them, and the ledger of what each was told.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message_batch::{SendMessageBatchError, SendMessageBatchOutput};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};
use tokio::task::JoinSet;

/// What the clients were told.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Bodies whose send was acknowledged.
    pub(crate) acknowledged: HashSet<String>,
    /// When each body was received, every time it was.
    pub(crate) received: HashMap<String, Vec<Instant>>,
    /// Failed calls by error code (`timeout` for a call that did not end).
    pub(crate) errors: BTreeMap<String, usize>,
}

impl Ledger {
    fn error<E: ProvideErrorMetadata, R>(&mut self, call: &str, error: &SdkError<E, R>) {
        let code = match error {
            SdkError::ServiceError(context) => context.err().code().unwrap_or("<none>").to_owned(),
            SdkError::TimeoutError(_) => "timeout".to_owned(),
            SdkError::DispatchFailure(_) => "dispatch failure".to_owned(),
            SdkError::ResponseError(_) => "unreadable response".to_owned(),
            _ => "other".to_owned(),
        };
        *self.errors.entry(format!("{call}: {code}")).or_default() += 1;
    }

    /// Acknowledged bodies never received.
    pub(crate) fn missing(&self) -> Vec<&String> {
        self.acknowledged
            .iter()
            .filter(|body| !self.received.contains_key(*body))
            .collect()
    }

    /// Failed calls that blamed anything but the service's availability:
    /// a database failure reported as the broker's own error (500) reads
    /// as a bug and sets off the wrong alarm.
    pub(crate) fn not_unavailable(&self) -> Vec<(&String, &usize)> {
        self.errors
            .iter()
            .filter(|(call, _)| !call.ends_with(": ServiceUnavailable"))
            .collect()
    }
}

/// Producers sending batches of unique bodies until acknowledged, and
/// consumers receiving and deleting them, spread over the clients.
pub(crate) struct Load {
    ledger: Arc<Mutex<Ledger>>,
    sending: Arc<AtomicBool>,
    receiving: Arc<AtomicBool>,
    producers: JoinSet<()>,
    consumers: JoinSet<()>,
}

impl Load {
    pub(crate) fn start(clients: &[Client], url: &str, producers: usize, consumers: usize) -> Self {
        let mut load = Self {
            ledger: Arc::default(),
            sending: Arc::new(AtomicBool::new(true)),
            receiving: Arc::new(AtomicBool::new(true)),
            producers: JoinSet::new(),
            consumers: JoinSet::new(),
        };
        for producer in 0..producers {
            let clients = clients.to_vec();
            let (url, ledger, sending) =
                (url.to_owned(), load.ledger.clone(), load.sending.clone());
            load.producers.spawn(async move {
                let mut batch = 0usize;
                while sending.load(Ordering::Relaxed) {
                    let bodies: Vec<String> = (0..10)
                        .map(|entry| format!("p{producer}-b{batch}-e{entry}"))
                        .collect();
                    send_until_acknowledged(&clients, producer + batch, &url, bodies, &ledger)
                        .await;
                    batch += 1;
                }
            });
        }
        for consumer in 0..consumers {
            let client = clients[consumer % clients.len()].clone();
            let (url, ledger, receiving) =
                (url.to_owned(), load.ledger.clone(), load.receiving.clone());
            load.consumers.spawn(async move {
                while receiving.load(Ordering::Relaxed) {
                    consume_once(&client, &url, &ledger).await;
                }
            });
        }
        load
    }

    /// A snapshot of the ledger.
    pub(crate) fn with_ledger<T>(&self, read: impl FnOnce(&Ledger) -> T) -> T {
        read(&self.ledger.lock().unwrap())
    }

    /// Stops sending and waits for every send in flight to be acknowledged.
    pub(crate) async fn stop_sending(&mut self) {
        self.sending.store(false, Ordering::Relaxed);
        while let Some(done) = self.producers.join_next().await {
            done.expect("a producer finishes");
        }
    }

    /// Receives until every acknowledged body has been received or
    /// `within` has passed, then stops the consumers; the ledger.
    pub(crate) async fn drain(mut self, within: Duration) -> Ledger {
        self.stop_sending().await;
        let deadline = Instant::now() + within;
        while Instant::now() < deadline && !self.with_ledger(|ledger| ledger.missing().is_empty()) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.receiving.store(false, Ordering::Relaxed);
        while let Some(done) = self.consumers.join_next().await {
            done.expect("a consumer finishes");
        }
        Arc::try_unwrap(self.ledger)
            .expect("the tasks are done")
            .into_inner()
            .unwrap()
    }
}

/// Sends `bodies` in one batch until each is acknowledged, moving to the
/// next client after a failure; a retried body may be stored twice.
async fn send_until_acknowledged(
    clients: &[Client],
    mut turn: usize,
    url: &str,
    mut bodies: Vec<String>,
    ledger: &Mutex<Ledger>,
) {
    while !bodies.is_empty() {
        let entries = bodies
            .iter()
            .enumerate()
            .map(|(index, body)| {
                SendMessageBatchRequestEntry::builder()
                    .id(index.to_string())
                    .message_body(body)
                    .build()
                    .unwrap()
            })
            .collect();
        let sent = clients[turn % clients.len()]
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await;
        turn += 1;
        bodies = record_send(sent, bodies, &mut ledger.lock().unwrap());
        if !bodies.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Records what a send was told; the bodies still to send.
fn record_send<R>(
    sent: Result<SendMessageBatchOutput, SdkError<SendMessageBatchError, R>>,
    bodies: Vec<String>,
    ledger: &mut Ledger,
) -> Vec<String> {
    match sent {
        Ok(output) => {
            let failed: HashSet<usize> = output
                .failed()
                .iter()
                .map(|entry| {
                    *ledger
                        .errors
                        .entry(format!("SendMessageBatch entry: {}", entry.code()))
                        .or_default() += 1;
                    entry.id().parse().unwrap()
                })
                .collect();
            let (retry, done): (Vec<_>, Vec<_>) = bodies
                .into_iter()
                .enumerate()
                .partition(|(index, _)| failed.contains(index));
            ledger
                .acknowledged
                .extend(done.into_iter().map(|(_, body)| body));
            retry.into_iter().map(|(_, body)| body).collect()
        }
        Err(error) => {
            ledger.error("SendMessageBatch", &error);
            bodies
        }
    }
}

/// One receive, and a delete of what it got.
async fn consume_once(client: &Client, url: &str, ledger: &Mutex<Ledger>) {
    let received = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await;
    let messages = match received {
        Ok(output) => output.messages.unwrap_or_default(),
        Err(error) => {
            ledger.lock().unwrap().error("ReceiveMessage", &error);
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
    };
    if messages.is_empty() {
        return;
    }
    {
        let now = Instant::now();
        let mut ledger = ledger.lock().unwrap();
        for message in &messages {
            ledger
                .received
                .entry(message.body().unwrap_or_default().to_owned())
                .or_default()
                .push(now);
        }
    }
    let entries = messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(index.to_string())
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .build()
                .unwrap()
        })
        .collect();
    // A delete that fails leaves the message to come back: received again,
    // never lost.
    let deleted = client
        .delete_message_batch()
        .queue_url(url)
        .set_entries(Some(entries))
        .send()
        .await;
    let mut ledger = ledger.lock().unwrap();
    match deleted {
        Ok(output) => {
            for entry in output.failed() {
                *ledger
                    .errors
                    .entry(format!("DeleteMessageBatch entry: {}", entry.code()))
                    .or_default() += 1;
            }
        }
        Err(error) => ledger.error("DeleteMessageBatch", &error),
    }
}
