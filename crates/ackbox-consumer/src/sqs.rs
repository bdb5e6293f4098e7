//! The SQS API as a transport, through the official `aws-sdk-sqs`: works
//! against ackbox and against AWS. A message a topic delivered in SNS's
//! envelope reaches the handler unwrapped, its publish's `MessageId` as its
//! event id ([`Message::unwrap_sns_envelope`]).
//!
//! Against ackbox ([`SqsTransport::with_ackbox_extensions`]), failures are
//! reported with `AckBox.NackMessage` (through the SDK client, so signed like
//! every other call): the reason travels with the message,
//! and a permanent failure moves it to the dead-letter queue atomically.
//! Against AWS, a retry is a `ChangeMessageVisibility`, and a permanent
//! failure is a send of a copy to the dead-letter queue followed by a delete
//! of the original — two calls, so a crash between them leaves the copy in
//! the dead-letter queue *and* the original in the queue, to be delivered
//! again (the inbox then skips it if it was applied; otherwise it fails again
//! and is copied again). Nothing is lost; a dead-letter queue may hold a
//! message twice.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::error::{Failure, TransportError};
use crate::message::{Delivery, Message};
use crate::outbox::{EVENT_ID_ATTRIBUTE, PendingEvent, Publisher};
use crate::transport::{QueueSettings, Transport};

/// Message attributes a dead-letter copy carries on AWS.
const FAILURE_CLASS_ATTRIBUTE: &str = "ackbox.failure.class";
const FAILURE_MESSAGE_ATTRIBUTE: &str = "ackbox.failure.message";

/// A queue reached through the SQS API.
#[derive(Debug, Clone)]
pub struct SqsTransport {
    client: Client,
    queue_url: String,
    /// Failures go through `AckBox.NackMessage` (ackbox) instead of plain
    /// SQS calls (AWS).
    ackbox_extensions: bool,
    /// The dead-letter queue's URL, from the queue's redrive policy.
    dead_letter_url: OnceCell<Option<String>>,
}

impl SqsTransport {
    /// A transport on `queue_url` with only standard SQS calls (AWS).
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            ackbox_extensions: false,
            dead_letter_url: OnceCell::new(),
        }
    }

    /// Uses ackbox's `AckBox.NackMessage` for retries and dead-lettering.
    pub fn with_ackbox_extensions(mut self) -> Self {
        self.ackbox_extensions = true;
        self
    }

    /// `AckBox.NackMessage`, which no AWS SDK knows. It travels as a
    /// ChangeMessageVisibility whose target and body are replaced before
    /// signing, so it goes through the client's own endpoint, credentials
    /// (SigV4), TLS settings and retries.
    async fn nack(&self, delivery: &Delivery, request: Value) -> Result<(), TransportError> {
        let mut request = request;
        request["QueueUrl"] = json!(self.queue_url);
        request["ReceiptHandle"] = json!(delivery.token);
        let payload = request.to_string();
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(&delivery.token)
            .visibility_timeout(0)
            .customize()
            .mutate_request(move |http| {
                http.headers_mut()
                    .insert("x-amz-target", "AckBox.NackMessage");
                http.headers_mut()
                    .insert("content-length", payload.len().to_string());
                *http.body_mut() = aws_smithy_types::body::SdkBody::from(payload.clone());
            })
            .send()
            .await
            .map(drop)
            .map_err(|error| TransportError::new("AckBox.NackMessage", describe(&error)))
    }

    async fn queue_attributes(
        &self,
        url: &str,
    ) -> Result<HashMap<QueueAttributeName, String>, TransportError> {
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .map_err(|error| TransportError::new("GetQueueAttributes", describe(&error)))?;
        Ok(output.attributes.unwrap_or_default())
    }

    async fn dead_letter_url(&self) -> Result<Option<String>, TransportError> {
        self.dead_letter_url
            .get_or_try_init(|| async {
                let attributes = self.queue_attributes(&self.queue_url).await?;
                let Some(policy) = attributes.get(&QueueAttributeName::RedrivePolicy) else {
                    return Ok(None);
                };
                let policy: Value = serde_json::from_str(policy)
                    .map_err(|error| TransportError::new("RedrivePolicy", error))?;
                let name = policy["deadLetterTargetArn"]
                    .as_str()
                    .and_then(|arn| arn.rsplit(':').next())
                    .ok_or_else(|| {
                        TransportError::new("RedrivePolicy", "no deadLetterTargetArn")
                    })?;
                let url = self
                    .client
                    .get_queue_url()
                    .queue_name(name)
                    .send()
                    .await
                    .map_err(|error| TransportError::new("GetQueueUrl", describe(&error)))?
                    .queue_url;
                Ok(url)
            })
            .await
            .cloned()
    }
}

fn describe<E: std::error::Error>(error: &E) -> String {
    use std::fmt::Write;
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

#[async_trait]
impl Transport for SqsTransport {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, TransportError> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(i32::try_from(max.clamp(1, 10)).unwrap_or(10))
            .wait_time_seconds(seconds(wait).min(20))
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|error| TransportError::new("ReceiveMessage", describe(&error)))?;
        Ok(output
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|message| {
                let system = message.attributes.unwrap_or_default();
                let attributes: BTreeMap<String, String> = message
                    .message_attributes
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|(name, value)| value.string_value.map(|text| (name, text)))
                    .collect();
                Delivery {
                    message: Message {
                        id: message.message_id.unwrap_or_default(),
                        body: message.body.unwrap_or_default(),
                        attributes,
                        receive_count: system
                            .get(&MessageSystemAttributeName::ApproximateReceiveCount)
                            .and_then(|count| count.parse().ok())
                            .unwrap_or(1),
                        group_id: system
                            .get(&MessageSystemAttributeName::MessageGroupId)
                            .cloned(),
                    }
                    .unwrap_sns_envelope(),
                    token: message.receipt_handle.unwrap_or_default(),
                }
            })
            .collect())
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), TransportError> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(&delivery.token)
            .send()
            .await
            .map(drop)
            .map_err(|error| TransportError::new("DeleteMessage", describe(&error)))
    }

    async fn ack_batch(&self, deliveries: &[Delivery]) -> Vec<Result<(), TransportError>> {
        if deliveries.len() < 2 {
            let mut results = Vec::with_capacity(deliveries.len());
            for delivery in deliveries {
                results.push(self.ack(delivery).await);
            }
            return results;
        }
        let mut request = self
            .client
            .delete_message_batch()
            .queue_url(&self.queue_url);
        for (index, delivery) in deliveries.iter().enumerate() {
            match DeleteMessageBatchRequestEntry::builder()
                .id(index.to_string())
                .receipt_handle(&delivery.token)
                .build()
            {
                Ok(entry) => request = request.entries(entry),
                Err(error) => {
                    return deliveries
                        .iter()
                        .map(|_| Err(TransportError::new("DeleteMessageBatch", &error)))
                        .collect();
                }
            }
        }
        match request.send().await {
            Ok(output) => {
                let mut results: Vec<Result<(), TransportError>> =
                    deliveries.iter().map(|_| Ok(())).collect();
                for failed in output.failed() {
                    if let Some(slot) = failed
                        .id()
                        .parse::<usize>()
                        .ok()
                        .and_then(|index| results.get_mut(index))
                    {
                        *slot = Err(TransportError::new(
                            "DeleteMessageBatch",
                            format!(
                                "{}: {}",
                                failed.code(),
                                failed.message().unwrap_or_default()
                            ),
                        ));
                    }
                }
                results
            }
            Err(error) => {
                let detail = describe(&error);
                deliveries
                    .iter()
                    .map(|_| Err(TransportError::new("DeleteMessageBatch", &detail)))
                    .collect()
            }
        }
    }

    async fn extend(&self, delivery: &Delivery, lease: Duration) -> Result<(), TransportError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(&delivery.token)
            .visibility_timeout(seconds(lease))
            .send()
            .await
            .map(drop)
            .map_err(|error| TransportError::new("ChangeMessageVisibility", describe(&error)))
    }

    async fn retry(
        &self,
        delivery: &Delivery,
        delay: Duration,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        if self.ackbox_extensions {
            self.nack(
                delivery,
                json!({
                    "DelaySeconds": seconds(delay),
                    "Reason": { "Class": failure.class, "Message": failure.message },
                }),
            )
            .await
        } else {
            self.extend(delivery, delay).await
        }
    }

    async fn dead_letter(
        &self,
        delivery: &Delivery,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        if self.ackbox_extensions {
            return self
                .nack(
                    delivery,
                    json!({
                        "Permanent": true,
                        "Reason": { "Class": failure.class, "Message": failure.message },
                    }),
                )
                .await;
        }
        let Some(dead_letter_url) = self.dead_letter_url().await? else {
            return Err(TransportError::new(
                "dead-letter",
                "the queue has no RedrivePolicy, so there is no dead-letter queue to move the message to",
            ));
        };
        let message = &delivery.message;
        let mut copy = self
            .client
            .send_message()
            .queue_url(dead_letter_url)
            .message_body(&message.body);
        let mut attributes: Vec<(String, String)> = message
            .attributes
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        attributes.push((FAILURE_CLASS_ATTRIBUTE.into(), failure.class.clone()));
        attributes.push((FAILURE_MESSAGE_ATTRIBUTE.into(), failure.message.clone()));
        for (name, value) in attributes
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .take(10)
        {
            let value = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|error| TransportError::new("dead-letter copy", error))?;
            copy = copy.message_attributes(name, value);
        }
        if let Some(group_id) = &message.group_id {
            copy = copy
                .message_group_id(group_id)
                .message_deduplication_id(&message.id);
        }
        copy.send().await.map_err(|error| {
            TransportError::new("SendMessage (dead-letter copy)", describe(&error))
        })?;
        self.ack(delivery).await
    }

    async fn release(&self, delivery: &Delivery) -> Result<(), TransportError> {
        self.extend(delivery, Duration::ZERO).await
    }

    async fn settings(&self) -> Result<QueueSettings, TransportError> {
        let attributes = self.queue_attributes(&self.queue_url).await?;
        let number = |name: QueueAttributeName, default: u64| {
            attributes
                .get(&name)
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(default)
        };
        let lease = number(QueueAttributeName::VisibilityTimeout, 30);
        let retention = number(QueueAttributeName::MessageRetentionPeriod, 345_600);
        let policy: Option<Value> = attributes
            .get(&QueueAttributeName::RedrivePolicy)
            .and_then(|policy| serde_json::from_str(policy).ok());
        let max_deliveries = policy
            .as_ref()
            .and_then(|policy| {
                policy["maxReceiveCount"]
                    .as_u64()
                    .or_else(|| policy["maxReceiveCount"].as_str()?.parse().ok())
            })
            .and_then(|count| u32::try_from(count).ok());
        let dead_letter_url = self.dead_letter_url().await?;
        let dead_letter_queue = dead_letter_url.is_some();
        let (horizon, explanation) = match (max_deliveries, dead_letter_url) {
            (Some(max), Some(dead_letter_url)) => {
                let dead_letter = self.queue_attributes(&dead_letter_url).await?;
                let dead_letter_retention = dead_letter
                    .get(&QueueAttributeName::MessageRetentionPeriod)
                    .and_then(|value| value.parse::<u64>().ok())
                    .unwrap_or(345_600);
                (
                    u64::from(max) * lease + retention + dead_letter_retention,
                    format!(
                        "maxReceiveCount {max} × VisibilityTimeout {lease} s + MessageRetentionPeriod \
                         {retention} s + the dead-letter queue's retention {dead_letter_retention} s, \
                         since a redrive can bring a message back"
                    ),
                )
            }
            _ => (
                retention,
                format!("MessageRetentionPeriod {retention} s (no dead-letter queue)"),
            ),
        };
        Ok(QueueSettings {
            queue_name: self
                .queue_url
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned(),
            lease: Duration::from_secs(lease),
            max_deliveries,
            redelivery_horizon: Duration::from_secs(horizon),
            horizon_explanation: explanation,
            dead_letter_queue,
            // A FIFO queue hands out nothing more of a group while one of its
            // messages is leased, so one consumer holds a group at a time.
            ordered_groups: attributes
                .get(&QueueAttributeName::FifoQueue)
                .is_some_and(|fifo| fifo == "true"),
        })
    }

    fn carries_groups(&self) -> bool {
        true
    }
}

/// Publishes outbox events with `SendMessageBatch`, ten at a time per queue.
/// Every message carries its event id as the `ackbox.event_id` attribute; on
/// a FIFO queue (URL ending `.fifo`) the event id is also the
/// `MessageDeduplicationId`, and the group defaults to the event id.
#[derive(Debug, Clone)]
pub struct SqsPublisher {
    client: Client,
}

impl SqsPublisher {
    /// A publisher using `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    fn entry(index: usize, pending: &PendingEvent) -> Result<SendMessageBatchRequestEntry, String> {
        let event = &pending.event;
        let mut entry = SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(&event.body);
        let attributes = event
            .attributes
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .chain([(EVENT_ID_ATTRIBUTE, pending.event_id.as_str())]);
        for (name, value) in attributes {
            let value = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|error| error.to_string())?;
            entry = entry.message_attributes(name, value);
        }
        if event.destination.ends_with(".fifo") {
            entry = entry
                .message_group_id(event.group_id.as_deref().unwrap_or(&pending.event_id))
                .message_deduplication_id(&pending.event_id);
        } else if let Some(group_id) = &event.group_id {
            entry = entry.message_group_id(group_id);
        }
        entry.build().map_err(|error| error.to_string())
    }
}

#[async_trait]
impl Publisher for SqsPublisher {
    async fn publish(&self, events: &[PendingEvent]) -> Vec<Result<(), String>> {
        let mut results: Vec<Result<(), String>> = events.iter().map(|_| Ok(())).collect();
        let mut by_destination: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (index, pending) in events.iter().enumerate() {
            by_destination
                .entry(pending.event.destination.as_str())
                .or_default()
                .push(index);
        }
        for (destination, indices) in by_destination {
            for chunk in indices.chunks(10) {
                let mut request = self.client.send_message_batch().queue_url(destination);
                for &index in chunk {
                    match Self::entry(index, &events[index]) {
                        Ok(entry) => request = request.entries(entry),
                        Err(error) => results[index] = Err(error),
                    }
                }
                let sent: Vec<usize> = chunk
                    .iter()
                    .copied()
                    .filter(|&index| results[index].is_ok())
                    .collect();
                if sent.is_empty() {
                    continue;
                }
                match request.send().await {
                    Ok(output) => {
                        for failed in output.failed() {
                            if let Some(index) = failed
                                .id()
                                .parse::<usize>()
                                .ok()
                                .filter(|index| sent.contains(index))
                            {
                                results[index] = Err(format!(
                                    "{}: {}",
                                    failed.code(),
                                    failed.message().unwrap_or_default()
                                ));
                            }
                        }
                    }
                    Err(error) => {
                        let detail = describe(&error);
                        for index in sent {
                            results[index] = Err(detail.clone());
                        }
                    }
                }
            }
        }
        results
    }
}
