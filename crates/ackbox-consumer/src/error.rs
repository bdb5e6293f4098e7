//! What can go wrong: in a handler (the user's verdict on one message), in a
//! transport or an inbox (infrastructure), and at start (configuration).

use std::time::Duration;

/// A handler's verdict on a message it could not process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Retrying later may help (a dependency is down, a lock timed out):
    /// the message comes back after a backoff, up to the attempt limit.
    #[error("transient failure ({class}): {message}")]
    Transient {
        /// A stable name for the kind of failure, such as an error type.
        class: String,
        /// What went wrong.
        message: String,
    },
    /// Retrying cannot help (the payload is malformed, a rule forbids it):
    /// the message goes to the dead-letter queue at once, with the reason.
    #[error("permanent failure ({class}): {message}")]
    Permanent {
        /// A stable name for the kind of failure.
        class: String,
        /// What went wrong.
        message: String,
    },
}

impl HandlerError {
    /// A transient failure of class `class`.
    pub fn transient(class: impl Into<String>, message: impl ToString) -> Self {
        Self::Transient {
            class: class.into(),
            message: message.to_string(),
        }
    }

    /// A permanent failure of class `class`.
    pub fn permanent(class: impl Into<String>, message: impl ToString) -> Self {
        Self::Permanent {
            class: class.into(),
            message: message.to_string(),
        }
    }

    /// The failure as the broker records it.
    pub fn failure(&self) -> Failure {
        let (Self::Transient { class, message } | Self::Permanent { class, message }) = self;
        Failure {
            class: class.clone(),
            message: message.clone(),
        }
    }
}

/// A database error inside a handler is transient: the transaction rolled
/// back, and a deadlock or a lost connection may well pass.
impl From<sqlx::Error> for HandlerError {
    fn from(error: sqlx::Error) -> Self {
        Self::transient("Database", error)
    }
}

/// Why a message failed, as recorded with the broker (`AckBox.NackMessage`)
/// or in the dead-letter copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A stable name for the kind of failure.
    pub class: String,
    /// What went wrong.
    pub message: String,
}

/// A broker call failed.
#[derive(Debug, thiserror::Error)]
#[error("{operation} failed: {detail}")]
pub struct TransportError {
    /// What the transport was doing.
    pub operation: &'static str,
    /// What the broker or the network said.
    pub detail: String,
}

impl TransportError {
    pub(crate) fn new(operation: &'static str, detail: impl std::fmt::Display) -> Self {
        Self {
            operation,
            detail: detail.to_string(),
        }
    }
}

/// The consumer could not start or had to stop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// A required builder setting is missing.
    #[error("the consumer needs {0}; set it on the builder")]
    Missing(&'static str),
    /// The inbox would forget messages the broker can still deliver again.
    #[error(
        "inbox TTL {configured:?} is shorter than the {required:?} in which the queue can still \
         deliver a message again ({explanation}); a redelivery after the record expired would \
         apply its effect twice"
    )]
    InboxTtlTooShort {
        /// The TTL asked for.
        configured: Duration,
        /// The shortest safe TTL.
        required: Duration,
        /// How `required` was computed.
        explanation: String,
    },
    /// Group order was required over a transport whose deliveries do not
    /// say which group they belong to.
    #[error(
        "group order is required, but {transport} does not carry message groups, so the \
         consumer cannot tell which messages must wait for which; use a transport that does \
         (SqsTransport, or RabbitMQ and NATS with the group header) or GroupOrder::Off"
    )]
    GroupsNotCarried {
        /// The transport's type.
        transport: &'static str,
    },
    /// The queue has no dead-letter queue, and the consumer was not told to
    /// run without one.
    #[error(
        "queue {queue} has no dead-letter queue: a message that fails for good would be retried \
         forever; give the queue a RedrivePolicy, or build the consumer with \
         without_dead_letter_queue() to accept that"
    )]
    NoDeadLetterQueue {
        /// The queue.
        queue: String,
    },
    /// The broker could not be asked for the queue's settings.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The inbox table could not be created or cleaned.
    #[error("inbox: {0}")]
    Inbox(#[from] sqlx::Error),
}
