//! Topic names and ARNs, and the ARNs of their subscriptions.
//!
//! A topic is known to clients only by its ARN,
//! `arn:aws:sns:{region}:{account}:{name}`; a subscription's ARN is its
//! topic's followed by `:{id}`.

use std::fmt;
use std::str::FromStr;

use crate::error::SqsError;
use crate::queue_name::{FIFO_SUFFIX, Realm, is_well_formed};

/// The longest topic name, `.fifo` included (SNS's limit).
pub const MAX_TOPIC_NAME_LEN: usize = 256;

/// A validated topic name: 1–256 characters of `[A-Za-z0-9_-]`, optionally
/// ending in `.fifo` (the suffix counts toward the 256).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicName(String);

impl TopicName {
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the name carries the `.fifo` suffix.
    pub fn is_fifo(&self) -> bool {
        self.0.ends_with(FIFO_SUFFIX)
    }
}

impl FromStr for TopicName {
    type Err = SqsError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        if is_well_formed(name, MAX_TOPIC_NAME_LEN) {
            Ok(Self(name.to_owned()))
        } else {
            Err(SqsError::sns_invalid_parameter(
                "Topic Name",
                format_args!(
                    "{name:?} must be 1 to {MAX_TOPIC_NAME_LEN} alphanumeric characters, \
                     hyphens or underscores, optionally ending in .fifo."
                ),
            ))
        }
    }
}

impl fmt::Display for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Realm {
    /// The ARN of topic `name`.
    pub fn topic_arn(&self, name: &TopicName) -> String {
        format!("arn:aws:sns:{}:{}:{name}", self.region, self.account_id)
    }

    /// The topic a `parameter` (`TopicArn`, `ResourceArn`) names: `NotFound`
    /// for a well-formed ARN of another region or account, as SNS answers
    /// for a topic it does not hold; `InvalidParameter` for anything else.
    pub fn topic_name_from_arn(&self, parameter: &str, arn: &str) -> Result<TopicName, SqsError> {
        let invalid = || {
            SqsError::sns_invalid_parameter(
                parameter,
                format_args!("{arn:?} is not a topic ARN (arn:aws:sns:<region>:<account>:<name>)."),
            )
        };
        let rest = arn.strip_prefix("arn:aws:sns:").ok_or_else(invalid)?;
        let mut parts = rest.splitn(3, ':');
        let (Some(region), Some(account), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        let name: TopicName = name.parse().map_err(|_: SqsError| invalid())?;
        if region != self.region || account != self.account_id {
            return Err(SqsError::sns_not_found("Topic"));
        }
        Ok(name)
    }

    /// The topic and id a `SubscriptionArn` names (`{topic ARN}:{id}`).
    pub fn subscription_from_arn(&self, arn: &str) -> Result<(TopicName, String), SqsError> {
        let invalid = || {
            SqsError::sns_invalid_parameter(
                "SubscriptionArn",
                format_args!("{arn:?} is not a subscription ARN (<topic ARN>:<id>)."),
            )
        };
        let (topic_arn, id) = arn.rsplit_once(':').ok_or_else(invalid)?;
        if id.is_empty() {
            return Err(invalid());
        }
        let topic = self
            .topic_name_from_arn("SubscriptionArn", topic_arn)
            .map_err(|error| match error.code {
                crate::error::ErrorCode::NotFound => SqsError::sns_not_found("Subscription"),
                _ => invalid(),
            })?;
        Ok((topic, id.to_owned()))
    }

    /// The ARN of subscription `id` of topic `name`.
    pub fn subscription_arn(&self, name: &TopicName, id: &str) -> String {
        format!("{}:{id}", self.topic_arn(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn names_follow_sns_rules() {
        for good in ["orders", "a", "Orders_2-x", "orders.fifo", &"t".repeat(256)] {
            assert!(good.parse::<TopicName>().is_ok(), "{good}");
        }
        for bad in ["", ".fifo", "has space", "a.b", &"t".repeat(257), "ü"] {
            let error = bad.parse::<TopicName>().unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidParameter, "{bad}");
        }
    }

    #[test]
    fn arns_round_trip_and_other_realms_are_not_found() {
        let realm = Realm::default();
        let name: TopicName = "orders".parse().unwrap();
        let arn = realm.topic_arn(&name);
        assert_eq!(arn, "arn:aws:sns:us-east-1:000000000000:orders");
        assert_eq!(realm.topic_name_from_arn("TopicArn", &arn).unwrap(), name);
        let elsewhere = "arn:aws:sns:eu-west-1:000000000000:orders";
        assert_eq!(
            realm
                .topic_name_from_arn("TopicArn", elsewhere)
                .unwrap_err()
                .code,
            ErrorCode::NotFound
        );
        let garbled = realm.topic_name_from_arn("TopicArn", "orders").unwrap_err();
        assert_eq!(garbled.code, ErrorCode::InvalidParameter);
        assert!(garbled.message.contains("TopicArn"), "{}", garbled.message);

        let subscription = realm.subscription_arn(&name, "5b0c");
        assert_eq!(
            realm.subscription_from_arn(&subscription).unwrap(),
            (name, "5b0c".to_owned())
        );
        assert_eq!(
            realm.subscription_from_arn(&arn).unwrap_err().code,
            ErrorCode::InvalidParameter
        );
    }
}
