//! An archive policy, `{"MessageRetentionPeriod":"<days>"}`: how long an
//! archive keeps what a topic published (SNS's `ArchivePolicy`) or a queue
//! was sent (ackbox's `AckBoxArchivePolicy`), from 1 to 365 days as SNS
//! allows. An archive is a queue that the engine lets keep a message that
//! long, where any other queue keeps one 14 days at most.

/// An archive's shortest retention, in days.
pub const MIN_ARCHIVE_RETENTION_DAYS: i64 = 1;
/// An archive's longest retention, in days: SNS's.
pub const MAX_ARCHIVE_RETENTION_DAYS: i64 = 365;

/// A retention of `days` days, in seconds.
pub const fn retention_seconds(days: i64) -> i64 {
    days * 86_400
}

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
        Some(days) if (MIN_ARCHIVE_RETENTION_DAYS..=MAX_ARCHIVE_RETENTION_DAYS).contains(&days) => {
            Ok(Some(days))
        }
        _ => Err(format!(
            "MessageRetentionPeriod {period} must be a whole number of days from \
             {MIN_ARCHIVE_RETENTION_DAYS} to {MAX_ARCHIVE_RETENTION_DAYS}."
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
    fn a_policy_names_its_retention_in_days_within_snss_bound() {
        assert_eq!(parse(r#"{"MessageRetentionPeriod":"7"}"#), Ok(Some(7)));
        assert_eq!(parse(r#"{"MessageRetentionPeriod":14}"#), Ok(Some(14)));
        assert_eq!(parse(r#"{"MessageRetentionPeriod":"365"}"#), Ok(Some(365)));
        assert_eq!(parse(&render(3)), Ok(Some(3)));
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("{}"), Ok(None));
        for (policy, names) in [
            (r#"{"MessageRetentionPeriod":"366"}"#, "from 1 to 365"),
            (r#"{"MessageRetentionPeriod":"0"}"#, "from 1 to 365"),
            (r#"{"MessageRetentionPeriod":"a week"}"#, "\"a week\""),
            (r#"{"Retention":"7"}"#, "\"Retention\""),
            ("7", "not a JSON object"),
        ] {
            let reason = parse(policy).unwrap_err();
            assert!(reason.contains(names), "{policy}: {reason}");
        }
    }
}
