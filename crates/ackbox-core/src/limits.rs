//! The numeric limits of Amazon SQS, in one place.
//!
//! Every validation refers to these constants so that a limit changes in one
//! line and its error message follows.

/// Largest message (body plus attribute names, types and values), in bytes.
pub const MAX_MESSAGE_SIZE: u32 = 1_048_576;
/// Smallest value of the `MaximumMessageSize` attribute.
pub const MIN_MESSAGE_SIZE_ATTRIBUTE: u32 = 1_024;
/// Largest batch payload (sum of entry sizes), in bytes.
pub const MAX_BATCH_PAYLOAD: usize = 1_048_576;
/// Most entries in one batch request.
pub const MAX_BATCH_ENTRIES: usize = 10;
/// Longest batch entry `Id`.
pub const MAX_BATCH_ENTRY_ID_LEN: usize = 80;
/// Most messages one ReceiveMessage returns.
pub const MAX_RECEIVE_MESSAGES: i32 = 10;
/// Longest long-poll wait, in seconds.
pub const MAX_WAIT_TIME_SECONDS: i32 = 20;
/// Longest delivery delay, in seconds.
pub const MAX_DELAY_SECONDS: i32 = 900;
/// Shortest retention period, in seconds.
pub const MIN_RETENTION_SECONDS: i64 = 60;
/// Longest retention period (14 days), in seconds.
pub const MAX_RETENTION_SECONDS: i64 = 1_209_600;
/// Default retention period (4 days), in seconds.
pub const DEFAULT_RETENTION_SECONDS: i64 = 345_600;
/// Longest visibility timeout (12 hours), in seconds.
pub const MAX_VISIBILITY_TIMEOUT_SECONDS: i64 = 43_200;
/// Default visibility timeout, in seconds.
pub const DEFAULT_VISIBILITY_TIMEOUT_SECONDS: i64 = 30;
/// Most message attributes on one message.
pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;
/// Longest message attribute name.
pub const MAX_MESSAGE_ATTRIBUTE_NAME_LEN: usize = 256;
/// Longest message attribute data type.
pub const MAX_MESSAGE_ATTRIBUTE_TYPE_LEN: usize = 256;
/// Longest queue name, `.fifo` suffix included.
pub const MAX_QUEUE_NAME_LEN: usize = 80;
/// Most queues one ListQueues page returns.
pub const MAX_LIST_QUEUES_RESULTS: i32 = 1_000;
/// Seconds after DeleteQueue before the name may be created again.
pub const QUEUE_RECREATE_COOLDOWN_SECONDS: i64 = 60;
/// Seconds between two PurgeQueue calls on one queue.
pub const PURGE_COOLDOWN_SECONDS: i64 = 60;
/// Most tags on one queue.
pub const MAX_QUEUE_TAGS: usize = 50;
/// Longest tag key.
pub const MAX_TAG_KEY_LEN: usize = 128;
/// Longest tag value.
pub const MAX_TAG_VALUE_LEN: usize = 256;
/// Largest `maxReceiveCount` of a redrive policy.
pub const MAX_MAX_RECEIVE_COUNT: u32 = 1_000;
/// Most source queues a `byQueue` redrive allow policy may name.
pub const MAX_REDRIVE_ALLOW_SOURCES: usize = 10;
/// Fastest message move task, messages per second.
pub const MAX_MOVE_TASK_RATE: i32 = 500;
/// Most move tasks one ListMessageMoveTasks call returns.
pub const MAX_LIST_MOVE_TASKS: i32 = 10;
/// How long a FIFO queue remembers a deduplication id, seconds.
pub const FIFO_DEDUPLICATION_WINDOW_SECONDS: i64 = 300;
/// How long a FIFO `ReceiveRequestAttemptId` can be retried, seconds.
pub const RECEIVE_ATTEMPT_WINDOW_SECONDS: i64 = 300;
/// Longest `MessageGroupId`, `MessageDeduplicationId` or `ReceiveRequestAttemptId`.
pub const MAX_FIFO_TOKEN_LEN: usize = 128;
