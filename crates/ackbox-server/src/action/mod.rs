//! One module per SQS action: its request and response shapes (AWS spelling)
//! and a `handle` that turns the request into engine calls.
//!
//! The shapes are protocol-neutral serde types; the JSON protocol decodes them
//! directly, and the query protocol will decode into the same types.

use std::str::FromStr;

use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::queue_name::QueueName;
use ackbox_engine::Engine;
use axum::response::Response;

use crate::error::ApiError;
use crate::protocol::json::{parse, respond};

pub mod batch;
pub mod cancel_message_move_task;
pub mod change_message_visibility;
pub mod change_message_visibility_batch;
pub mod create_queue;
pub mod delete_message;
pub mod delete_message_batch;
pub mod delete_queue;
pub mod get_queue_attributes;
pub mod get_queue_url;
pub mod list_dead_letter_source_queues;
pub mod list_message_move_tasks;
pub mod list_move_task_history;
pub mod list_queue_tags;
pub mod list_queues;
pub mod nack_message;
pub mod peek_messages;
pub mod purge_queue;
pub mod receive_message;
pub mod resume_message_move_task;
pub mod send_message;
pub mod send_message_batch;
pub mod set_queue_attributes;
pub mod start_message_move_task;
pub mod summarize_queue;
pub mod tag_queue;
pub mod untag_queue;

/// What every action handler may use about the request it serves.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The engine.
    pub engine: Engine,
    /// Scheme and authority queue URLs are built on, e.g. `http://127.0.0.1:9324`.
    pub base_url: String,
    /// The caller's identity, reported as `SenderId`.
    pub sender_id: String,
    /// Who the caller is for audit records: an access key, or `anonymous`
    /// while requests are not authenticated.
    pub principal: String,
}

impl RequestContext {
    /// The queue a `QueueUrl` parameter names.
    pub fn queue_name(&self, queue_url: &str) -> Result<QueueName, SqsError> {
        let name = self.engine.realm().queue_name_from_url(queue_url)?;
        // The request's span carries the queue, so its log lines name it.
        tracing::Span::current().record("queue", name.as_str());
        Ok(name)
    }

    /// The URL clients should use for `name`.
    pub fn queue_url(&self, name: &QueueName) -> String {
        self.engine.realm().queue_url(&self.base_url, name)
    }
}

macro_rules! actions {
    ($($namespace:literal $variant:ident => $module:ident),* $(,)?) => {
        /// Every action this server answers: SQS's own, and ackbox's
        /// extensions under their own `X-Amz-Target` namespace.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Action {
            $(
                #[doc = concat!("`", $namespace, ".", stringify!($variant), "`")]
                $variant,
            )*
        }

        impl Action {
            /// The action's name, without its namespace.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($variant),)*
                }
            }

            /// Decodes `body` as this action's request, runs it and encodes the response.
            pub async fn run_json(self, context: &RequestContext, body: &[u8]) -> Result<Response, ApiError> {
                match self {
                    $(Self::$variant => {
                        let request = parse::<$module::Request>(body)?;
                        Ok(respond(&$module::handle(context, request).await?))
                    })*
                }
            }
        }

        /// Parses a whole `X-Amz-Target` value, e.g. `AmazonSQS.SendMessage`.
        impl FromStr for Action {
            type Err = SqsError;

            fn from_str(target: &str) -> Result<Self, Self::Err> {
                match target {
                    $(concat!($namespace, ".", stringify!($variant)) => Ok(Self::$variant),)*
                    other => Err(SqsError::new(
                        ErrorCode::UnknownOperation,
                        format!(
                            "X-Amz-Target {other:?} names no action of this endpoint; \
                             expected AmazonSQS.<Action> or AckBox.<Extension>."
                        ),
                    )),
                }
            }
        }
    };
}

actions! {
    "AmazonSQS" CreateQueue => create_queue,
    "AmazonSQS" GetQueueUrl => get_queue_url,
    "AmazonSQS" ListQueues => list_queues,
    "AmazonSQS" DeleteQueue => delete_queue,
    "AmazonSQS" GetQueueAttributes => get_queue_attributes,
    "AmazonSQS" SetQueueAttributes => set_queue_attributes,
    "AmazonSQS" TagQueue => tag_queue,
    "AmazonSQS" UntagQueue => untag_queue,
    "AmazonSQS" ListQueueTags => list_queue_tags,
    "AmazonSQS" ListDeadLetterSourceQueues => list_dead_letter_source_queues,
    "AmazonSQS" SendMessage => send_message,
    "AmazonSQS" SendMessageBatch => send_message_batch,
    "AmazonSQS" ReceiveMessage => receive_message,
    "AmazonSQS" DeleteMessage => delete_message,
    "AmazonSQS" DeleteMessageBatch => delete_message_batch,
    "AmazonSQS" ChangeMessageVisibility => change_message_visibility,
    "AmazonSQS" ChangeMessageVisibilityBatch => change_message_visibility_batch,
    "AmazonSQS" PurgeQueue => purge_queue,
    "AmazonSQS" StartMessageMoveTask => start_message_move_task,
    "AmazonSQS" ListMessageMoveTasks => list_message_move_tasks,
    "AmazonSQS" CancelMessageMoveTask => cancel_message_move_task,
    "AckBox" NackMessage => nack_message,
    "AckBox" PeekMessages => peek_messages,
    "AckBox" ListMoveTaskHistory => list_move_task_history,
    "AckBox" SummarizeQueue => summarize_queue,
    "AckBox" ResumeMessageMoveTask => resume_message_move_task,
}
