//! End-to-end tests with the official `aws-sdk-sqs` client against a real
//! broker on 127.0.0.1: every supported action, and the SQS errors a client
//! branches on (invariants 2, 3 and 6, ARCHITECTURE.md).
//!
//! One test binary (linking the AWS SDK once), its cases in files by
//! resource; the helpers they share are here.

mod dead_letters;
mod fair_queues;
mod leases;
mod long_poll;
mod messages;
mod parity;
mod push;
mod queue_archive;
mod queues;
mod replay;
mod topics;

use std::time::{Duration, Instant};

use ackbox_core::clock::ManualClock;
use ackbox_core::digest::{md5_of_attributes, md5_of_body};
use ackbox_core::message::{MessageAttributeValue as CoreAttribute, MessageAttributes};
use ackbox_testkit::client::{
    create_queue as create, error_code as code, queue_arn, queue_depth, receive_bodies,
};
use ackbox_testkit::server::TestServer;
use aws_sdk_sqs::error::SdkError;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};

const START: i64 = 1_700_000_000_000;

async fn manual_server() -> (TestServer, ManualClock) {
    let clock = ManualClock::new(START);
    let server = TestServer::builder().clock(clock.clone()).start().await;
    (server, clock)
}

/// A standard queue whose leases last `seconds`.
async fn create_with_lease(client: &aws_sdk_sqs::Client, name: &str, seconds: u32) -> String {
    client
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::VisibilityTimeout, seconds.to_string())
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

fn string_attribute(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .unwrap()
}
