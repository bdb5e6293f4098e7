//! The official AWS SDK, configured for a local ackbox endpoint.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};

/// An `aws-sdk-sqs` client for `endpoint` with dummy credentials, as a user
/// would configure it for a self-hosted broker.
pub fn sqs_client(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            "test",
            "test",
            None,
            None,
            "ackbox-testkit",
        ))
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(config)
}
