//! One module per SQS action: its request and response shapes (AWS spelling)
//! and a `handle` that turns the request into engine calls.
//!
//! The shapes are protocol-neutral serde types; the JSON protocol decodes them
//! directly, and the query protocol decodes its forms into the same types.
//!
//! Authorization happens here, in one place, before any handler runs: every
//! request type names the queues it touches ([`Resources`]), and
//! [`RequestContext::authorize`] checks the caller's permission for the
//! action on each of them. A request type that does not say is a compile
//! error, so no action can be added without deciding what it touches.

use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::queue_name::QueueName;
use ackbox_core::topic_name::TopicName;
use ackbox_engine::Engine;
use axum::response::Response;

use crate::auth::Caller;
use crate::error::ApiError;
pub use crate::operation::{Action, Service};
use crate::protocol::Parameters;

pub mod batch;
pub mod cancel_message_move_task;
pub mod cancel_replay;
pub mod change_message_visibility;
pub mod change_message_visibility_batch;
pub mod confirm_subscription;
pub mod create_queue;
pub mod create_topic;
pub mod delete_message;
pub mod delete_message_batch;
pub mod delete_queue;
pub mod delete_topic;
pub mod get_queue_attributes;
pub mod get_queue_url;
pub mod get_subscription_attributes;
pub mod get_topic_attributes;
pub mod list_dead_letter_source_queues;
pub mod list_message_move_tasks;
pub mod list_move_task_history;
pub mod list_queue_tags;
pub mod list_queues;
pub mod list_replays;
pub mod list_subscriptions;
pub mod list_subscriptions_by_topic;
pub mod list_tags_for_resource;
pub mod list_topics;
pub mod nack_message;
pub mod peek_messages;
pub mod publish;
pub mod publish_batch;
pub mod purge_queue;
pub mod receive_message;
pub mod resume_message_move_task;
pub mod send_message;
pub mod send_message_batch;
pub mod set_queue_attributes;
pub mod set_subscription_attributes;
pub mod set_topic_attributes;
pub mod start_message_move_task;
pub mod start_replay;
pub mod subscribe;
pub mod summarize_queue;
pub mod tag_queue;
pub mod tag_resource;
pub mod unsubscribe;
pub mod untag_queue;
pub mod untag_resource;

/// What every action handler may use about the request it serves.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The engine.
    pub engine: Engine,
    /// Scheme and authority queue URLs are built on, e.g. `http://127.0.0.1:9324`.
    pub base_url: String,
    /// The caller's identity, reported as `SenderId`: the access key id, or
    /// the account id when requests are not authenticated.
    pub sender_id: String,
    /// Who is calling, and what they may do.
    pub caller: Caller,
    /// The id the response carries (`x-amzn-RequestId`, and `RequestId` in XML).
    pub request_id: String,
}

/// Something a request acts on, as the request names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource<'a> {
    /// A queue by `QueueUrl`.
    QueueUrl(&'a str),
    /// A queue by `QueueName`.
    QueueName(&'a str),
    /// A queue by ARN (`SourceArn`, `DestinationArn`).
    QueueArn(&'a str),
    /// A message move task by `TaskHandle`: its source queue decides.
    MoveTask(&'a str),
    /// A topic by `TopicArn` or `ResourceArn`.
    TopicArn(&'a str),
    /// A topic by `Name` (CreateTopic).
    TopicName(&'a str),
    /// A subscription by `SubscriptionArn`: its topic decides.
    SubscriptionArn(&'a str),
    /// Nothing single: the handler shows only queues and topics the caller
    /// may use ([`RequestContext::may_use_queue`], [`RequestContext::may_use_topic`]).
    Listing,
}

/// A queue or topic a request names, by name.
enum Named {
    Queue(String),
    Topic(String),
}

/// The resources a request acts on, checked before it runs.
pub trait Resources {
    /// Every resource the request names.
    fn resources(&self) -> Vec<Resource<'_>>;
}

impl RequestContext {
    /// The principal audit records name: the access key id, or `anonymous`.
    pub fn principal(&self) -> &str {
        self.caller.principal()
    }

    /// Whether the caller may see and use the queue `name` (for listings).
    pub fn may_use_queue(&self, name: &str) -> bool {
        self.caller.may_use_queue(name)
    }

    /// Whether the caller may see and use the topic whose ARN is `topic_arn`
    /// (for listings).
    pub fn may_use_topic(&self, topic_arn: &str) -> bool {
        self.engine
            .realm()
            .topic_name_from_arn("TopicArn", topic_arn)
            .is_ok_and(|name| self.caller.may_use_topic(name.as_str()))
    }

    /// Whether the caller may see and use the topic or queue whose ARN is
    /// `arn` (a replay's source, for listings).
    pub fn may_use_archive_of(&self, arn: &str) -> bool {
        match self.engine.realm().queue_name_from_arn(arn) {
            Some(queue) => self.may_use_queue(queue.as_str()),
            None => self.may_use_topic(arn),
        }
    }

    /// Refuses with `AccessDenied` unless the caller holds `permission` on
    /// every resource. A resource that names nothing this server could
    /// have (a garbled URL, an unknown task) is left to the handler, which
    /// refuses it with its own error before touching anything.
    pub async fn authorize(
        &self,
        permission: &str,
        resources: &[Resource<'_>],
    ) -> Result<(), ApiError> {
        if matches!(self.caller, Caller::Anonymous) {
            return Ok(());
        }
        let realm = self.engine.realm();
        let mut named = Vec::with_capacity(resources.len());
        for resource in resources {
            let queue =
                |name: Option<QueueName>| name.map(|name| Named::Queue(name.as_str().to_owned()));
            let topic =
                |name: Option<TopicName>| name.map(|name| Named::Topic(name.as_str().to_owned()));
            named.extend(match resource {
                Resource::QueueUrl(url) => queue(realm.queue_name_from_url(url).ok()),
                Resource::QueueName(name) => Some(Named::Queue((*name).to_owned())),
                Resource::QueueArn(arn) => queue(realm.queue_name_from_arn(arn)),
                Resource::MoveTask(handle) => queue(
                    self.engine
                        .move_task(handle)
                        .await?
                        .and_then(|task| realm.queue_name_from_arn(&task.source_arn)),
                ),
                Resource::TopicArn(arn) => topic(realm.topic_name_from_arn("TopicArn", arn).ok()),
                Resource::TopicName(name) => topic(name.parse().ok()),
                Resource::SubscriptionArn(arn) => {
                    topic(realm.subscription_from_arn(arn).ok().map(|(name, _)| name))
                }
                Resource::Listing => None,
            });
        }
        let service = if named.iter().any(|name| matches!(name, Named::Topic(_))) {
            "sns"
        } else {
            "sqs"
        };
        let denied = |resource: String, because: &str| {
            crate::telemetry::auth_refused(ErrorCode::AccessDenied);
            ApiError::Sqs(SqsError::new(
                ErrorCode::AccessDenied,
                format!(
                    "User: {} is not authorized to perform: {service}:{permission} on resource: \
                     {resource} because {because}.",
                    self.principal()
                ),
            ))
        };
        let arn = |name: &Named| match name {
            Named::Queue(name) => {
                format!("arn:aws:sqs:{}:{}:{name}", realm.region, realm.account_id)
            }
            Named::Topic(name) => {
                format!("arn:aws:sns:{}:{}:{name}", realm.region, realm.account_id)
            }
        };
        if !self.caller.may_perform(permission) {
            let resource = named.first().map_or_else(|| "*".to_owned(), arn);
            return Err(denied(
                resource,
                &format!("the key's allow_actions does not include {permission}"),
            ));
        }
        for name in &named {
            let (allowed, list) = match name {
                Named::Queue(queue) => (self.caller.may_use_queue(queue), "allow_queues"),
                Named::Topic(topic) => (self.caller.may_use_topic(topic), "allow_topics"),
            };
            if !allowed {
                return Err(denied(
                    arn(name),
                    &format!("the key's {list} does not match it"),
                ));
            }
        }
        Ok(())
    }

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

/// Runs each action: decodes the parameters as its request, checks the
/// caller may run it on what it names, runs it and encodes the response in
/// the request's protocol.
macro_rules! dispatch {
    ($($namespace:literal $variant:ident => $module:ident $(as $permission:ident)?),* $(,)?) => {
        impl Action {
            /// Runs the action on `parameters` for `context`'s caller.
            pub async fn run(self, context: &RequestContext, parameters: Parameters) -> Result<Response, ApiError> {
                let protocol = parameters.protocol();
                match self {
                    $(Self::$variant => {
                        let request = parameters.decode::<$module::Request>(self)?;
                        context.authorize(self.permission(), &request.resources()).await?;
                        let response = $module::handle(context, request).await?;
                        Ok(protocol.encode(self, &response, &context.request_id))
                    })*
                }
            }
        }
    };
}

crate::operation::every_action!(dispatch);

/// Implements [`Resources`] for requests that name one queue by `QueueUrl`.
macro_rules! by_queue_url {
    ($($module:ident),* $(,)?) => {
        $(
            impl Resources for $module::Request {
                fn resources(&self) -> Vec<Resource<'_>> {
                    vec![Resource::QueueUrl(&self.queue_url)]
                }
            }
        )*
    };
}

by_queue_url!(
    change_message_visibility,
    change_message_visibility_batch,
    delete_message,
    delete_message_batch,
    delete_queue,
    get_queue_attributes,
    list_dead_letter_source_queues,
    list_queue_tags,
    nack_message,
    peek_messages,
    purge_queue,
    receive_message,
    send_message,
    send_message_batch,
    set_queue_attributes,
    summarize_queue,
    tag_queue,
    untag_queue,
);

impl Resources for create_queue::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        vec![Resource::QueueName(&self.queue_name)]
    }
}

impl Resources for get_queue_url::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        vec![Resource::QueueName(&self.queue_name)]
    }
}

impl Resources for list_queues::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        vec![Resource::Listing]
    }
}

impl Resources for start_message_move_task::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        // Without a destination, messages go back to the queues they came
        // from; the key is judged on the dead-letter queue it names.
        std::iter::once(Resource::QueueArn(&self.source_arn))
            .chain(self.destination_arn.as_deref().map(Resource::QueueArn))
            .collect()
    }
}

impl Resources for list_message_move_tasks::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        vec![Resource::QueueArn(&self.source_arn)]
    }
}

impl Resources for list_move_task_history::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        vec![
            self.source_arn
                .as_deref()
                .map_or(Resource::Listing, Resource::QueueArn),
        ]
    }
}

impl Resources for cancel_message_move_task::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        vec![Resource::MoveTask(&self.task_handle)]
    }
}

impl Resources for resume_message_move_task::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        vec![Resource::MoveTask(&self.task_handle)]
    }
}

impl Resources for start_replay::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        let destination = if self.destination_arn.starts_with("arn:aws:sns:") {
            Resource::SubscriptionArn(&self.destination_arn)
        } else {
            Resource::QueueArn(&self.destination_arn)
        };
        vec![archive_source(&self.source_arn), destination]
    }
}

/// The topic or queue whose archive a replay reads.
fn archive_source(arn: &str) -> Resource<'_> {
    if arn.starts_with("arn:aws:sqs:") {
        Resource::QueueArn(arn)
    } else {
        Resource::TopicArn(arn)
    }
}

impl Resources for list_replays::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        vec![
            self.source_arn
                .as_deref()
                .map_or(Resource::Listing, archive_source),
        ]
    }
}

impl Resources for cancel_replay::Request {
    fn resources(&self) -> Vec<Resource<'_>> {
        vec![archive_source(&self.source_arn)]
    }
}

/// Implements [`Resources`] for SNS requests, by the field naming what they touch.
macro_rules! sns_resources {
    ($($module:ident: |$request:ident| $resources:expr),* $(,)?) => {
        $(
            impl Resources for $module::Request {
                fn resources(&self) -> Vec<Resource<'_>> {
                    let $request = self;
                    $resources
                }
            }
        )*
    };
}

sns_resources! {
    create_topic: |request| vec![Resource::TopicName(&request.name)],
    delete_topic: |request| vec![Resource::TopicArn(&request.topic_arn)],
    list_topics: |_request| vec![Resource::Listing],
    get_topic_attributes: |request| vec![Resource::TopicArn(&request.topic_arn)],
    set_topic_attributes: |request| vec![Resource::TopicArn(&request.topic_arn)],
    subscribe: |request| vec![Resource::TopicArn(&request.topic_arn)],
    confirm_subscription: |request| vec![Resource::TopicArn(&request.topic_arn)],
    unsubscribe: |request| vec![Resource::SubscriptionArn(&request.subscription_arn)],
    list_subscriptions: |_request| vec![Resource::Listing],
    list_subscriptions_by_topic: |request| vec![Resource::TopicArn(&request.topic_arn)],
    get_subscription_attributes: |request| vec![Resource::SubscriptionArn(&request.subscription_arn)],
    set_subscription_attributes: |request| vec![Resource::SubscriptionArn(&request.subscription_arn)],
    publish: |request| request
        .topic_arn
        .as_deref()
        .or(request.target_arn.as_deref())
        .map(Resource::TopicArn)
        .into_iter()
        .collect(),
    publish_batch: |request| vec![Resource::TopicArn(&request.topic_arn)],
    tag_resource: |request| vec![Resource::TopicArn(&request.resource_arn)],
    untag_resource: |request| vec![Resource::TopicArn(&request.resource_arn)],
    list_tags_for_resource: |request| vec![Resource::TopicArn(&request.resource_arn)],
}
