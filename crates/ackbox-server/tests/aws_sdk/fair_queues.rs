//! Fair queues on standard queues, as the SQS Developer Guide describes
//! them ("How Amazon SQS fair queues work", 2025-07): `MessageGroupId` is a
//! tenant; one with at least 30 messages in flight and more than a tenth of
//! the queue's is noisy, and receives return quiet tenants' messages first,
//! noisy ones only when no quiet one is visible (the one with fewest in
//! flight first). A message without a group is a tenant of its own.

use ackbox_testkit::client::send_numbered;

use super::*;

/// Leases that outlast any test.
const LEASE_SECONDS: u32 = 600;

/// Sends `count` messages of `tenant` (`None`: without a group), their
/// bodies `{tenant}-{index}`.
async fn send_backlog(client: &aws_sdk_sqs::Client, url: &str, tenant: Option<&str>, count: usize) {
    let tenant = tenant.map(str::to_owned);
    send_numbered(client, url, count, move |index| {
        let body = format!("{}-{index}", tenant.as_deref().unwrap_or("nogroup"));
        SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(body)
            .set_message_group_id(tenant.clone())
            .build()
            .unwrap()
    })
    .await;
}

async fn send_one(client: &aws_sdk_sqs::Client, url: &str, tenant: &str, body: &str) {
    client
        .send_message()
        .queue_url(url)
        .message_body(body)
        .message_group_id(tenant)
        .send()
        .await
        .unwrap();
}

/// Receives `count` messages in receives of up to ten; returns their bodies.
async fn lease(client: &aws_sdk_sqs::Client, url: &str, count: usize) -> Vec<String> {
    let mut bodies = Vec::new();
    while bodies.len() < count {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(i32::try_from((count - bodies.len()).min(10)).unwrap())
            .send()
            .await
            .unwrap();
        assert!(!received.messages().is_empty(), "the queue ran dry");
        bodies.extend(
            received
                .messages()
                .iter()
                .map(|message| message.body().unwrap().to_owned()),
        );
    }
    bodies
}

fn tenants_of(bodies: &[String]) -> Vec<&str> {
    bodies
        .iter()
        .map(|body| body.rsplit_once('-').unwrap().0)
        .collect()
}

#[tokio::test]
async fn a_noisy_tenant_cannot_starve_a_quiet_one() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_with_lease(&client, "fair-starve", LEASE_SECONDS).await;
    send_backlog(&client, &url, Some("noisy"), 200).await;
    // The noisy tenant holds 40 leases: all the queue's in flight.
    let leased = lease(&client, &url, 40).await;
    assert!(tenants_of(&leased).iter().all(|&tenant| tenant == "noisy"));
    // Sent behind 160 visible noisy messages, the quiet ones come first.
    for index in 0..3 {
        send_one(&client, &url, "quiet", &format!("quiet-{index}")).await;
    }
    let received = lease(&client, &url, 10).await;
    assert_eq!(
        tenants_of(&received),
        [&["quiet"; 3][..], &["noisy"; 7][..]].concat(),
        "quiet tenant's messages first, then the noisy tenant's: {received:?}"
    );
    // However deep the noisy backlog, each quiet message is the next one out.
    for round in 0..5 {
        let body = format!("quiet-late{round}");
        send_one(&client, &url, "quiet", &body).await;
        assert_eq!(lease(&client, &url, 1).await, [body]);
    }
}

#[tokio::test]
async fn a_tenant_with_fewer_than_thirty_in_flight_is_served_in_queue_order() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_with_lease(&client, "fair-threshold", LEASE_SECONDS).await;
    send_backlog(&client, &url, Some("busy"), 60).await;
    lease(&client, &url, 29).await;
    send_one(&client, &url, "quiet", "quiet-0").await;
    let received = lease(&client, &url, 1).await;
    assert_eq!(
        tenants_of(&received),
        ["busy"],
        "29 in flight is not noisy: the older message goes first"
    );
    // The thirtieth lease makes it noisy: the quiet message is next.
    assert_eq!(lease(&client, &url, 1).await, ["quiet-0"]);
}

#[tokio::test]
async fn among_noisy_tenants_the_one_with_fewest_in_flight_goes_first() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_with_lease(&client, "fair-noisy-pair", LEASE_SECONDS).await;
    send_backlog(&client, &url, Some("big"), 100).await;
    lease(&client, &url, 60).await;
    send_backlog(&client, &url, Some("small"), 80).await;
    // "big" is noisy now; with no quiet message, "small" goes on until it
    // is noisy too (30 in flight)...
    let received = lease(&client, &url, 30).await;
    assert!(
        tenants_of(&received)
            .iter()
            .all(|&tenant| tenant == "small")
    );
    // ... and then it still goes first: 30 in flight against 60.
    let received = lease(&client, &url, 10).await;
    assert_eq!(tenants_of(&received), ["small"; 10], "{received:?}");
}

#[tokio::test]
async fn messages_without_a_group_are_each_their_own_tenant() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_with_lease(&client, "fair-ungrouped", LEASE_SECONDS).await;
    send_backlog(&client, &url, None, 60).await;
    lease(&client, &url, 40).await;
    send_one(&client, &url, "quiet", "quiet-0").await;
    // Forty ungrouped messages in flight are forty tenants, none noisy.
    let received = lease(&client, &url, 1).await;
    assert_eq!(tenants_of(&received), ["nogroup"]);
}
