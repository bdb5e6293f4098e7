//! Long polls: answered as soon as a message arrives or a lease is released, and a queue's wait time making every receive one.

use super::*;

#[tokio::test]
async fn long_poll_returns_as_soon_as_a_message_arrives() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "long-poll").await;
    let poller = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let output = client
                .receive_message()
                .queue_url(url)
                .wait_time_seconds(20)
                .send()
                .await
                .unwrap();
            (output.messages().len(), started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("wake up")
        .send()
        .await
        .unwrap();
    let (count, waited) = poller.await.unwrap();
    assert_eq!(count, 1);
    assert!(
        waited < Duration::from_secs(10),
        "the poller woke on the send, not on its 20 s timeout ({waited:?})"
    );

    let started = Instant::now();
    let empty = client
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(empty.messages().is_empty());
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "an empty long poll waits its full time"
    );
}

#[tokio::test]
async fn long_poll_wakes_when_a_lease_is_released() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "released").await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("m")
        .send()
        .await
        .unwrap();
    let held = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(600)
        .send()
        .await
        .unwrap();
    let handle = held.messages()[0].receipt_handle().unwrap().to_owned();
    let poller = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            client
                .receive_message()
                .queue_url(url)
                .wait_time_seconds(20)
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .expect("woken before 10 s")
        .unwrap();
    assert_eq!(output.messages().len(), 1);
}

#[tokio::test]
async fn queue_wait_time_attribute_makes_every_receive_a_long_poll() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = client
        .create_queue()
        .queue_name("patient")
        .attributes(QueueAttributeName::ReceiveMessageWaitTimeSeconds, "20")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let poller = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            client
                .receive_message()
                .queue_url(url)
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !poller.is_finished(),
        "a receive without WaitTimeSeconds waits the queue's 20 s"
    );
    client
        .send_message()
        .queue_url(&url)
        .message_body("arrived")
        .send()
        .await
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .expect("woken by the send")
        .unwrap();
    assert_eq!(output.messages()[0].body(), Some("arrived"));
    let started = Instant::now();
    let immediate = client
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(0)
        .send()
        .await
        .unwrap();
    assert!(immediate.messages().is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "WaitTimeSeconds=0 overrides the queue default"
    );
}
