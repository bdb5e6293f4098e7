//! Queue attributes: the settable ones, their ranges, defaults and wire names.
//!
//! Attributes travel as a map of strings. [`QueueAttributes`] holds the typed
//! values the engine acts on and the pass-through ones (policy, encryption
//! settings) that a self-hosted broker records and echoes but need not enforce.

use std::collections::BTreeMap;

use crate::error::{ErrorCode, SqsError};
use crate::limits::{
    DEFAULT_RETENTION_SECONDS, DEFAULT_VISIBILITY_TIMEOUT_SECONDS, MAX_DELAY_SECONDS,
    MAX_MESSAGE_SIZE, MAX_RETENTION_SECONDS, MAX_VISIBILITY_TIMEOUT_SECONDS, MAX_WAIT_TIME_SECONDS,
    MIN_MESSAGE_SIZE_ATTRIBUTE, MIN_RETENTION_SECONDS,
};
use crate::redrive::{RedriveAllowPolicy, RedrivePolicy};

/// Settable attributes the engine enforces.
const DELAY_SECONDS: &str = "DelaySeconds";
const MAXIMUM_MESSAGE_SIZE: &str = "MaximumMessageSize";
const MESSAGE_RETENTION_PERIOD: &str = "MessageRetentionPeriod";
const RECEIVE_MESSAGE_WAIT_TIME_SECONDS: &str = "ReceiveMessageWaitTimeSeconds";
const VISIBILITY_TIMEOUT: &str = "VisibilityTimeout";

/// Settable attributes recorded and echoed without engine semantics.
const PASSTHROUGH: [&str; 4] = [
    "Policy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
];

/// Dead-letter policies, as JSON strings.
const REDRIVE_POLICY: &str = "RedrivePolicy";
const REDRIVE_ALLOW_POLICY: &str = "RedriveAllowPolicy";

/// Attributes only FIFO queues have; on a standard queue SQS calls them unknown.
const FIFO_ONLY: [&str; 3] = [
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
];

/// Read-only attributes a GetQueueAttributes call may name.
pub const COMPUTED_ATTRIBUTES: [&str; 6] = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
];

/// The settable attributes of a queue, with SQS defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueAttributes {
    /// Default delivery delay for new messages, seconds (0..=900).
    pub delay_seconds: i64,
    /// Largest accepted message, bytes (1,024..=1,048,576).
    pub maximum_message_size: i64,
    /// How long a message is kept, seconds (60..=1,209,600).
    pub message_retention_period: i64,
    /// Default long-poll wait, seconds (0..=20).
    pub receive_message_wait_time_seconds: i64,
    /// Default lease on receive, seconds (0..=43,200).
    pub visibility_timeout: i64,
    /// Where poison messages go; `None` keeps them forever.
    pub redrive_policy: Option<RedrivePolicy>,
    /// Which queues may use this one as their dead-letter queue; `None` allows all.
    pub redrive_allow_policy: Option<RedriveAllowPolicy>,
    /// Recorded attributes without engine semantics, by wire name.
    pub passthrough: BTreeMap<String, String>,
}

impl Default for QueueAttributes {
    fn default() -> Self {
        Self {
            delay_seconds: 0,
            maximum_message_size: i64::from(MAX_MESSAGE_SIZE),
            message_retention_period: DEFAULT_RETENTION_SECONDS,
            receive_message_wait_time_seconds: 0,
            visibility_timeout: DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
            redrive_policy: None,
            redrive_allow_policy: None,
            passthrough: BTreeMap::new(),
        }
    }
}

fn parse_ranged(name: &str, value: &str, min: i64, max: i64) -> Result<i64, SqsError> {
    value
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|number| (min..=max).contains(number))
        .ok_or_else(|| {
            SqsError::new(
                ErrorCode::InvalidAttributeValue,
                format!(
                    "Invalid value for the parameter {name}. Reason: must be an integer from {min} to {max}; got {value:?}."
                ),
            )
        })
}

impl QueueAttributes {
    /// Applies a map of wire attributes on top of `self`, validating each.
    pub fn apply<'a>(
        &mut self,
        attributes: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<(), SqsError> {
        for (name, value) in attributes {
            match name.as_str() {
                DELAY_SECONDS => {
                    self.delay_seconds =
                        parse_ranged(name, value, 0, i64::from(MAX_DELAY_SECONDS))?;
                }
                MAXIMUM_MESSAGE_SIZE => {
                    self.maximum_message_size = parse_ranged(
                        name,
                        value,
                        i64::from(MIN_MESSAGE_SIZE_ATTRIBUTE),
                        i64::from(MAX_MESSAGE_SIZE),
                    )?;
                }
                MESSAGE_RETENTION_PERIOD => {
                    self.message_retention_period =
                        parse_ranged(name, value, MIN_RETENTION_SECONDS, MAX_RETENTION_SECONDS)?;
                }
                RECEIVE_MESSAGE_WAIT_TIME_SECONDS => {
                    self.receive_message_wait_time_seconds =
                        parse_ranged(name, value, 0, i64::from(MAX_WAIT_TIME_SECONDS))?;
                }
                VISIBILITY_TIMEOUT => {
                    self.visibility_timeout =
                        parse_ranged(name, value, 0, MAX_VISIBILITY_TIMEOUT_SECONDS)?;
                }
                passthrough if PASSTHROUGH.contains(&passthrough) => {
                    self.passthrough.insert(name.clone(), value.clone());
                }
                "FifoQueue" if value.eq_ignore_ascii_case("false") => {}
                "FifoQueue" if value.eq_ignore_ascii_case("true") => {
                    return Err(SqsError::new(
                        ErrorCode::InvalidAttributeValue,
                        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
                    ));
                }
                "FifoQueue" => {
                    return Err(SqsError::invalid_attribute_value(
                        name,
                        value,
                        "FifoQueue must be true or false.",
                    ));
                }
                fifo_only if FIFO_ONLY.contains(&fifo_only) => {
                    return Err(SqsError::new(
                        ErrorCode::InvalidAttributeName,
                        format!(
                            "You can specify the {fifo_only} only when FifoQueue is set to true."
                        ),
                    ));
                }
                // The empty string removes a policy, as on SQS.
                REDRIVE_POLICY => {
                    self.redrive_policy = (!value.is_empty()).then(|| value.parse()).transpose()?;
                }
                REDRIVE_ALLOW_POLICY => {
                    self.redrive_allow_policy =
                        (!value.is_empty()).then(|| value.parse()).transpose()?;
                }
                unknown => {
                    return Err(SqsError::new(
                        ErrorCode::InvalidAttributeName,
                        format!("Unknown Attribute {unknown}."),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The settable attributes as wire strings, by name.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let mut map = self.passthrough.clone();
        if let Some(policy) = &self.redrive_policy {
            map.insert(REDRIVE_POLICY.to_owned(), policy.to_string());
        }
        if let Some(policy) = &self.redrive_allow_policy {
            map.insert(REDRIVE_ALLOW_POLICY.to_owned(), policy.to_string());
        }
        map.insert(DELAY_SECONDS.to_owned(), self.delay_seconds.to_string());
        map.insert(
            MAXIMUM_MESSAGE_SIZE.to_owned(),
            self.maximum_message_size.to_string(),
        );
        map.insert(
            MESSAGE_RETENTION_PERIOD.to_owned(),
            self.message_retention_period.to_string(),
        );
        map.insert(
            RECEIVE_MESSAGE_WAIT_TIME_SECONDS.to_owned(),
            self.receive_message_wait_time_seconds.to_string(),
        );
        map.insert(
            VISIBILITY_TIMEOUT.to_owned(),
            self.visibility_timeout.to_string(),
        );
        map
    }

    /// Rebuilds attributes from a map that [`QueueAttributes::to_map`] produced.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, SqsError> {
        let mut attributes = Self::default();
        attributes.apply(map)?;
        Ok(attributes)
    }

    /// For CreateQueue on an existing queue: the first requested attribute whose
    /// value differs from this queue's, compared after normalisation.
    pub fn first_difference<'a>(
        &self,
        requested: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Option<String>, SqsError> {
        let current = self.to_map();
        for (name, value) in requested {
            let mut probe = self.clone();
            probe.apply([(name, value)])?;
            if probe.to_map().get(name) != current.get(name) {
                return Ok(Some(name.clone()));
            }
        }
        Ok(None)
    }
}

/// Whether `name` is an attribute GetQueueAttributes knows.
pub fn is_known_attribute_name(name: &str) -> bool {
    name == "All"
        || COMPUTED_ATTRIBUTES.contains(&name)
        || PASSTHROUGH.contains(&name)
        || [REDRIVE_POLICY, REDRIVE_ALLOW_POLICY].contains(&name)
        || [
            DELAY_SECONDS,
            MAXIMUM_MESSAGE_SIZE,
            MESSAGE_RETENTION_PERIOD,
            RECEIVE_MESSAGE_WAIT_TIME_SECONDS,
            VISIBILITY_TIMEOUT,
        ]
        .contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_match_sqs() {
        let defaults = QueueAttributes::default().to_map();
        assert_eq!(defaults["VisibilityTimeout"], "30");
        assert_eq!(defaults["MessageRetentionPeriod"], "345600");
        assert_eq!(defaults["MaximumMessageSize"], "1048576");
    }

    #[test]
    fn out_of_range_values_name_the_attribute_and_the_range() {
        let mut attributes = QueueAttributes::default();
        let error = attributes
            .apply(&map(&[("DelaySeconds", "901")]))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeValue);
        assert!(
            error.message.contains("DelaySeconds") && error.message.contains("900"),
            "{}",
            error.message
        );
        for (name, value) in [
            ("MessageRetentionPeriod", "59"),
            ("MaximumMessageSize", "1023"),
            ("VisibilityTimeout", "43201"),
            ("ReceiveMessageWaitTimeSeconds", "21"),
            ("VisibilityTimeout", "soon"),
        ] {
            assert!(
                attributes.apply(&map(&[(name, value)])).is_err(),
                "{name}={value}"
            );
        }
    }

    #[test]
    fn fifo_attributes_on_a_standard_queue_follow_sqs() {
        let mut attributes = QueueAttributes::default();
        let error = attributes
            .apply(&map(&[("DeduplicationScope", "queue")]))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeName);
        assert_eq!(
            error.message,
            "You can specify the DeduplicationScope only when FifoQueue is set to true."
        );
        let error = attributes
            .apply(&map(&[("FifoQueue", "true")]))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeValue);
        let error = attributes
            .apply(&map(&[("FifoQueue", "maybe")]))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeValue);
        assert!(attributes.apply(&map(&[("FifoQueue", "false")])).is_ok());
    }

    #[test]
    fn unknown_attribute_is_invalid_attribute_name() {
        let error = QueueAttributes::default()
            .apply(&map(&[("Colour", "blue")]))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeName);
    }

    #[test]
    fn difference_ignores_equal_values_in_another_spelling() {
        let attributes = QueueAttributes::default();
        assert_eq!(
            attributes
                .first_difference(&map(&[("VisibilityTimeout", "30")]))
                .unwrap(),
            None
        );
        assert_eq!(
            attributes
                .first_difference(&map(&[("DelaySeconds", "5")]))
                .unwrap(),
            Some("DelaySeconds".to_owned())
        );
    }

    #[test]
    fn map_round_trips() {
        let mut attributes = QueueAttributes::default();
        attributes
            .apply(&map(&[("DelaySeconds", "5"), ("Policy", "{}")]))
            .unwrap();
        assert_eq!(
            QueueAttributes::from_map(&attributes.to_map()).unwrap(),
            attributes
        );
    }
}
