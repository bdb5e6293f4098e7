//! Rules shared by every batch action: entry count, entry ids, and the shape
//! of per-entry results.

use std::collections::HashSet;

use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::limits::{MAX_BATCH_ENTRIES, MAX_BATCH_ENTRY_ID_LEN};
use serde::Serialize;

/// A successful entry that carries nothing but its id.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResultEntry {
    /// The entry id from the request.
    pub id: String,
}

/// A failed batch entry.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ErrorEntry {
    /// The entry id from the request.
    pub id: String,
    /// Whether the caller is at fault.
    pub sender_fault: bool,
    /// The error code (query-protocol spelling, as SQS reports batch codes).
    pub code: String,
    /// What went wrong.
    pub message: String,
}

impl ErrorEntry {
    /// The entry `id` failed with `error`.
    pub fn new(id: String, error: &SqsError) -> Self {
        Self {
            id,
            sender_fault: error.code.is_sender_fault(),
            code: error.code.query_code().to_owned(),
            message: error.message.clone(),
        }
    }
}

/// Splits per-entry outcomes into SQS's `Successful` and `Failed` lists,
/// keeping request order.
pub fn split_outcomes(
    ids: impl IntoIterator<Item = String>,
    outcomes: Vec<Result<(), SqsError>>,
) -> (Vec<ResultEntry>, Vec<ErrorEntry>) {
    let mut successful = Vec::new();
    let mut failed = Vec::new();
    for (id, outcome) in ids.into_iter().zip(outcomes) {
        match outcome {
            Ok(()) => successful.push(ResultEntry { id }),
            Err(error) => failed.push(ErrorEntry::new(id, &error)),
        }
    }
    (successful, failed)
}

/// Checks the entry count and the entry ids of a batch.
///
/// `entry_shape` is the request entry's shape name, used in the empty-batch message.
pub fn validate_entries<'a>(
    entry_shape: &str,
    ids: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), SqsError> {
    let count = ids.len();
    if count == 0 {
        return Err(SqsError::new(
            ErrorCode::EmptyBatchRequest,
            format!("There should be at least one {entry_shape} in the request."),
        ));
    }
    if count > MAX_BATCH_ENTRIES {
        return Err(SqsError::new(
            ErrorCode::TooManyEntriesInBatchRequest,
            format!(
                "Maximum number of entries per request are {MAX_BATCH_ENTRIES}. You have sent {count}."
            ),
        ));
    }
    let mut seen = HashSet::with_capacity(count);
    for id in ids {
        let well_formed = !id.is_empty()
            && id.len() <= MAX_BATCH_ENTRY_ID_LEN
            && id
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
        if !well_formed {
            return Err(SqsError::new(
                ErrorCode::InvalidBatchEntryId,
                format!(
                    "A batch entry id can only contain alphanumeric characters, hyphens and underscores. \
                     It can be at most {MAX_BATCH_ENTRY_ID_LEN} letters long."
                ),
            ));
        }
        if !seen.insert(id) {
            return Err(SqsError::new(
                ErrorCode::BatchEntryIdsNotDistinct,
                format!("Id {id} repeated."),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(ids: &[&str]) -> Result<(), SqsError> {
        validate_entries("Entry", ids.iter().copied())
    }

    #[test]
    fn batch_rules_follow_sqs() {
        assert_eq!(check(&[]).unwrap_err().code, ErrorCode::EmptyBatchRequest);
        let eleven: Vec<String> = (0..11).map(|index| format!("e{index}")).collect();
        let eleven: Vec<&str> = eleven.iter().map(String::as_str).collect();
        let error = check(&eleven).unwrap_err();
        assert_eq!(error.code, ErrorCode::TooManyEntriesInBatchRequest);
        assert_eq!(
            error.message,
            "Maximum number of entries per request are 10. You have sent 11."
        );
        assert_eq!(
            check(&["a", "a"]).unwrap_err().code,
            ErrorCode::BatchEntryIdsNotDistinct
        );
        assert_eq!(
            check(&["a b"]).unwrap_err().code,
            ErrorCode::InvalidBatchEntryId
        );
        assert_eq!(
            check(&[&"x".repeat(81)]).unwrap_err().code,
            ErrorCode::InvalidBatchEntryId
        );
        assert!(check(&["ok-1", "ok_2"]).is_ok());
    }
}
