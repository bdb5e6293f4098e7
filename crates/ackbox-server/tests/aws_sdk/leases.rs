//! Visibility as a lease: extending, shortening and ending it, and receipt handles that are stale, forged or someone else's.

use super::*;

#[tokio::test]
async fn inv3_visibility_is_a_lease_that_can_be_extended_shortened_and_ended() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = create(&client, "leases").await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("job")
        .send()
        .await
        .unwrap();
    let first = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(10)
        .send()
        .await
        .unwrap();
    let handle = first.messages()[0].receipt_handle().unwrap().to_owned();
    assert!(
        client
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty()
    );

    clock.advance_secs(9);
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(20)
        .send()
        .await
        .unwrap();
    clock.advance_secs(19);
    assert!(
        client
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty(),
        "extended lease holds"
    );
    clock.advance_secs(2);
    let second = client
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .unwrap();
    let message = &second.messages()[0];
    assert_eq!(
        message.attributes().unwrap()[&MessageSystemAttributeName::ApproximateReceiveCount],
        "2"
    );
    let new_handle = message.receipt_handle().unwrap().to_owned();
    assert_ne!(new_handle, handle, "each receive issues a new handle");

    let stale = client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(5)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(stale), "InvalidParameterValue");
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&new_handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let third = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        third.messages().len(),
        1,
        "visibility 0 releases the message at once"
    );
    let third_handle = third.messages()[0].receipt_handle().unwrap().to_owned();
    // A lease that ran out while nobody received the message again is taken
    // up again by its handle, as on AWS: the message is hidden once more.
    clock.advance_secs(31);
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&third_handle)
        .visibility_timeout(5)
        .send()
        .await
        .unwrap();
    assert!(
        receive_bodies(&client, &url).await.is_empty(),
        "the change applied: the message is in flight again"
    );

    client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&third_handle)
        .send()
        .await
        .unwrap();
    client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&third_handle)
        .send()
        .await
        .unwrap();
    clock.advance_secs(60);
    assert!(
        client
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty(),
        "deleted stays deleted"
    );
}

#[tokio::test]
async fn inv2_a_stale_handle_cannot_delete_a_message_someone_else_holds() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = create(&client, "contended").await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("job")
        .send()
        .await
        .unwrap();
    let first = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(5)
        .send()
        .await
        .unwrap();
    let stale = first.messages()[0].receipt_handle().unwrap().to_owned();
    clock.advance_secs(6);
    let second = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(30)
        .send()
        .await
        .unwrap();
    let current = second.messages()[0].receipt_handle().unwrap().to_owned();

    // SQS answers success for a stale handle, but the new holder keeps the message.
    client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&stale)
        .send()
        .await
        .unwrap();
    clock.advance_secs(31);
    let again = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.messages().len(),
        1,
        "the message survived the stale delete"
    );
    let latest = again.messages()[0].receipt_handle().unwrap();
    client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(latest)
        .send()
        .await
        .unwrap();
    clock.advance_secs(31);
    assert!(
        client
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty()
    );
    let _ = current;
}

#[tokio::test]
async fn forged_garbled_and_foreign_receipt_handles_are_invalid() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let first = create(&client, "first").await;
    let second = create(&client, "second").await;
    client
        .send_message()
        .queue_url(&first)
        .message_body("x")
        .send()
        .await
        .unwrap();
    let received = client
        .receive_message()
        .queue_url(&first)
        .send()
        .await
        .unwrap();
    let handle = received.messages()[0].receipt_handle().unwrap();
    let foreign = client
        .delete_message()
        .queue_url(&second)
        .receipt_handle(handle)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(foreign), "ReceiptHandleIsInvalid");
    let mut forged = handle.to_owned();
    forged.replace_range(4..5, if &forged[4..5] == "A" { "B" } else { "A" });
    let forged = client
        .delete_message()
        .queue_url(&first)
        .receipt_handle(forged)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(forged), "ReceiptHandleIsInvalid");
    let garbage = client
        .delete_message()
        .queue_url(&first)
        .receipt_handle("garbage")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(garbage), "ReceiptHandleIsInvalid");
}
