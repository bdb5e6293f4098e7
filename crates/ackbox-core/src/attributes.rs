//! Queue attributes: the settable ones, their ranges, defaults and wire names.
//!
//! Attributes travel as a map of strings. [`QueueAttributes`] holds the typed
//! values the engine acts on and the pass-through ones (policy, encryption
//! settings) that a self-hosted broker records and echoes but need not enforce.

use std::collections::BTreeMap;

use crate::archive_policy;
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
    KMS_MASTER_KEY_ID,
    KMS_DATA_KEY_REUSE_PERIOD_SECONDS,
    SQS_MANAGED_SSE_ENABLED,
];

/// Encryption at rest, as AWS names it. ackbox's store is the operator's
/// disk; these are validated and echoed so that clients and tools that set
/// them (CloudFormation, Terraform) see what AWS would show. A queue
/// without a KMS key reports SQS-managed encryption on, as new queues on
/// AWS do; one with a key reports it off and the key's reuse period
/// (default 300 s). Ranges from the SQS API reference.
const KMS_MASTER_KEY_ID: &str = "KmsMasterKeyId";
const KMS_DATA_KEY_REUSE_PERIOD_SECONDS: &str = "KmsDataKeyReusePeriodSeconds";
const SQS_MANAGED_SSE_ENABLED: &str = "SqsManagedSseEnabled";
const KMS_DATA_KEY_REUSE_PERIOD_RANGE: (i64, i64) = (60, 86_400);
const DEFAULT_KMS_DATA_KEY_REUSE_PERIOD_SECONDS: &str = "300";
/// The encryption settings a queue reports even when not given them.
const ENCRYPTION_DEFAULTED: [&str; 2] =
    [SQS_MANAGED_SSE_ENABLED, KMS_DATA_KEY_REUSE_PERIOD_SECONDS];

/// Dead-letter policies, as JSON strings.
const REDRIVE_POLICY: &str = "RedrivePolicy";
/// ackbox's own: keep every message sent in an archive for replays.
pub const ARCHIVE_POLICY: &str = "AckBoxArchivePolicy";
const REDRIVE_ALLOW_POLICY: &str = "RedriveAllowPolicy";
/// Kept with a queue that holds an archive: how long it keeps a message,
/// seconds, up to an archive's 365 days where any other queue keeps 14.
/// The engine sets it; SetQueueAttributes and GetQueueAttributes do not
/// know it.
const ARCHIVE_QUEUE_RETENTION_PERIOD: &str = "AckBoxArchiveQueueRetentionPeriod";

/// The queue type; set at creation and never changed.
const FIFO_QUEUE: &str = "FifoQueue";
/// Attributes only FIFO queues have; on a standard queue SQS calls them unknown.
const CONTENT_BASED_DEDUPLICATION: &str = "ContentBasedDeduplication";
const DEDUPLICATION_SCOPE: &str = "DeduplicationScope";
const FIFO_THROUGHPUT_LIMIT: &str = "FifoThroughputLimit";
const FIFO_ONLY: [&str; 3] = [
    CONTENT_BASED_DEDUPLICATION,
    DEDUPLICATION_SCOPE,
    FIFO_THROUGHPUT_LIMIT,
];

/// Which sends a `MessageDeduplicationId` deduplicates against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeduplicationScope {
    /// Every send to the queue (the default).
    #[default]
    Queue,
    /// Only sends to the same message group (high-throughput mode).
    MessageGroup,
}

impl DeduplicationScope {
    fn as_wire(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::MessageGroup => "messageGroup",
        }
    }
}

/// Whether SQS's throughput quota applies per queue or per message group.
/// ackbox throttles neither; the setting is validated, kept and echoed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FifoThroughputLimit {
    /// One quota for the queue (the default).
    #[default]
    PerQueue,
    /// One quota per message group (high-throughput mode).
    PerMessageGroupId,
}

impl FifoThroughputLimit {
    fn as_wire(self) -> &'static str {
        match self {
            Self::PerQueue => "perQueue",
            Self::PerMessageGroupId => "perMessageGroupId",
        }
    }
}

/// The settings only a FIFO queue has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FifoSettings {
    /// Deduplicate by the body's SHA-256 when a send carries no `MessageDeduplicationId`.
    pub content_based_deduplication: bool,
    /// Which sends a deduplication id is compared with.
    pub deduplication_scope: DeduplicationScope,
    /// The throughput quota's scope.
    pub throughput_limit: FifoThroughputLimit,
}

fn parse_bool(name: &str, value: &str) -> Result<bool, SqsError> {
    if value.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(SqsError::invalid_attribute_value(
            name,
            value,
            &format!("{name} must be true or false."),
        ))
    }
}

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
    /// `Some` on a FIFO queue: its ordering and deduplication settings.
    pub fifo: Option<FifoSettings>,
    /// How many days the queue's archive keeps what is sent to it; `None`
    /// when it keeps no archive ([`ARCHIVE_POLICY`]).
    pub archive_retention_days: Option<i64>,
    /// `Some` on a queue that holds an archive: how long it keeps a
    /// message, seconds, in place of `message_retention_period`.
    pub archive_queue_retention_period: Option<i64>,
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
            fifo: None,
            archive_retention_days: None,
            archive_queue_retention_period: None,
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
    /// The defaults of a FIFO queue (`fifo`) or a standard one.
    pub fn for_kind(fifo: bool) -> Self {
        Self {
            fifo: fifo.then(FifoSettings::default),
            ..Self::default()
        }
    }

    /// Whether this is a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.fifo.is_some()
    }

    /// How long the queue keeps a message, seconds: an archive's retention
    /// on a queue that holds one, else `MessageRetentionPeriod`.
    pub fn retention_seconds(&self) -> i64 {
        self.archive_queue_retention_period
            .unwrap_or(self.message_retention_period)
    }

    /// Applies a map of wire attributes on top of `self`, validating each and
    /// then their combination.
    pub fn apply<'a>(
        &mut self,
        attributes: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<(), SqsError> {
        for (name, value) in attributes {
            self.apply_one(name, value)?;
        }
        self.forget_encryption_defaults();
        self.validate_combination()
    }

    /// Encryption settings equal to what [`Self::to_map`] reports anyway
    /// are not kept, so that a queue reads back equal to itself.
    fn forget_encryption_defaults(&mut self) {
        for name in ENCRYPTION_DEFAULTED {
            if self.passthrough.get(name) == self.encryption_default(name).as_ref() {
                self.passthrough.remove(name);
            }
        }
    }

    /// What a queue reports for an encryption setting it was not given:
    /// SQS-managed encryption unless it has a KMS key, and with a key the
    /// key's default reuse period.
    fn encryption_default(&self, name: &str) -> Option<String> {
        let kms_key = self
            .passthrough
            .get(KMS_MASTER_KEY_ID)
            .is_some_and(|key| !key.is_empty());
        match name {
            SQS_MANAGED_SSE_ENABLED => Some((!kms_key).to_string()),
            KMS_DATA_KEY_REUSE_PERIOD_SECONDS => {
                kms_key.then(|| DEFAULT_KMS_DATA_KEY_REUSE_PERIOD_SECONDS.to_owned())
            }
            _ => None,
        }
    }

    /// SetQueueAttributes: [`Self::apply`], but a queue's type is given at
    /// its creation only, and AWS does not know `FifoQueue` afterwards: it
    /// answers `InvalidAttributeName`, "Unknown Attribute FifoQueue.", as
    /// infrastructure tools that update queues on AWS record.
    pub fn change<'a>(
        &mut self,
        attributes: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<(), SqsError> {
        let attributes: Vec<_> = attributes.into_iter().collect();
        if attributes
            .iter()
            .any(|(name, _)| name.as_str() == FIFO_QUEUE)
        {
            return Err(SqsError::new(
                ErrorCode::InvalidAttributeName,
                format!("Unknown Attribute {FIFO_QUEUE}."),
            ));
        }
        self.apply(attributes)
    }

    fn apply_one(&mut self, name: &str, value: &str) -> Result<(), SqsError> {
        match name {
            DELAY_SECONDS => {
                self.delay_seconds = parse_ranged(name, value, 0, i64::from(MAX_DELAY_SECONDS))?;
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
            SQS_MANAGED_SSE_ENABLED => {
                let enabled = parse_bool(name, value)?;
                self.passthrough
                    .insert(name.to_owned(), enabled.to_string());
            }
            KMS_DATA_KEY_REUSE_PERIOD_SECONDS => {
                let (min, max) = KMS_DATA_KEY_REUSE_PERIOD_RANGE;
                let seconds = parse_ranged(name, value, min, max)?;
                self.passthrough
                    .insert(name.to_owned(), seconds.to_string());
            }
            passthrough if PASSTHROUGH.contains(&passthrough) => {
                self.passthrough.insert(name.to_owned(), value.to_owned());
            }
            FIFO_QUEUE => {
                if parse_bool(name, value)? != self.is_fifo() {
                    return Err(SqsError::new(
                        ErrorCode::InvalidAttributeValue,
                        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
                    ));
                }
            }
            fifo_only if FIFO_ONLY.contains(&fifo_only) => {
                let Some(fifo) = &mut self.fifo else {
                    return Err(SqsError::new(
                        ErrorCode::InvalidAttributeName,
                        format!(
                            "You can specify the {fifo_only} only when FifoQueue is set to true."
                        ),
                    ));
                };
                match fifo_only {
                    CONTENT_BASED_DEDUPLICATION => {
                        fifo.content_based_deduplication = parse_bool(name, value)?;
                    }
                    DEDUPLICATION_SCOPE => {
                        fifo.deduplication_scope = match value {
                            "queue" => DeduplicationScope::Queue,
                            "messageGroup" => DeduplicationScope::MessageGroup,
                            _ => {
                                return Err(SqsError::invalid_attribute_value(
                                    name,
                                    value,
                                    "DeduplicationScope must be queue or messageGroup.",
                                ));
                            }
                        };
                    }
                    _ => {
                        fifo.throughput_limit = match value {
                            "perQueue" => FifoThroughputLimit::PerQueue,
                            "perMessageGroupId" => FifoThroughputLimit::PerMessageGroupId,
                            _ => {
                                return Err(SqsError::invalid_attribute_value(
                                    name,
                                    value,
                                    "FifoThroughputLimit must be perQueue or perMessageGroupId.",
                                ));
                            }
                        };
                    }
                }
            }
            // The empty string removes a policy, as on SQS.
            REDRIVE_POLICY => {
                self.redrive_policy = (!value.is_empty()).then(|| value.parse()).transpose()?;
            }
            REDRIVE_ALLOW_POLICY => {
                self.redrive_allow_policy =
                    (!value.is_empty()).then(|| value.parse()).transpose()?;
            }
            ARCHIVE_POLICY => {
                self.archive_retention_days = archive_policy::parse(value)
                    .map_err(|reason| SqsError::invalid_attribute_value(name, value, &reason))?;
            }
            unknown => {
                return Err(SqsError::new(
                    ErrorCode::InvalidAttributeName,
                    format!("Unknown Attribute {unknown}."),
                ));
            }
        }
        Ok(())
    }

    /// SQS allows per-group throughput only with per-group deduplication.
    fn validate_combination(&self) -> Result<(), SqsError> {
        match self.fifo {
            Some(FifoSettings {
                throughput_limit: FifoThroughputLimit::PerMessageGroupId,
                deduplication_scope: DeduplicationScope::Queue,
                ..
            }) => Err(SqsError::new(
                ErrorCode::InvalidAttributeValue,
                "Invalid value for the parameter FifoThroughputLimit. Reason: The perMessageGroupId \
                 value is allowed only when the value for DeduplicationScope is messageGroup.",
            )),
            _ => Ok(()),
        }
    }

    /// The settable attributes as wire strings, by name.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let mut map = self.passthrough.clone();
        for name in ENCRYPTION_DEFAULTED {
            if !map.contains_key(name)
                && let Some(default) = self.encryption_default(name)
            {
                map.insert(name.to_owned(), default);
            }
        }
        if let Some(fifo) = &self.fifo {
            map.insert(FIFO_QUEUE.to_owned(), "true".to_owned());
            map.insert(
                CONTENT_BASED_DEDUPLICATION.to_owned(),
                fifo.content_based_deduplication.to_string(),
            );
            map.insert(
                DEDUPLICATION_SCOPE.to_owned(),
                fifo.deduplication_scope.as_wire().to_owned(),
            );
            map.insert(
                FIFO_THROUGHPUT_LIMIT.to_owned(),
                fifo.throughput_limit.as_wire().to_owned(),
            );
        }
        if let Some(policy) = &self.redrive_policy {
            map.insert(REDRIVE_POLICY.to_owned(), policy.to_string());
        }
        if let Some(policy) = &self.redrive_allow_policy {
            map.insert(REDRIVE_ALLOW_POLICY.to_owned(), policy.to_string());
        }
        if let Some(days) = self.archive_retention_days {
            map.insert(ARCHIVE_POLICY.to_owned(), archive_policy::render(days));
        }
        if let Some(seconds) = self.archive_queue_retention_period {
            map.insert(
                ARCHIVE_QUEUE_RETENTION_PERIOD.to_owned(),
                seconds.to_string(),
            );
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
        let fifo = map
            .get(FIFO_QUEUE)
            .is_some_and(|value| value.eq_ignore_ascii_case("true"));
        let mut attributes = Self::for_kind(fifo);
        attributes.apply(
            map.iter()
                .filter(|(name, _)| name.as_str() != ARCHIVE_QUEUE_RETENTION_PERIOD),
        )?;
        attributes.archive_queue_retention_period = map
            .get(ARCHIVE_QUEUE_RETENTION_PERIOD)
            .map(|value| {
                parse_ranged(
                    ARCHIVE_QUEUE_RETENTION_PERIOD,
                    value,
                    archive_policy::retention_seconds(archive_policy::MIN_ARCHIVE_RETENTION_DAYS),
                    archive_policy::retention_seconds(archive_policy::MAX_ARCHIVE_RETENTION_DAYS),
                )
            })
            .transpose()?;
        Ok(attributes)
    }

    /// The attributes GetQueueAttributes shows, by name: [`Self::to_map`]
    /// without what only the engine keeps.
    pub fn to_visible_map(&self) -> BTreeMap<String, String> {
        let mut map = self.to_map();
        map.remove(ARCHIVE_QUEUE_RETENTION_PERIOD);
        map
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
        || [
            REDRIVE_POLICY,
            REDRIVE_ALLOW_POLICY,
            FIFO_QUEUE,
            ARCHIVE_POLICY,
        ]
        .contains(&name)
        || FIFO_ONLY.contains(&name)
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
    fn fifo_settings_parse_round_trip_and_keep_their_kind() {
        let mut attributes = QueueAttributes::for_kind(true);
        attributes
            .apply(&map(&[
                ("FifoQueue", "true"),
                ("ContentBasedDeduplication", "true"),
                ("DeduplicationScope", "messageGroup"),
                ("FifoThroughputLimit", "perMessageGroupId"),
            ]))
            .unwrap();
        assert_eq!(
            attributes.fifo,
            Some(FifoSettings {
                content_based_deduplication: true,
                deduplication_scope: DeduplicationScope::MessageGroup,
                throughput_limit: FifoThroughputLimit::PerMessageGroupId,
            })
        );
        let stored = attributes.to_map();
        assert_eq!(stored["FifoQueue"], "true");
        assert_eq!(QueueAttributes::from_map(&stored).unwrap(), attributes);
        let error = attributes
            .apply(&map(&[("FifoQueue", "false")]))
            .unwrap_err();
        assert_eq!(
            error.message,
            "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported."
        );
        let error = attributes
            .apply(&map(&[("DeduplicationScope", "everywhere")]))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeValue);
        assert!(error.message.contains("everywhere"), "{}", error.message);
    }

    #[test]
    fn per_group_throughput_needs_per_group_deduplication() {
        let mut attributes = QueueAttributes::for_kind(true);
        let error = attributes
            .apply(&map(&[("FifoThroughputLimit", "perMessageGroupId")]))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeValue);
        assert!(
            error.message.contains("DeduplicationScope"),
            "{}",
            error.message
        );
        // Both in one request: judged together, after every value is applied.
        attributes
            .apply(&map(&[
                ("FifoThroughputLimit", "perMessageGroupId"),
                ("DeduplicationScope", "messageGroup"),
            ]))
            .unwrap();
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
