//! Dead-letter policies: `RedrivePolicy` on a source queue and
//! `RedriveAllowPolicy` on a dead-letter queue, parsed from and rendered to
//! the JSON strings SQS carries them in.
//!
//! Only the shape is checked here; whether the target exists and allows the
//! source is the engine's business, since it needs the other queue.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::SqsError;
use crate::limits::{MAX_MAX_RECEIVE_COUNT, MAX_REDRIVE_ALLOW_SOURCES};

/// Where a queue's poison messages go, and after how many receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedrivePolicy {
    /// ARN of the dead-letter queue.
    pub dead_letter_target_arn: String,
    /// A receive that would exceed this count moves the message instead (1..=1000).
    pub max_receive_count: u32,
}

fn redrive_error(value: &str, reason: &str) -> SqsError {
    SqsError::invalid_parameter("RedrivePolicy", value, reason)
}

impl FromStr for RedrivePolicy {
    type Err = SqsError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let json: Value = serde_json::from_str(text)
            .map_err(|_| redrive_error(text, "Redrive policy is not a valid JSON map."))?;
        let Some(map) = json.as_object() else {
            return Err(redrive_error(
                text,
                "Redrive policy is not a valid JSON map.",
            ));
        };
        if let Some(unknown) = map
            .keys()
            .find(|key| !matches!(key.as_str(), "deadLetterTargetArn" | "maxReceiveCount"))
        {
            return Err(redrive_error(
                text,
                &format!(
                    "Only deadLetterTargetArn and maxReceiveCount are allowed; got {unknown}."
                ),
            ));
        }
        let dead_letter_target_arn = map
            .get("deadLetterTargetArn")
            .and_then(Value::as_str)
            .filter(|arn| !arn.is_empty())
            .ok_or_else(|| {
                redrive_error(
                    text,
                    "Redrive policy does not contain mandatory attribute: deadLetterTargetArn.",
                )
            })?
            .to_owned();
        // SQS accepts the count as a JSON number or as a numeric string.
        let count = match map.get("maxReceiveCount") {
            Some(Value::Number(number)) => number.as_i64(),
            Some(Value::String(text)) => text.trim().parse::<i64>().ok(),
            None => {
                return Err(redrive_error(
                    text,
                    "Redrive policy does not contain mandatory attribute: maxReceiveCount.",
                ));
            }
            Some(_) => None,
        };
        let max_receive_count = count
            .filter(|count| (1..=i64::from(MAX_MAX_RECEIVE_COUNT)).contains(count))
            .and_then(|count| u32::try_from(count).ok())
            .ok_or_else(|| {
                redrive_error(
                    text,
                    &format!(
                        "Invalid value for maxReceiveCount: {}, valid values are from 1 to {MAX_MAX_RECEIVE_COUNT} both inclusive.",
                        map.get("maxReceiveCount").map(Value::to_string).unwrap_or_default()
                    ),
                )
            })?;
        Ok(Self {
            dead_letter_target_arn,
            max_receive_count,
        })
    }
}

impl fmt::Display for RedrivePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = serde_json::json!({
            "deadLetterTargetArn": self.dead_letter_target_arn,
            "maxReceiveCount": self.max_receive_count,
        });
        write!(f, "{json}")
    }
}

/// Which source queues may name a queue as their dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RedrivePermission {
    /// Any source queue.
    AllowAll,
    /// No source queue.
    DenyAll,
    /// Only the listed source queues.
    ByQueue,
}

/// A dead-letter queue's `RedriveAllowPolicy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedriveAllowPolicy {
    /// The permission.
    pub redrive_permission: RedrivePermission,
    /// With `byQueue`: the allowed source queue ARNs (1..=10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_queue_arns: Vec<String>,
}

impl RedriveAllowPolicy {
    /// Whether the queue with ARN `source_arn` may use this queue as its DLQ.
    pub fn allows(&self, source_arn: &str) -> bool {
        match self.redrive_permission {
            RedrivePermission::AllowAll => true,
            RedrivePermission::DenyAll => false,
            RedrivePermission::ByQueue => {
                self.source_queue_arns.iter().any(|arn| arn == source_arn)
            }
        }
    }
}

impl FromStr for RedriveAllowPolicy {
    type Err = SqsError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid =
            |reason: &str| SqsError::invalid_parameter("RedriveAllowPolicy", text, reason);
        let policy: Self = serde_json::from_str(text).map_err(|_| {
            invalid("RedriveAllowPolicy must be a JSON map with redrivePermission allowAll, denyAll or byQueue, and sourceQueueArns only with byQueue.")
        })?;
        match (policy.redrive_permission, policy.source_queue_arns.len()) {
            (RedrivePermission::ByQueue, 0) => Err(invalid(
                "byQueue needs at least one source queue ARN in sourceQueueArns.",
            )),
            (RedrivePermission::ByQueue, count) if count > MAX_REDRIVE_ALLOW_SOURCES => {
                Err(invalid(&format!(
                    "sourceQueueArns may name at most {MAX_REDRIVE_ALLOW_SOURCES} queues; got {count}."
                )))
            }
            (RedrivePermission::AllowAll | RedrivePermission::DenyAll, count) if count > 0 => Err(
                invalid("sourceQueueArns is allowed only when redrivePermission is byQueue."),
            ),
            _ => Ok(policy),
        }
    }
}

impl fmt::Display for RedriveAllowPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:dlq";

    #[test]
    fn redrive_policy_accepts_numbers_and_numeric_strings() {
        for text in [
            format!(r#"{{"deadLetterTargetArn":"{ARN}","maxReceiveCount":3}}"#),
            format!(r#"{{"deadLetterTargetArn":"{ARN}","maxReceiveCount":"3"}}"#),
        ] {
            let policy: RedrivePolicy = text.parse().unwrap();
            assert_eq!(policy.max_receive_count, 3);
            assert_eq!(policy.dead_letter_target_arn, ARN);
        }
        let policy: RedrivePolicy =
            format!(r#"{{"deadLetterTargetArn":"{ARN}","maxReceiveCount":3}}"#)
                .parse()
                .unwrap();
        assert_eq!(policy.to_string().parse::<RedrivePolicy>().unwrap(), policy);
    }

    #[test]
    fn redrive_policy_rejects_bad_counts_and_shapes() {
        for text in [
            format!(r#"{{"deadLetterTargetArn":"{ARN}","maxReceiveCount":0}}"#),
            format!(r#"{{"deadLetterTargetArn":"{ARN}","maxReceiveCount":1001}}"#),
            format!(r#"{{"deadLetterTargetArn":"{ARN}"}}"#),
            r#"{"maxReceiveCount":3}"#.to_owned(),
            "not json".to_owned(),
            format!(r#"{{"deadLetterTargetArn":"{ARN}","maxReceiveCount":3,"extra":1}}"#),
        ] {
            let error = text.parse::<RedrivePolicy>().unwrap_err();
            assert!(
                error.message.contains("RedrivePolicy"),
                "{text}: {}",
                error.message
            );
        }
    }

    #[test]
    fn redrive_allow_policy_follows_its_permission() {
        let by_queue: RedriveAllowPolicy =
            r#"{"redrivePermission":"byQueue","sourceQueueArns":["arn:aws:sqs:us-east-1:000000000000:a"]}"#.parse().unwrap();
        assert!(by_queue.allows("arn:aws:sqs:us-east-1:000000000000:a"));
        assert!(!by_queue.allows("arn:aws:sqs:us-east-1:000000000000:b"));
        let deny: RedriveAllowPolicy = r#"{"redrivePermission":"denyAll"}"#.parse().unwrap();
        assert!(!deny.allows("anything"));
        assert_eq!(deny.to_string(), r#"{"redrivePermission":"denyAll"}"#);
        for bad in [
            r#"{"redrivePermission":"byQueue"}"#,
            r#"{"redrivePermission":"allowAll","sourceQueueArns":["x"]}"#,
            r#"{"redrivePermission":"sometimes"}"#,
        ] {
            assert!(bad.parse::<RedriveAllowPolicy>().is_err(), "{bad}");
        }
        let eleven: Vec<String> = (0..11).map(|index| format!("\"arn:{index}\"")).collect();
        let too_many = format!(
            r#"{{"redrivePermission":"byQueue","sourceQueueArns":[{}]}}"#,
            eleven.join(",")
        );
        assert!(too_many.parse::<RedriveAllowPolicy>().is_err());
    }
}
