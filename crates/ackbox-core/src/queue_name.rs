//! Queue names, URLs and ARNs.
//!
//! A queue is known to clients by its name, its URL
//! (`http://{host}/{account}/{name}`) and its ARN
//! (`arn:aws:sqs:{region}:{account}:{name}`). Clients build URLs from their own
//! configuration, so a URL is matched by its account and name, never its host.

use std::fmt;
use std::str::FromStr;

use crate::error::{ErrorCode, SqsError};
use crate::limits::MAX_QUEUE_NAME_LEN;

/// The suffix that marks a FIFO queue name.
pub const FIFO_SUFFIX: &str = ".fifo";

/// A validated queue name: 1–80 characters of `[A-Za-z0-9_-]`, optionally
/// ending in `.fifo` (the suffix counts toward the 80).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueName(String);

impl QueueName {
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the name carries the `.fifo` suffix.
    pub fn is_fifo(&self) -> bool {
        self.0.ends_with(FIFO_SUFFIX)
    }
}

impl FromStr for QueueName {
    type Err = SqsError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        if is_well_formed(name, MAX_QUEUE_NAME_LEN) {
            Ok(Self(name.to_owned()))
        } else {
            Err(SqsError::new(
                ErrorCode::InvalidParameterValue,
                format!(
                    "Value {name} for parameter QueueName is invalid. Reason: Can only include \
                     alphanumeric characters, hyphens, or underscores. 1 to {MAX_QUEUE_NAME_LEN} in length."
                ),
            ))
        }
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for QueueName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Whether `name` is 1 to `max_len` characters of `[A-Za-z0-9_-]`,
/// optionally ending in `.fifo` (the rule of queue and topic names alike).
pub(crate) fn is_well_formed(name: &str, max_len: usize) -> bool {
    let stem = name.strip_suffix(FIFO_SUFFIX).unwrap_or(name);
    !stem.is_empty()
        && name.len() <= max_len
        && stem
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// Where queues live: the region and account that appear in ARNs and URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Realm {
    /// AWS region name, `us-east-1` by default.
    pub region: String,
    /// 12-digit account id, `000000000000` by default.
    pub account_id: String,
}

impl Default for Realm {
    fn default() -> Self {
        Self {
            region: "us-east-1".to_owned(),
            account_id: "000000000000".to_owned(),
        }
    }
}

impl Realm {
    /// The ARN of queue `name`.
    pub fn queue_arn(&self, name: &QueueName) -> String {
        format!("arn:aws:sqs:{}:{}:{name}", self.region, self.account_id)
    }

    /// The URL of queue `name` as seen through `base` (scheme and authority, no trailing slash).
    pub fn queue_url(&self, base: &str, name: &QueueName) -> String {
        format!("{base}/{}/{name}", self.account_id)
    }

    /// The queue name a `QueueUrl` parameter refers to.
    ///
    /// Accepts a full URL with any host, a path `/{account}/{name}`, or a bare
    /// name. A URL naming another account refers to no queue here.
    pub fn queue_name_from_url(&self, queue_url: &str) -> Result<QueueName, SqsError> {
        let path = match queue_url.find("://") {
            Some(scheme_end) => {
                let after_scheme = &queue_url[scheme_end + 3..];
                after_scheme
                    .find('/')
                    .map_or("", |path_start| &after_scheme[path_start..])
            }
            None => queue_url,
        };
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let mut segments = path.split('/').filter(|segment| !segment.is_empty());
        let (account, name) = match (segments.next(), segments.next(), segments.next()) {
            (Some(name), None, None) => (None, name),
            (Some(account), Some(name), None) => (Some(account), name),
            _ => return Err(SqsError::queue_does_not_exist()),
        };
        if account.is_some_and(|account| account != self.account_id) {
            return Err(SqsError::queue_does_not_exist());
        }
        name.parse()
            .map_err(|_: SqsError| SqsError::queue_does_not_exist())
    }

    /// The queue name an ARN refers to, if the ARN is an SQS queue ARN of this realm.
    pub fn queue_name_from_arn(&self, arn: &str) -> Option<QueueName> {
        let rest = arn.strip_prefix("arn:aws:sqs:")?;
        let mut parts = rest.splitn(3, ':');
        let (region, account, name) = (parts.next()?, parts.next()?, parts.next()?);
        if region != self.region || account != self.account_id {
            return None;
        }
        name.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_name_accepts_the_sqs_alphabet_and_fifo_suffix() {
        assert!("orders-1_a".parse::<QueueName>().is_ok());
        assert!("orders.fifo".parse::<QueueName>().unwrap().is_fifo());
        assert!("a".repeat(80).parse::<QueueName>().is_ok());
    }

    #[test]
    fn queue_name_rejects_bad_characters_length_and_bare_suffix() {
        for bad in ["", "has space", "dot.name", ".fifo", &"a".repeat(81), "ü"] {
            let error = bad.parse::<QueueName>().unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidParameterValue, "{bad}");
        }
        let long_fifo = format!("{}.fifo", "a".repeat(76));
        assert!(long_fifo.parse::<QueueName>().is_err());
    }

    #[test]
    fn queue_url_resolves_any_host_but_only_our_account() {
        let realm = Realm::default();
        for url in [
            "http://localhost:9324/000000000000/q1",
            "https://sqs.us-east-1.amazonaws.com/000000000000/q1",
            "/000000000000/q1",
            "q1",
        ] {
            assert_eq!(
                realm.queue_name_from_url(url).unwrap().as_str(),
                "q1",
                "{url}"
            );
        }
        let error = realm
            .queue_name_from_url("http://localhost/123456789012/q1")
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::QueueDoesNotExist);
    }

    #[test]
    fn arn_round_trips_through_the_realm() {
        let realm = Realm::default();
        let name: QueueName = "q1".parse().unwrap();
        let arn = realm.queue_arn(&name);
        assert_eq!(arn, "arn:aws:sqs:us-east-1:000000000000:q1");
        assert_eq!(realm.queue_name_from_arn(&arn), Some(name));
        assert_eq!(
            realm.queue_name_from_arn("arn:aws:sqs:eu-west-1:000000000000:q1"),
            None
        );
    }
}
