//! SNS's HTTP/S delivery policy: how often, and how far apart, a push
//! subscription's endpoint is tried again after a failed delivery, the
//! content type of the request, and how fast deliveries may go.
//!
//! A subscription's `DeliveryPolicy` (`{"healthyRetryPolicy": …,
//! "throttlePolicy": …, "requestPolicy": …}`) overrides its topic's
//! (`{"http": {"defaultHealthyRetryPolicy": …, "disableSubscriptionOverrides":
//! …}}`) unless the topic forbids it; without either, SNS's default holds:
//! three retries, 20 seconds apart.
//!
//! The retries run in four phases, as in SNS: `numNoDelayRetries` at once,
//! `numMinDelayRetries` `minDelayTarget` apart, the backoff phase rising from
//! `minDelayTarget` to `maxDelayTarget` by `backoffFunction`, and
//! `numMaxDelayRetries` `maxDelayTarget` apart. SNS jitters each delay; ackbox
//! does not, so that a schedule read from a policy is the one that runs.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest delay between two tries, and the longest a whole policy may
/// take (SNS's hard limit for HTTP/S), in seconds.
pub const MAX_POLICY_SECONDS: u32 = 3_600;
/// The most retries one policy may ask for.
pub const MAX_RETRIES: u32 = 100;
/// The content type of a push request unless a policy says otherwise.
pub const DEFAULT_CONTENT_TYPE: &str = "text/plain; charset=UTF-8";

/// How the backoff phase's delays rise from the least to the greatest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backoff {
    /// By equal steps.
    Linear,
    /// By steps that grow by an equal amount.
    Arithmetic,
    /// By a constant ratio.
    Geometric,
    /// By doubling steps.
    Exponential,
}

/// SNS's `healthyRetryPolicy`: delays in whole seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    /// The least delay between tries.
    pub min_delay_target: u32,
    /// The greatest delay between tries.
    pub max_delay_target: u32,
    /// Retries after the first try, over every phase.
    pub num_retries: u32,
    /// Retries at once, first.
    #[serde(default)]
    pub num_no_delay_retries: u32,
    /// Retries `min_delay_target` apart, next.
    #[serde(default)]
    pub num_min_delay_retries: u32,
    /// Retries `max_delay_target` apart, last.
    #[serde(default)]
    pub num_max_delay_retries: u32,
    /// How the backoff phase between them rises.
    #[serde(default = "linear")]
    pub backoff_function: Backoff,
}

fn linear() -> Backoff {
    Backoff::Linear
}

impl Default for RetryPolicy {
    /// SNS's: three retries, 20 seconds apart.
    fn default() -> Self {
        Self {
            min_delay_target: 20,
            max_delay_target: 20,
            num_retries: 3,
            num_no_delay_retries: 0,
            num_min_delay_retries: 0,
            num_max_delay_retries: 0,
            backoff_function: Backoff::Linear,
        }
    }
}

impl RetryPolicy {
    /// Tries in all: the first and every retry.
    pub fn attempts(&self) -> u32 {
        self.num_retries + 1
    }

    fn backoff_retries(&self) -> u32 {
        self.num_retries
            - self.num_no_delay_retries
            - self.num_min_delay_retries
            - self.num_max_delay_retries
    }

    /// The wait before retry `retry` (1 for the first retry), or `None`
    /// when the policy has no such retry.
    pub fn delay_before(&self, retry: u32) -> Option<Duration> {
        if retry == 0 || retry > self.num_retries {
            return None;
        }
        let (min, max) = (
            f64::from(self.min_delay_target),
            f64::from(self.max_delay_target),
        );
        let no_delay = self.num_no_delay_retries;
        let min_delay = no_delay + self.num_min_delay_retries;
        let backoff = min_delay + self.backoff_retries();
        let seconds = if retry <= no_delay {
            0.0
        } else if retry <= min_delay {
            min
        } else if retry <= backoff {
            let step = f64::from(retry - min_delay);
            let steps = f64::from(self.backoff_retries());
            let rise = match self.backoff_function {
                Backoff::Linear => step / steps,
                Backoff::Arithmetic => (step * (step + 1.0)) / (steps * (steps + 1.0)),
                Backoff::Geometric => {
                    return Some(Duration::from_secs_f64(
                        (min * (max / min).powf(step / steps)).round(),
                    ));
                }
                Backoff::Exponential => (2f64.powf(step) - 1.0) / (2f64.powf(steps) - 1.0),
            };
            min + (max - min) * rise
        } else {
            max
        };
        Some(Duration::from_secs_f64(seconds.round()))
    }

    /// Every wait, retry by retry.
    pub fn schedule(&self) -> Vec<Duration> {
        (1..=self.num_retries)
            .filter_map(|retry| self.delay_before(retry))
            .collect()
    }

    /// SNS's rules: delays 1 to 3,600 seconds, least not above greatest, at
    /// most 100 retries, phases that fit in them, at most an hour in all.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_delay_target < 1 || self.min_delay_target > self.max_delay_target {
            return Err(format!(
                "minDelayTarget is {}; it must be at least 1 and at most maxDelayTarget ({}).",
                self.min_delay_target, self.max_delay_target
            ));
        }
        if self.max_delay_target > MAX_POLICY_SECONDS {
            return Err(format!(
                "maxDelayTarget is {}; it must be at most {MAX_POLICY_SECONDS} seconds.",
                self.max_delay_target
            ));
        }
        if self.num_retries > MAX_RETRIES {
            return Err(format!(
                "numRetries is {}; it must be at most {MAX_RETRIES}.",
                self.num_retries
            ));
        }
        let phases = u64::from(self.num_no_delay_retries)
            + u64::from(self.num_min_delay_retries)
            + u64::from(self.num_max_delay_retries);
        if phases > u64::from(self.num_retries) {
            return Err(format!(
                "numNoDelayRetries + numMinDelayRetries + numMaxDelayRetries is {phases}; it must \
                 be at most numRetries ({}).",
                self.num_retries
            ));
        }
        let total: u64 = self.schedule().iter().map(Duration::as_secs).sum();
        if total > u64::from(MAX_POLICY_SECONDS) {
            return Err(format!(
                "the retries would take {total} seconds; a policy may take at most \
                 {MAX_POLICY_SECONDS}."
            ));
        }
        Ok(())
    }
}

/// SNS's `throttlePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThrottlePolicy {
    /// Deliveries per second to the endpoint, at most.
    pub max_receives_per_second: u32,
}

/// SNS's `requestPolicy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestPolicy {
    /// The request's `Content-Type`.
    pub header_content_type: String,
}

/// A subscription's `DeliveryPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscriptionDeliveryPolicy {
    /// Retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_retry_policy: Option<RetryPolicy>,
    /// Pace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_policy: Option<ThrottlePolicy>,
    /// Content type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_policy: Option<RequestPolicy>,
}

/// The `http` member of a topic's `DeliveryPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicHttpPolicy {
    /// Retries of subscriptions that set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_healthy_retry_policy: Option<RetryPolicy>,
    /// Pace of subscriptions that set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_throttle_policy: Option<ThrottlePolicy>,
    /// Content type of subscriptions that set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_request_policy: Option<RequestPolicy>,
    /// Subscriptions' own policies are ignored.
    #[serde(default)]
    pub disable_subscription_overrides: bool,
}

/// What a delivery to one endpoint follows, its subscription's and its
/// topic's policies merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectivePolicy {
    /// Retries.
    pub retry: RetryPolicy,
    /// Deliveries per second, at most, if limited.
    pub max_receives_per_second: Option<u32>,
    /// The request's `Content-Type`.
    pub content_type: String,
}

impl EffectivePolicy {
    /// The policy of a subscription with `subscription`'s `DeliveryPolicy`
    /// on a topic with `topic`'s.
    pub fn merge(
        topic: Option<&TopicHttpPolicy>,
        subscription: Option<&SubscriptionDeliveryPolicy>,
    ) -> Self {
        let topic = topic.cloned().unwrap_or_default();
        let subscription = subscription
            .filter(|_| !topic.disable_subscription_overrides)
            .cloned()
            .unwrap_or_default();
        Self {
            retry: subscription
                .healthy_retry_policy
                .or(topic.default_healthy_retry_policy)
                .unwrap_or_default(),
            max_receives_per_second: subscription
                .throttle_policy
                .or(topic.default_throttle_policy)
                .map(|throttle| throttle.max_receives_per_second),
            content_type: subscription
                .request_policy
                .or(topic.default_request_policy)
                .map_or_else(
                    || DEFAULT_CONTENT_TYPE.to_owned(),
                    |request| request.header_content_type,
                ),
        }
    }
}

fn check_retry(policy: Option<&RetryPolicy>) -> Result<(), String> {
    policy.map_or(Ok(()), RetryPolicy::validate)
}

fn check_throttle(policy: Option<&ThrottlePolicy>) -> Result<(), String> {
    match policy {
        Some(throttle) if throttle.max_receives_per_second == 0 => {
            Err("maxReceivesPerSecond must be at least 1.".to_owned())
        }
        _ => Ok(()),
    }
}

/// Parses and checks a subscription's `DeliveryPolicy`.
pub fn parse_subscription_policy(text: &str) -> Result<SubscriptionDeliveryPolicy, String> {
    let not_a_policy =
        |reason: &dyn std::fmt::Display| format!("{text:?} is not a delivery policy: {reason}.");
    let document: Value = serde_json::from_str(text).map_err(|error| not_a_policy(&error))?;
    if !document.is_object() {
        return Err(not_a_policy(&"it must be a JSON object"));
    }
    let policy: SubscriptionDeliveryPolicy =
        serde_json::from_value(document).map_err(|error| not_a_policy(&error))?;
    check_retry(policy.healthy_retry_policy.as_ref())?;
    check_throttle(policy.throttle_policy.as_ref())?;
    Ok(policy)
}

/// Parses and checks the `http` member of a topic's `DeliveryPolicy`
/// (`None` when it has none: the policy is for other protocols).
pub fn parse_topic_policy(text: &str) -> Result<Option<TopicHttpPolicy>, String> {
    let document: Value = serde_json::from_str(text)
        .map_err(|error| format!("{text:?} is not a JSON object: {error}."))?;
    let Some(http) = document.get("http") else {
        return Ok(None);
    };
    if !http.is_object() {
        return Err("its http member must be a JSON object.".to_owned());
    }
    let policy: TopicHttpPolicy = serde_json::from_value(http.clone())
        .map_err(|error| format!("its http member is not a delivery policy: {error}."))?;
    check_retry(policy.default_healthy_retry_policy.as_ref())?;
    check_throttle(policy.default_throttle_policy.as_ref())?;
    Ok(Some(policy))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_secs).collect()
    }

    #[test]
    fn the_default_is_three_retries_twenty_seconds_apart() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.attempts(), 4);
        assert_eq!(policy.schedule(), secs(&[20, 20, 20]));
        assert_eq!(policy.delay_before(4), None);
    }

    #[test]
    fn the_phases_run_in_snss_order() {
        let policy = RetryPolicy {
            min_delay_target: 1,
            max_delay_target: 16,
            num_retries: 9,
            num_no_delay_retries: 2,
            num_min_delay_retries: 2,
            num_max_delay_retries: 1,
            backoff_function: Backoff::Linear,
        };
        assert_eq!(policy.schedule(), secs(&[0, 0, 1, 1, 5, 9, 12, 16, 16]));
    }

    #[test]
    fn every_backoff_rises_from_the_least_to_the_greatest() {
        for backoff in [
            Backoff::Linear,
            Backoff::Arithmetic,
            Backoff::Geometric,
            Backoff::Exponential,
        ] {
            let policy = RetryPolicy {
                min_delay_target: 2,
                max_delay_target: 64,
                num_retries: 6,
                backoff_function: backoff,
                ..RetryPolicy::default()
            };
            let schedule = policy.schedule();
            assert_eq!(
                schedule.last(),
                Some(&Duration::from_secs(64)),
                "{backoff:?}"
            );
            assert!(
                schedule.windows(2).all(|pair| pair[0] <= pair[1]),
                "{backoff:?}: {schedule:?}"
            );
            assert!(schedule[0] >= Duration::from_secs(2), "{backoff:?}");
        }
    }

    #[test]
    fn a_policy_sns_would_refuse_is_refused_naming_the_field() {
        let refused = |json: &str| parse_subscription_policy(json).unwrap_err();
        assert!(
            refused(
                r#"{"healthyRetryPolicy":{"minDelayTarget":0,"maxDelayTarget":5,"numRetries":1}}"#
            )
            .contains("minDelayTarget")
        );
        assert!(refused(r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":4000,"numRetries":1}}"#).contains("maxDelayTarget"));
        assert!(
            refused(
                r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":5,"numRetries":101}}"#
            )
            .contains("numRetries")
        );
        assert!(refused(r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":5,"numRetries":1,"numNoDelayRetries":2}}"#).contains("numNoDelayRetries"));
        assert!(refused(r#"{"healthyRetryPolicy":{"minDelayTarget":600,"maxDelayTarget":600,"numRetries":7}}"#).contains("4200 seconds"));
        assert!(
            refused(r#"{"throttlePolicy":{"maxReceivesPerSecond":0}}"#)
                .contains("maxReceivesPerSecond")
        );
        assert!(refused(r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":5,"numRetries":1,"backoffFunction":"wobbly"}}"#).contains("wobbly"));
        assert!(refused("[]").contains("not a delivery policy"));
    }

    #[test]
    fn a_subscriptions_policy_overrides_its_topics_unless_forbidden() {
        let topic = parse_topic_policy(
            r#"{"http":{"defaultHealthyRetryPolicy":{"minDelayTarget":5,"maxDelayTarget":5,"numRetries":1},"defaultRequestPolicy":{"headerContentType":"application/json"}}}"#,
        )
        .unwrap()
        .unwrap();
        let subscription = parse_subscription_policy(
            r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":1,"numRetries":7}}"#,
        )
        .unwrap();
        let merged = EffectivePolicy::merge(Some(&topic), Some(&subscription));
        assert_eq!(merged.retry.num_retries, 7);
        assert_eq!(merged.content_type, "application/json");
        let forbidding = TopicHttpPolicy {
            disable_subscription_overrides: true,
            ..topic
        };
        assert_eq!(
            EffectivePolicy::merge(Some(&forbidding), Some(&subscription))
                .retry
                .num_retries,
            1
        );
        assert_eq!(
            EffectivePolicy::merge(None, None),
            EffectivePolicy {
                retry: RetryPolicy::default(),
                max_receives_per_second: None,
                content_type: DEFAULT_CONTENT_TYPE.to_owned()
            }
        );
        assert_eq!(parse_topic_policy(r#"{"email":{}}"#), Ok(None));
    }
}
