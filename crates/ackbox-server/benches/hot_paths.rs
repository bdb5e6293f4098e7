//! Micro-benchmarks of the per-message hot paths outside the store, so a
//! regression in one shows by itself: decoding a SendMessageBatch (JSON 1.0
//! and query), encoding a ReceiveMessage answer, the attributes' MD5, and
//! sealing and opening receipt handles.
//!
//! `cargo bench -p ackbox-server --bench hot_paths`

use std::collections::BTreeMap;
use std::hint::black_box;

use ackbox_core::digest::{md5_of_attributes, md5_of_body};
use ackbox_core::message::{MessageAttributeValue, MessageAttributes};
use ackbox_core::receipt::{ReceiptClaims, ReceiptKey};
use ackbox_server::action::{Action, receive_message, send_message_batch};
use ackbox_server::protocol::json;
use ackbox_server::protocol::query::Form;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const BODY_SIZE: usize = 256;

fn attributes() -> MessageAttributes {
    [
        ("tenant", MessageAttributeValue::string("acme")),
        ("kind", MessageAttributeValue::string("payment.captured")),
        (
            "amount",
            MessageAttributeValue {
                data_type: "Number".to_owned(),
                string_value: Some("1250".to_owned()),
                binary_value: None,
            },
        ),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

fn send_batch_json() -> Vec<u8> {
    let body = "x".repeat(BODY_SIZE);
    let entries: Vec<serde_json::Value> = (0..10)
        .map(|index| {
            serde_json::json!({
                "Id": index.to_string(),
                "MessageBody": body,
                "MessageAttributes": attributes(),
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "QueueUrl": "http://127.0.0.1:9324/000000000000/orders",
        "Entries": entries,
    }))
    .expect("the request encodes")
}

fn send_batch_form() -> String {
    let body = "x".repeat(BODY_SIZE);
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("Action", "SendMessageBatch")
        .append_pair("QueueUrl", "http://127.0.0.1:9324/000000000000/orders");
    for entry in 1..=10 {
        let prefix = format!("SendMessageBatchRequestEntry.{entry}");
        form.append_pair(&format!("{prefix}.Id"), &entry.to_string())
            .append_pair(&format!("{prefix}.MessageBody"), &body);
        for (index, (name, value)) in attributes().iter().enumerate() {
            let attribute = format!("{prefix}.MessageAttribute.{}", index + 1);
            form.append_pair(&format!("{attribute}.Name"), name)
                .append_pair(&format!("{attribute}.Value.DataType"), &value.data_type)
                .append_pair(
                    &format!("{attribute}.Value.StringValue"),
                    value.string_value.as_deref().unwrap_or_default(),
                );
        }
    }
    form.finish()
}

fn receive_answer(key: &ReceiptKey) -> receive_message::Response {
    let attributes = attributes();
    let md5_of_message_attributes = md5_of_attributes(&attributes);
    receive_message::Response {
        messages: (0..10)
            .map(|seq| receive_message::Message {
                message_id: format!("5fea7756-0ea4-451a-a703-a558b933e27{seq}"),
                receipt_handle: Some(key.seal(ReceiptClaims {
                    queue_id: 1,
                    seq,
                    lease: 1,
                    leased_at: Some(1_700_000_000_000),
                })),
                md5_of_body: "a8e6b3d62e4e9f1b0d5d1c2d8d6f1e0a".to_owned(),
                body: "x".repeat(BODY_SIZE),
                attributes: BTreeMap::from([(
                    "ApproximateReceiveCount".to_owned(),
                    "1".to_owned(),
                )]),
                md5_of_message_attributes: md5_of_message_attributes.clone(),
                message_attributes: attributes.clone(),
            })
            .collect(),
    }
}

fn protocol(c: &mut Criterion) {
    let mut group = c.benchmark_group("protocol");
    group.throughput(Throughput::Elements(10));
    let json_body = send_batch_json();
    group.bench_function("decode SendMessageBatch of 10 (JSON 1.0)", |b| {
        b.iter(|| {
            json::parse::<send_message_batch::Request>(black_box(&json_body))
                .expect("the request decodes")
        });
    });
    let form_body = send_batch_form();
    group.bench_function("decode SendMessageBatch of 10 (query)", |b| {
        b.iter(|| {
            Form::parse("", black_box(form_body.as_bytes()))
                .decode::<send_message_batch::Request>(Action::SendMessageBatch)
                .expect("the request decodes")
        });
    });
    let answer = receive_answer(&ReceiptKey::new([9; 32]));
    group.bench_function("encode ReceiveMessage of 10 (JSON 1.0)", |b| {
        b.iter(|| serde_json::to_vec(black_box(&answer)).expect("the answer encodes"));
    });
    group.bench_function("encode ReceiveMessage of 10 (query)", |b| {
        b.iter(|| {
            ackbox_server::protocol::query::respond(
                Action::ReceiveMessage,
                black_box(&answer),
                "request-id",
            )
        });
    });
    group.finish();
}

fn digests_and_handles(c: &mut Criterion) {
    let mut group = c.benchmark_group("per message");
    group.throughput(Throughput::Elements(1));
    let attributes = attributes();
    let body = "x".repeat(256);
    group.bench_function("MD5 of a 256-byte body", |b| {
        b.iter(|| md5_of_body(black_box(&body)));
    });
    group.bench_function("MD5 of 3 message attributes", |b| {
        b.iter(|| md5_of_attributes(black_box(&attributes)));
    });
    let key = ReceiptKey::new([9; 32]);
    let claims = ReceiptClaims {
        queue_id: 7,
        seq: 123_456_789,
        lease: 3,
        leased_at: Some(1_700_000_000_000),
    };
    group.bench_function("seal a receipt handle", |b| {
        b.iter(|| key.seal(black_box(claims)));
    });
    let handle = key.seal(claims);
    group.bench_function("open a receipt handle", |b| {
        b.iter(|| key.open(black_box(&handle)).expect("the handle opens"));
    });
    group.finish();
}

criterion_group!(benches, protocol, digests_and_handles);
criterion_main!(benches);
