//! What the workload did that a restarted server must answer for, and the
//! check that holds it to that after each power cut.
//!
//! Each message carries its own id and a body made from it, so a message
//! found after a cut names the send it came from and shows whether it came
//! back whole. After a cut:
//!
//! - a queue whose creation was acknowledged still exists;
//! - every acknowledged send is there, with its body, unless a delete was
//!   issued for it (deletes are answered before their fsync: a cut may undo
//!   them, which delivers the message again, never loses it);
//! - everything found after an earlier cut is still there (it was on the
//!   disk the restarted server recovered from), unless deleted;
//! - nothing is there that was never sent, nor any send twice;
//! - each FIFO group is in send order, and the deduplication window kept
//!   what it had acknowledged: sent again, an acknowledged FIFO message is
//!   answered with its first send's id and not enqueued again.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::sqs::{call, sqs};
use super::workload::send_entry;

/// Peeks read at most this many messages, oldest first: a queue must stay
/// below it to be checked whole.
pub(crate) const PEEK_LIMIT: usize = 100;

/// How far a send got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Sent, never answered 200: it may or may not be there.
    Unanswered,
    /// Answered 200: durable, in the default `--durability fsync` mode.
    Acknowledged,
    /// Found after a cut: on the disk the server recovered from, so it
    /// stays (acknowledged or not).
    Recovered,
}

#[derive(Debug, Clone)]
struct Sent {
    queue: String,
    body_len: usize,
    fate: Fate,
    /// A FIFO message's group and its index in the group.
    group: Option<(String, u64)>,
    /// The id the server answered, once acknowledged.
    message_id: Option<String>,
}

#[derive(Debug, Clone, Copy, Default)]
struct QueueRecord {
    /// Its creation was acknowledged.
    created: bool,
}

/// Every queue and message of a lineage (a run of cuts on one disk).
#[derive(Debug, Default, Clone)]
pub(crate) struct Ledger {
    queues: BTreeMap<String, QueueRecord>,
    messages: BTreeMap<String, Sent>,
    /// Messages a delete was issued for, answered or not.
    deleted: BTreeSet<String>,
}

/// What one check found.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// Acknowledged (or recovered) messages found where they must be.
    pub(crate) confirmed: usize,
    /// Acknowledged (or recovered) messages that were not there.
    pub(crate) lost: usize,
    /// Acknowledged FIFO sends sent again, to try the deduplication window.
    pub(crate) sent_again: usize,
    pub(crate) failures: Vec<String>,
}

/// The body of message `id`, `len` bytes after the id: made from the id, so
/// a torn or mixed-up body does not match.
pub(crate) fn body(id: &str, len: usize) -> String {
    let start = id.bytes().fold(7u32, |hash, byte| {
        hash.wrapping_mul(31).wrapping_add(u32::from(byte))
    });
    let filler: String = (0..len)
        .map(|index| char::from(b'a' + ((start as usize + index * 7) % 26) as u8))
        .collect();
    format!("{id}|{filler}")
}

impl Ledger {
    pub(crate) fn queue_attempted(&mut self, name: &str) {
        self.queues.entry(name.to_owned()).or_default();
    }

    pub(crate) fn queue_created(&mut self, name: &str) {
        self.queues.entry(name.to_owned()).or_default().created = true;
    }

    pub(crate) fn sending(
        &mut self,
        id: &str,
        queue: &str,
        body_len: usize,
        group: Option<(String, u64)>,
    ) {
        self.messages.insert(
            id.to_owned(),
            Sent {
                queue: queue.to_owned(),
                body_len,
                fate: Fate::Unanswered,
                group,
                message_id: None,
            },
        );
    }

    pub(crate) fn acknowledged(&mut self, id: &str, message_id: String) {
        if let Some(sent) = self.messages.get_mut(id)
            && sent.fate == Fate::Unanswered
        {
            sent.fate = Fate::Acknowledged;
            sent.message_id = Some(message_id);
        }
    }

    pub(crate) fn deleting(&mut self, id: &str) {
        self.deleted.insert(id.to_owned());
    }

    /// Acknowledged sends so far.
    pub(crate) fn acknowledged_sends(&self) -> usize {
        self.messages
            .values()
            .filter(|sent| sent.message_id.is_some())
            .count()
    }

    pub(crate) fn deletes(&self) -> usize {
        self.deleted.len()
    }

    /// Checks the server at `endpoint` against the ledger, and records what
    /// it found as recovered.
    pub(crate) async fn check(&mut self, endpoint: &str) -> Verdict {
        let mut verdict = Verdict::default();
        let queues: Vec<(String, QueueRecord)> = self
            .queues
            .iter()
            .map(|(name, record)| (name.clone(), *record))
            .collect();
        for (name, record) in queues {
            self.check_queue(endpoint, &name, record, &mut verdict)
                .await;
        }
        verdict
    }

    async fn check_queue(
        &mut self,
        endpoint: &str,
        name: &str,
        record: QueueRecord,
        verdict: &mut Verdict,
    ) {
        let must_hold: Vec<String> = self
            .messages
            .iter()
            .filter(|(id, sent)| {
                sent.queue == name && sent.fate != Fate::Unanswered && !self.deleted.contains(*id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        let located = sqs(endpoint, "GetQueueUrl", &json!({"QueueName": name})).await;
        let Some(url) = located.ok().and_then(|found| found["QueueUrl"].as_str()) else {
            if located.is_error("QueueDoesNotExist") {
                if record.created || !must_hold.is_empty() {
                    verdict.lost += must_hold.len();
                    verdict.failures.push(format!(
                        "queue {name} is gone (its creation was acknowledged: {}), and with \
                         it {} acknowledged sends",
                        record.created,
                        must_hold.len()
                    ));
                }
                // Never acknowledged: the cut may take it, and it is not used again.
                self.queues.remove(name);
            } else {
                verdict
                    .failures
                    .push(format!("GetQueueUrl {name}: {located}"));
            }
            return;
        };
        let peeked = call(
            endpoint,
            "AckBox.PeekMessages",
            &json!({"QueueUrl": url, "MaxNumberOfMessages": PEEK_LIMIT}),
        )
        .await;
        let Some(messages) = peeked
            .ok()
            .map(|body| body["Messages"].as_array().cloned().unwrap_or_default())
        else {
            verdict
                .failures
                .push(format!("PeekMessages {name}: {peeked}"));
            return;
        };
        if messages.len() >= PEEK_LIMIT {
            verdict.failures.push(format!(
                "queue {name} holds {PEEK_LIMIT} or more messages: the workload must stay \
                 below what a peek can check"
            ));
            return;
        }
        let mut present = BTreeSet::new();
        let mut last_in_group: BTreeMap<String, u64> = BTreeMap::new();
        for message in &messages {
            let found = message["Body"].as_str().unwrap_or_default();
            let id = found.split('|').next().unwrap_or_default();
            let Some(sent) = self.messages.get(id).filter(|sent| sent.queue == name) else {
                verdict.failures.push(format!(
                    "queue {name} holds a message never sent to it: {}",
                    abbreviate(found)
                ));
                continue;
            };
            if found != body(id, sent.body_len) {
                verdict.failures.push(format!(
                    "message {id} in {name} came back damaged: {}",
                    abbreviate(found)
                ));
            }
            if !present.insert(id.to_owned()) {
                verdict
                    .failures
                    .push(format!("message {id} is in {name} twice"));
            }
            if let Some((group, index)) = &sent.group
                && let Some(previous) = last_in_group.insert(group.clone(), *index)
                && previous > *index
            {
                verdict.failures.push(format!(
                    "FIFO queue {name}, group {group}: message {index} comes after {previous}"
                ));
            }
        }
        for id in &must_hold {
            if present.contains(id) {
                verdict.confirmed += 1;
            } else {
                verdict.lost += 1;
                let what = if self.messages[id].message_id.is_some() {
                    "acknowledged send"
                } else {
                    "message found after an earlier cut,"
                };
                verdict
                    .failures
                    .push(format!("{what} {id} lost from {name}"));
            }
        }
        for id in &present {
            if let Some(sent) = self.messages.get_mut(id) {
                sent.fate = Fate::Recovered;
            }
        }
        let found: Vec<String> = must_hold
            .into_iter()
            .filter(|id| present.contains(id))
            .collect();
        self.send_again(endpoint, name, url, &found, verdict).await;
    }

    /// Sends the latest acknowledged message of each FIFO group of queue
    /// `name` (of those `found`) again: the deduplication window must
    /// answer with the first send's id.
    async fn send_again(
        &self,
        endpoint: &str,
        name: &str,
        url: &str,
        found: &[String],
        verdict: &mut Verdict,
    ) {
        let mut latest: BTreeMap<&str, (u64, &String)> = BTreeMap::new();
        for id in found {
            let sent = &self.messages[id];
            if let (Some((group, index)), Some(_)) = (&sent.group, &sent.message_id)
                && latest
                    .get(group.as_str())
                    .is_none_or(|(newest, _)| newest < index)
            {
                latest.insert(group, (*index, id));
            }
        }
        for (_, id) in latest.into_values() {
            let sent = &self.messages[id];
            let (Some(group), Some(first_id)) = (&sent.group, &sent.message_id) else {
                continue;
            };
            let mut request = send_entry(id, sent.body_len, Some(group));
            request["QueueUrl"] = json!(url);
            let answer = sqs(endpoint, "SendMessage", &request).await;
            verdict.sent_again += 1;
            let answered_id = answer.ok().and_then(|body| body["MessageId"].as_str());
            if answered_id != Some(first_id.as_str()) {
                verdict.failures.push(format!(
                    "FIFO message {id} sent again to {name}: {answer} (first sent as {first_id}): \
                     the deduplication window lost it"
                ));
            }
        }
    }
}

fn abbreviate(text: &str) -> String {
    if text.len() <= 80 {
        text.to_owned()
    } else {
        let start: String = text.chars().take(80).collect();
        format!("{start}… ({} bytes)", text.len())
    }
}
