//! The actions this server answers, by name: SQS's own and ackbox's
//! extensions, each with its `X-Amz-Target` and the permission it needs.
//! What each one does is `action/`'s; the wire protocols need only the
//! names, so they depend on this module and not on the handlers.

use std::str::FromStr;

use ackbox_core::error::{ErrorCode, SqsError};

/// Calls `$callback!` with every action: its namespace, its name, the
/// module of `action/` that handles it and, for batches, the permission of
/// their single form. The one list of actions.
macro_rules! every_action {
    ($callback:ident) => {
        $callback! {
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
            "AmazonSQS" SendMessageBatch => send_message_batch as SendMessage,
            "AmazonSQS" ReceiveMessage => receive_message,
            "AmazonSQS" DeleteMessage => delete_message,
            "AmazonSQS" DeleteMessageBatch => delete_message_batch as DeleteMessage,
            "AmazonSQS" ChangeMessageVisibility => change_message_visibility,
            "AmazonSQS" ChangeMessageVisibilityBatch => change_message_visibility_batch as ChangeMessageVisibility,
            "AmazonSQS" PurgeQueue => purge_queue,
            "AmazonSQS" StartMessageMoveTask => start_message_move_task,
            "AmazonSQS" ListMessageMoveTasks => list_message_move_tasks,
            "AmazonSQS" CancelMessageMoveTask => cancel_message_move_task,
            "AckBox" NackMessage => nack_message,
            "AckBox" PeekMessages => peek_messages,
            "AckBox" ListMoveTaskHistory => list_move_task_history,
            "AckBox" SummarizeQueue => summarize_queue,
            "AckBox" ResumeMessageMoveTask => resume_message_move_task,
            "AckBox" StartReplay => start_replay,
            "AckBox" ListReplays => list_replays,
            "AckBox" CancelReplay => cancel_replay,
            "SNS_20100331" CreateTopic => create_topic,
            "SNS_20100331" DeleteTopic => delete_topic,
            "SNS_20100331" ListTopics => list_topics,
            "SNS_20100331" GetTopicAttributes => get_topic_attributes,
            "SNS_20100331" SetTopicAttributes => set_topic_attributes,
            "SNS_20100331" Subscribe => subscribe,
            "SNS_20100331" ConfirmSubscription => confirm_subscription,
            "SNS_20100331" Unsubscribe => unsubscribe,
            "SNS_20100331" ListSubscriptions => list_subscriptions,
            "SNS_20100331" ListSubscriptionsByTopic => list_subscriptions_by_topic,
            "SNS_20100331" GetSubscriptionAttributes => get_subscription_attributes,
            "SNS_20100331" SetSubscriptionAttributes => set_subscription_attributes,
            "SNS_20100331" Publish => publish,
            "SNS_20100331" PublishBatch => publish_batch as Publish,
            "SNS_20100331" TagResource => tag_resource,
            "SNS_20100331" UntagResource => untag_resource,
            "SNS_20100331" ListTagsForResource => list_tags_for_resource,
        }
    };
}
pub(crate) use every_action;

macro_rules! define_actions {
    ($($namespace:literal $variant:ident => $module:ident $(as $permission:ident)?),* $(,)?) => {
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
            /// Every action, in the order of the list.
            pub const ALL: &'static [Action] = &[$(Self::$variant,)*];

            /// The action's name, without its namespace.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($variant),)*
                }
            }

            /// The whole `X-Amz-Target` value, e.g. `AmazonSQS.SendMessage`.
            pub fn target(self) -> &'static str {
                match self {
                    $(Self::$variant => concat!($namespace, ".", stringify!($variant)),)*
                }
            }

            /// The service whose API the action belongs to.
            pub fn service(self) -> Service {
                match self {
                    $(Self::$variant => Service::of_namespace($namespace),)*
                }
            }

            /// The IAM-style permission the action needs: its own name, but
            /// for batches, which need the permission of their single form.
            pub fn permission(self) -> &'static str {
                match self {
                    $(Self::$variant => define_actions!(@permission $variant $($permission)?),)*
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
    (@permission $variant:ident) => { stringify!($variant) };
    (@permission $variant:ident $permission:ident) => { stringify!($permission) };
}

every_action!(define_actions);

/// The AWS service whose API an action belongs to: its errors and answers
/// take that service's XML namespace and codes, and its IAM-style resources
/// are that service's ARNs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// SQS, with ackbox's extensions.
    Sqs,
    /// SNS.
    Sns,
}

impl Service {
    const fn of_namespace(namespace: &str) -> Self {
        match namespace.as_bytes() {
            b"SNS_20100331" => Self::Sns,
            _ => Self::Sqs,
        }
    }

    /// The service's name in ARNs, IAM actions and credential scopes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqs => "sqs",
            Self::Sns => "sns",
        }
    }
}

impl Action {
    /// Every distinct permission name, sorted: what a credentials file's
    /// `allow_actions` may name.
    pub fn permissions() -> Vec<&'static str> {
        let mut permissions: Vec<&'static str> =
            Self::ALL.iter().map(|action| action.permission()).collect();
        permissions.sort_unstable();
        permissions.dedup();
        permissions
    }
}
