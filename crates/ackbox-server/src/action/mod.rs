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
pub mod change_message_visibility;
pub mod change_message_visibility_batch;
pub mod create_queue;
pub mod delete_message;
pub mod delete_message_batch;
pub mod delete_queue;
pub mod get_queue_attributes;
pub mod get_queue_url;
pub mod list_dead_letter_source_queues;
pub mod list_queue_tags;
pub mod list_queues;
pub mod purge_queue;
pub mod receive_message;
pub mod send_message;
pub mod send_message_batch;
pub mod set_queue_attributes;
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
}

impl RequestContext {
    /// The queue a `QueueUrl` parameter names.
    pub fn queue_name(&self, queue_url: &str) -> Result<QueueName, SqsError> {
        self.engine.realm().queue_name_from_url(queue_url)
    }

    /// The URL clients should use for `name`.
    pub fn queue_url(&self, name: &QueueName) -> String {
        self.engine.realm().queue_url(&self.base_url, name)
    }
}

macro_rules! actions {
    ($($variant:ident => $module:ident),* $(,)?) => {
        /// Every SQS action this server answers.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Action {
            $(
                #[doc = concat!("`", stringify!($variant), "`")]
                $variant,
            )*
        }

        impl Action {
            /// The action's AWS name.
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

        impl FromStr for Action {
            type Err = SqsError;

            fn from_str(name: &str) -> Result<Self, Self::Err> {
                match name {
                    $(stringify!($variant) => Ok(Self::$variant),)*
                    other => Err(SqsError::new(
                        ErrorCode::UnknownOperation,
                        format!("The action {other} is not valid for this endpoint."),
                    )),
                }
            }
        }
    };
}

actions! {
    CreateQueue => create_queue,
    GetQueueUrl => get_queue_url,
    ListQueues => list_queues,
    DeleteQueue => delete_queue,
    GetQueueAttributes => get_queue_attributes,
    SetQueueAttributes => set_queue_attributes,
    TagQueue => tag_queue,
    UntagQueue => untag_queue,
    ListQueueTags => list_queue_tags,
    ListDeadLetterSourceQueues => list_dead_letter_source_queues,
    SendMessage => send_message,
    SendMessageBatch => send_message_batch,
    ReceiveMessage => receive_message,
    DeleteMessage => delete_message,
    DeleteMessageBatch => delete_message_batch,
    ChangeMessageVisibility => change_message_visibility,
    ChangeMessageVisibilityBatch => change_message_visibility_batch,
    PurgeQueue => purge_queue,
}
