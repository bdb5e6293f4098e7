//! Writers that keep writing until the server under them dies: what a
//! `kill -9` test holds the restarted server to.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// Bodies per write, a batch's most.
const BATCH: usize = 10;

/// Tasks writing batches of bodies until a write fails.
#[derive(Debug)]
pub struct Writers {
    acknowledged: Arc<Mutex<BTreeSet<String>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Writers {
    /// `count` tasks, each writing batches of ten unique bodies
    /// (`w<writer>-r<round>-m<index>`) with `write` until it fails (`None`:
    /// the server is gone). `write` answers the indexes of the bodies the
    /// server stored; only those count as acknowledged.
    pub fn start<W, F>(count: usize, write: W) -> Self
    where
        W: Fn(Vec<String>) -> F + Clone + Send + 'static,
        F: Future<Output = Option<BTreeSet<usize>>> + Send,
    {
        let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
        let tasks = (0..count)
            .map(|writer| {
                let (write, acknowledged) = (write.clone(), Arc::clone(&acknowledged));
                tokio::spawn(async move {
                    for round in 0.. {
                        let bodies: Vec<String> = (0..BATCH)
                            .map(|index| format!("w{writer}-r{round}-m{index}"))
                            .collect();
                        let Some(stored) = write(bodies.clone()).await else {
                            return;
                        };
                        let mut acknowledged =
                            acknowledged.lock().unwrap_or_else(PoisonError::into_inner);
                        for (index, body) in bodies.into_iter().enumerate() {
                            if stored.contains(&index) {
                                acknowledged.insert(body);
                            }
                        }
                    }
                })
            })
            .collect();
        Self {
            acknowledged,
            tasks,
        }
    }

    /// Waits until `at_least` bodies are acknowledged, or `within` passed.
    pub async fn wait_for(&self, at_least: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.count() < at_least && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn count(&self) -> usize {
        self.acknowledged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Once the server is gone: waits for every writer to notice, and
    /// answers what was acknowledged.
    ///
    /// # Panics
    /// When a writer runs on a minute after the crash, or fewer than 100
    /// bodies were acknowledged before it (the test would prove nothing).
    pub async fn stopped(self) -> BTreeSet<String> {
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("writers notice the crash")
                .expect("a writer panicked");
        }
        let acknowledged = std::mem::take(
            &mut *self
                .acknowledged
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        assert!(
            acknowledged.len() >= 100,
            "the writers made progress before the crash ({})",
            acknowledged.len()
        );
        acknowledged
    }
}

/// One `SendMessageBatch` of `bodies` to `url`, for [`Writers::start`].
pub async fn send_batch(
    client: &aws_sdk_sqs::Client,
    url: &str,
    bodies: Vec<String>,
) -> Option<BTreeSet<usize>> {
    let entries = bodies
        .into_iter()
        .enumerate()
        .map(|(index, body)| {
            aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id(index.to_string())
                .message_body(body)
                .build()
                .expect("an entry with an id and a body")
        })
        .collect();
    let output = client
        .send_message_batch()
        .queue_url(url)
        .set_entries(Some(entries))
        .send()
        .await
        .ok()?;
    Some(
        output
            .successful()
            .iter()
            .filter_map(|entry| entry.id().parse().ok())
            .collect(),
    )
}

/// One `PublishBatch` of `bodies` to `topic`, for [`Writers::start`].
pub async fn publish_batch(
    client: &aws_sdk_sns::Client,
    topic: &str,
    bodies: Vec<String>,
) -> Option<BTreeSet<usize>> {
    let entries = bodies
        .into_iter()
        .enumerate()
        .map(|(index, body)| {
            aws_sdk_sns::types::PublishBatchRequestEntry::builder()
                .id(index.to_string())
                .message(body)
                .build()
                .expect("an entry with an id and a message")
        })
        .collect();
    let output = client
        .publish_batch()
        .topic_arn(topic)
        .set_publish_batch_request_entries(Some(entries))
        .send()
        .await
        .ok()?;
    Some(
        output
            .successful()
            .iter()
            .filter_map(|entry| entry.id()?.parse().ok())
            .collect(),
    )
}
