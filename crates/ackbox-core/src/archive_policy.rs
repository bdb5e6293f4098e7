//! An archive policy, `{"MessageRetentionPeriod":"<days>"}`: how long an
//! archive keeps what a topic published (SNS's `ArchivePolicy`) or a queue
//! was sent (ackbox's `AckBoxArchivePolicy`). An archive is a queue, and a
//! queue keeps a message 14 days at most, so that is an archive's longest
//! retention here (SNS allows 365).

use crate::limits::MAX_RETENTION_SECONDS;

/// An archive's longest retention, in days: a queue's longest.
pub const MAX_ARCHIVE_RETENTION_DAYS: i64 = MAX_RETENTION_SECONDS / 86_400;

/// The retention a policy asks for, in days; `None` when it turns
/// archiving off (empty, or `{}`); otherwise why it is refused.
pub fn parse(value: &str) -> Result<Option<i64>, String> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    let document: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(value).map_err(|_| format!("{value:?} is not a JSON object."))?;
    if document.is_empty() {
        return Ok(None);
    }
    if let Some(other) = document.keys().find(|key| *key != "MessageRetentionPeriod") {
        return Err(format!(
            "{other:?} is not a member of an archive policy; MessageRetentionPeriod is its only one."
        ));
    }
    let period = &document["MessageRetentionPeriod"];
    let days = period
        .as_i64()
        .or_else(|| period.as_str().and_then(|days| days.parse().ok()));
    match days {
        Some(days) if (1..=MAX_ARCHIVE_RETENTION_DAYS).contains(&days) => Ok(Some(days)),
        _ => Err(format!(
            "MessageRetentionPeriod {period} must be a whole number of days from 1 to \
             {MAX_ARCHIVE_RETENTION_DAYS} (an ackbox archive is a queue, which keeps a message \
             {MAX_ARCHIVE_RETENTION_DAYS} days at most)."
        )),
    }
}

/// The policy keeping an archive `days` days, as it is stored and read back.
pub fn render(days: i64) -> String {
    format!(r#"{{"MessageRetentionPeriod":"{days}"}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_names_its_retention_in_days_within_a_queues_bound() {
        assert_eq!(parse(r#"{"MessageRetentionPeriod":"7"}"#), Ok(Some(7)));
        assert_eq!(parse(r#"{"MessageRetentionPeriod":14}"#), Ok(Some(14)));
        assert_eq!(parse(&render(3)), Ok(Some(3)));
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("{}"), Ok(None));
        for (policy, names) in [
            (r#"{"MessageRetentionPeriod":"365"}"#, "from 1 to 14"),
            (r#"{"MessageRetentionPeriod":"0"}"#, "from 1 to 14"),
            (r#"{"MessageRetentionPeriod":"a week"}"#, "\"a week\""),
            (r#"{"Retention":"7"}"#, "\"Retention\""),
            ("7", "not a JSON object"),
        ] {
            let reason = parse(policy).unwrap_err();
            assert!(reason.contains(names), "{policy}: {reason}");
        }
    }
}
