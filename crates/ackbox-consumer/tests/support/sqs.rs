//! ackbox over the SQS API: the queue `work` and its dead-letter queue
//! `work-dlq` on a test server of its own, which requires SigV4 — so every
//! call of the consumer, `AckBox.NackMessage` included, must be signed.

use ackbox_consumer::{SqsPublisher, SqsTransport, async_trait};
use ackbox_testkit::server::TestServer;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;

use super::Broker;

/// A broker with `work` (lease `lease_seconds`, dead-lettering after
/// `max_receive` receives) and its dead-letter queue `work-dlq`.
pub struct SqsBroker {
    pub server: TestServer,
    pub client: Client,
    pub url: String,
    pub dlq_url: String,
}

impl SqsBroker {
    /// A broker whose queue is FIFO: `work.fifo` (lease `lease_seconds`)
    /// dead-lettering to `work-dlq.fifo` after `max_receive` receives.
    pub async fn start_fifo(lease_seconds: u32, max_receive: u32) -> Self {
        Self::start_named(
            "work.fifo",
            "work-dlq.fifo",
            lease_seconds,
            Some(max_receive),
        )
        .await
    }

    /// A broker whose queue `work` has no dead-letter queue.
    pub async fn start_without_dead_letter_queue(lease_seconds: u32) -> Self {
        Self::start_named("work", "work-dlq", lease_seconds, None).await
    }

    async fn start_named(
        name: &str,
        dead_letter_name: &str,
        lease_seconds: u32,
        max_receive: Option<u32>,
    ) -> Self {
        let server = TestServer::builder()
            .credentials(
                "[[keys]]\naccess_key_id = \"CONSUMER\"\n\
                 secret_access_key = \"consumer-secret-0123456789\"\n\
                 allow_queues = [\"*\"]\nallow_topics = [\"*\"]\nallow_actions = [\"*\"]\n",
            )
            .start()
            .await;
        let client = server.client_with_key("CONSUMER", "consumer-secret-0123456789");
        let fifo: Vec<(QueueAttributeName, String)> = if name.ends_with(".fifo") {
            vec![(QueueAttributeName::FifoQueue, "true".to_owned())]
        } else {
            Vec::new()
        };
        let dlq_url = create(&client, dead_letter_name, &fifo).await;
        let dlq_arn = attribute(&client, &dlq_url, QueueAttributeName::QueueArn).await;
        let mut attributes = fifo;
        attributes.push((
            QueueAttributeName::VisibilityTimeout,
            lease_seconds.to_string(),
        ));
        if let Some(max_receive) = max_receive {
            attributes.push((
                QueueAttributeName::RedrivePolicy,
                format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":{max_receive}}}"#),
            ));
        }
        let url = create(&client, name, &attributes).await;
        Self {
            server,
            client,
            url,
            dlq_url,
        }
    }

    /// Sends `body` in `group` (a FIFO queue's deduplication id is `body`).
    pub async fn send_in_group(&self, body: &str, group: Option<&str>) -> String {
        self.send_in_group_with_attributes(body, group, &[]).await
    }

    /// Sends `body` in `group` with string message attributes.
    pub async fn send_in_group_with_attributes(
        &self,
        body: &str,
        group: Option<&str>,
        attributes: &[(&str, &str)],
    ) -> String {
        let mut request = self
            .client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .set_message_attributes(Some(string_attributes(attributes)));
        if let Some(group) = group {
            request = request.message_group_id(group);
        }
        if self.url.ends_with(".fifo") {
            use sha2::Digest;
            request = request
                .message_deduplication_id(hex::encode(sha2::Sha256::digest(body.as_bytes())));
        }
        request.send().await.unwrap().message_id.unwrap()
    }

    /// Sends `body` with string message attributes.
    pub async fn send_with_attributes(&self, body: &str, attributes: &[(&str, &str)]) -> String {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .set_message_attributes(Some(string_attributes(attributes)))
            .send()
            .await
            .unwrap()
            .message_id
            .unwrap()
    }

    /// The transport as it would run against AWS: plain SQS calls only.
    pub fn aws_transport(&self) -> SqsTransport {
        SqsTransport::new(self.client.clone(), &self.url)
    }

    /// Visible + in flight + delayed messages of a queue.
    pub async fn depth_of(&self, url: &str) -> (u64, u64) {
        let attributes = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap();
        let count = |name| attributes[&name].parse::<u64>().unwrap();
        (
            count(QueueAttributeName::ApproximateNumberOfMessages),
            count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }

    /// The dead-letter queue's messages, left where they are.
    async fn peek_dead_letters(&self) -> Vec<aws_sdk_sqs::types::Message> {
        self.client
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .message_attribute_names("All")
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            // ackbox's own attributes come only when named.
            .message_system_attribute_names("AckBoxFailureClass".into())
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
    }

    /// The dead-letter queue's messages with the failure class a copy
    /// carries as a message attribute (plain SQS dead-lettering).
    pub async fn dead_letter_copies(&self) -> Vec<(String, String)> {
        self.peek_dead_letters()
            .await
            .iter()
            .map(|message| {
                let class = message
                    .message_attributes()
                    .and_then(|attributes| attributes.get("ackbox.failure.class"))
                    .and_then(|value| value.string_value())
                    .unwrap_or_default()
                    .to_owned();
                (message.body().unwrap_or_default().to_owned(), class)
            })
            .collect()
    }
}

#[async_trait]
impl Broker for SqsBroker {
    type Transport = SqsTransport;
    type Publisher = SqsPublisher;
    const DROPS_REPUBLISHED_EVENTS: bool = false;

    fn available() -> bool {
        true
    }

    async fn start(lease_seconds: u32, max_receive: u32) -> Self {
        Self::start_named("work", "work-dlq", lease_seconds, Some(max_receive)).await
    }

    async fn transport(&self) -> SqsTransport {
        SqsTransport::new(self.client.clone(), &self.url).with_ackbox_extensions()
    }

    async fn publisher(&self) -> SqsPublisher {
        SqsPublisher::new(self.client.clone())
    }

    fn destination(&self) -> String {
        self.url.clone()
    }

    async fn send(&self, body: &str) -> String {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .unwrap()
            .message_id
            .unwrap()
    }

    async fn send_batch(&self, bodies: &[String]) {
        for chunk in bodies.chunks(10) {
            let mut request = self.client.send_message_batch().queue_url(&self.url);
            for (index, body) in chunk.iter().enumerate() {
                request = request.entries(
                    aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .message_body(body)
                        .build()
                        .unwrap(),
                );
            }
            let output = request.send().await.unwrap();
            assert!(output.failed().is_empty());
        }
    }

    async fn depth(&self) -> (u64, u64) {
        self.depth_of(&self.url).await
    }

    async fn dead_letter_depth(&self) -> u64 {
        // SQS moves a message past maxReceiveCount at the next receive.
        let _ = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .send()
            .await;
        self.depth_of(&self.dlq_url).await.0
    }

    async fn dead_letters(&self) -> Vec<(String, String)> {
        // ackbox keeps the failure class with the message itself.
        let class_attribute =
            aws_sdk_sqs::types::MessageSystemAttributeName::from("AckBoxFailureClass");
        self.peek_dead_letters()
            .await
            .iter()
            .map(|message| {
                let class = message
                    .attributes()
                    .and_then(|attributes| attributes.get(&class_attribute))
                    .cloned()
                    .unwrap_or_default();
                (message.body().unwrap_or_default().to_owned(), class)
            })
            .collect()
    }

    async fn redrive(&self) {
        let dlq_arn = ackbox_testkit::client::queue_arn(&self.client, &self.dlq_url).await;
        self.client
            .start_message_move_task()
            .source_arn(dlq_arn)
            .send()
            .await
            .unwrap();
    }
}

async fn create(
    client: &Client,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> String {
    let mut request = client.create_queue().queue_name(name);
    for (attribute, value) in attributes {
        request = request.attributes(attribute.clone(), value);
    }
    request.send().await.unwrap().queue_url.unwrap()
}

async fn attribute(client: &Client, url: &str, name: QueueAttributeName) -> String {
    client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(name.clone())
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&name]
        .clone()
}

fn string_attributes(
    attributes: &[(&str, &str)],
) -> std::collections::HashMap<String, aws_sdk_sqs::types::MessageAttributeValue> {
    attributes
        .iter()
        .map(|(name, value)| {
            let value = aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value(*value)
                .build()
                .unwrap();
            ((*name).to_owned(), value)
        })
        .collect()
}
