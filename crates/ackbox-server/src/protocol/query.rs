//! The AWS query protocol: `Action=<Action>&Version=2012-11-05&…`,
//! form-encoded in a POST body or carried in a GET query string, answered in
//! XML. Java SDK v1, older botocore and many tools still speak it.
//!
//! A query request is decoded into the very serde request types the JSON
//! protocol decodes, so validation and errors are shared. The form is first
//! read into a tree (`SendMessageBatchRequestEntry.2.Id` is member `Id` of
//! item 2), its flattened lists and maps are renamed to the JSON members they
//! stand for (`Attribute.N.Name`/`Attribute.N.Value` become the map
//! `Attributes`), and each text leaf is parsed into whatever type its field
//! declares. Responses go the other way: the response's JSON value is written
//! as XML with the query protocol's element names.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::value::{Error as DeError, MapDeserializer, SeqDeserializer};
use serde::de::{DeserializeOwned, Error as _, IntoDeserializer, Visitor};
use serde_json::Value;

use ackbox_core::error::{ErrorCode, SqsError};

use crate::error::ApiError;
use crate::operation::{Action, Service};

/// The namespace of every SQS query-protocol response.
pub const XML_NAMESPACE: &str = "http://queue.amazonaws.com/doc/2012-11-05/";
/// The namespace of every SNS response.
pub const SNS_XML_NAMESPACE: &str = "http://sns.amazonaws.com/doc/2010-03-31/";

fn xml_namespace(service: Service) -> &'static str {
    match service {
        Service::Sqs => XML_NAMESPACE,
        Service::Sns => SNS_XML_NAMESPACE,
    }
}
/// The content type of query-protocol responses.
pub const CONTENT_TYPE: &str = "text/xml";

/// Flattened request lists: the query name of one item → the JSON member.
/// Batch entries (`<Action>RequestEntry.N`) are named after their action.
const REQUEST_LISTS: &[(&str, &str)] = &[
    ("AttributeName", "AttributeNames"),
    ("MessageAttributeName", "MessageAttributeNames"),
    ("MessageSystemAttributeName", "MessageSystemAttributeNames"),
    ("TagKey", "TagKeys"),
    ("StringListValue", "StringListValues"),
    ("BinaryListValue", "BinaryListValues"),
];

/// Flattened response lists: the JSON member → the element of one item.
/// Batch results (`Successful`) are named after their action.
const RESPONSE_LISTS: &[(&str, &str)] = &[
    ("QueueUrls", "QueueUrl"),
    ("queueUrls", "QueueUrl"),
    ("Messages", "Message"),
    ("Failed", "BatchResultErrorEntry"),
    ("Results", "ListMessageMoveTasksResultEntry"),
    ("StringListValues", "StringListValue"),
    ("BinaryListValues", "BinaryListValue"),
];

/// Flattened maps, both ways: (query name of one entry, JSON member, the
/// entry's key element). Every entry's value element is `Value`.
const MAPS: &[(&str, &str, &str)] = &[
    ("Attribute", "Attributes", "Name"),
    ("MessageAttribute", "MessageAttributes", "Name"),
    ("MessageSystemAttribute", "MessageSystemAttributes", "Name"),
    ("Tag", "Tags", "Key"),
    // CreateQueue alone spells its tags in lower case in JSON.
    ("Tag", "tags", "Key"),
];

/// A query request's parameters: the form read into a tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Form {
    text: Option<String>,
    members: BTreeMap<String, Form>,
}

impl Form {
    /// Reads `name=value` pairs (a query string, then a form body: a body
    /// parameter wins over a query-string one of the same name).
    pub fn parse(query: &str, body: &[u8]) -> Self {
        let mut form = Self::default();
        let pairs = form_urlencoded::parse(query.as_bytes()).chain(form_urlencoded::parse(body));
        for (name, value) in pairs {
            let mut node = &mut form;
            for segment in name.split('.') {
                node = node.members.entry(segment.to_owned()).or_default();
            }
            node.text = Some(value.into_owned());
        }
        form
    }

    /// The text of a top-level parameter.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.members.get(name)?.text.as_deref()
    }

    /// Sets a top-level parameter unless the request carries it already.
    pub fn set_default(&mut self, name: &str, value: String) {
        let member = self.members.entry(name.to_owned()).or_default();
        if member.text.is_none() && member.members.is_empty() {
            member.text = Some(value);
        }
    }

    /// The action the request names in its `Action` parameter.
    pub fn action(&self) -> Result<Action, SqsError> {
        let name = self.get("Action").ok_or_else(|| {
            SqsError::new(
                ErrorCode::MissingParameter,
                "The request must contain the parameter Action.",
            )
        })?;
        Action::ALL
            .iter()
            .copied()
            .find(|action| action.name() == name)
            .ok_or_else(|| {
                SqsError::new(
                    ErrorCode::UnknownOperation,
                    format!("The action {name} is not valid for this web service."),
                )
            })
    }

    /// Decodes the form as `action`'s request, naming the field at fault.
    pub fn decode<T: DeserializeOwned>(self, action: Action) -> Result<T, ApiError> {
        let tree = Node::Struct(structure(action, self, "")?);
        serde_path_to_error::deserialize(tree).map_err(|error| {
            let path = error.path().to_string();
            let message = error.into_inner().to_string();
            ApiError::Sqs(super::field_error(&path, &message))
        })
    }
}

/// The form as the JSON protocol would carry it, with every leaf still text.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Text(String),
    List(Vec<Node>),
    Struct(Vec<(String, Node)>),
}

fn structure(action: Action, form: Form, path: &str) -> Result<Vec<(String, Node)>, SqsError> {
    let mut members = Vec::with_capacity(form.members.len());
    // SQS flattens its lists and maps under names of its own; SNS wraps
    // them (`node`) and keeps every name as it is.
    let flattened = action.service() == Service::Sqs;
    for (name, member) in form.members {
        let lower_case_tags = name == "Tag" && action == Action::CreateQueue;
        if let Some((_, json, key)) = MAPS
            .iter()
            .filter(|_| flattened)
            .find(|(query, json, _)| *query == name && (*json == "tags") == lower_case_tags)
        {
            let member_path = format!("{path}{name}");
            let mut map = Vec::with_capacity(member.members.len());
            for (index, mut entry) in indexed(member, &member_path)? {
                let key = entry
                    .members
                    .remove(*key)
                    .and_then(|key| key.text)
                    .ok_or_else(|| {
                        SqsError::missing_parameter(&format!("{member_path}.{index}.{key}"))
                    })?;
                let value = entry.members.remove("Value").ok_or_else(|| {
                    SqsError::missing_parameter(&format!("{member_path}.{index}.Value"))
                })?;
                let value = node(action, value, || format!("{member_path}.{index}.Value."))?;
                map.push((key, value));
            }
            members.push(((*json).to_owned(), Node::Struct(map)));
        } else if let Some(json) = REQUEST_LISTS
            .iter()
            .filter(|_| flattened)
            .find(|(query, _)| *query == name)
            .map(|(_, json)| *json)
            .or(
                (flattened && name.strip_suffix("RequestEntry") == Some(action.name()))
                    .then_some("Entries"),
            )
        {
            let member_path = format!("{path}{name}");
            let items = indexed(member, &member_path)?
                .into_iter()
                .map(|(index, item)| node(action, item, || format!("{member_path}.{index}.")))
                .collect::<Result<_, _>>()?;
            members.push((json.to_owned(), Node::List(items)));
        } else {
            let value = node(action, member, || format!("{path}{name}."))?;
            members.push((name, value));
        }
    }
    Ok(members)
}

/// A text leaf, or a structure; `path` (only needed for the latter, to
/// name a parameter at fault) is built only then.
fn node(action: Action, form: Form, path: impl FnOnce() -> String) -> Result<Node, SqsError> {
    if form.members.is_empty() {
        return Ok(Node::Text(form.text.unwrap_or_default()));
    }
    wrapped_or_structure(action, form, &path())
}

/// A structure, or one of SNS's wrapped lists (`Tags.member.N`) and maps
/// (`Attributes.entry.N.key`). Not generic, so that `node`'s recursion
/// through it instantiates one closure type, not one per level.
fn wrapped_or_structure(action: Action, mut form: Form, path: &str) -> Result<Node, SqsError> {
    if form.members.len() == 1 {
        if let Some(items) = form.members.remove("member") {
            let member_path = format!("{path}member");
            return indexed(items, &member_path)?
                .into_iter()
                .map(|(index, item)| node(action, item, || format!("{member_path}.{index}.")))
                .collect::<Result<_, _>>()
                .map(Node::List);
        }
        if let Some(entries) = form.members.remove("entry") {
            return wrapped_map(action, entries, &format!("{path}entry")).map(Node::Struct);
        }
    }
    structure(action, form, path).map(Node::Struct)
}

/// The entries of an SNS map: `N.key`/`N.value`, or `N.Name`/`N.Value`
/// for message attributes.
fn wrapped_map(action: Action, entries: Form, path: &str) -> Result<Vec<(String, Node)>, SqsError> {
    let mut map = Vec::with_capacity(entries.members.len());
    for (index, mut entry) in indexed(entries, path)? {
        let (key_name, value_name) = if entry.members.contains_key("Name") {
            ("Name", "Value")
        } else {
            ("key", "value")
        };
        let key = entry
            .members
            .remove(key_name)
            .and_then(|key| key.text)
            .ok_or_else(|| SqsError::missing_parameter(&format!("{path}.{index}.{key_name}")))?;
        let value = entry
            .members
            .remove(value_name)
            .ok_or_else(|| SqsError::missing_parameter(&format!("{path}.{index}.{value_name}")))?;
        map.push((
            key,
            node(action, value, || format!("{path}.{index}.{value_name}."))?,
        ));
    }
    Ok(map)
}

/// The items of a flattened list or map (`Name.1`, `Name.2`, …) in index
/// order. A bare `Name=value` is a one-item list.
fn indexed(form: Form, path: &str) -> Result<Vec<(u32, Form)>, SqsError> {
    if form.members.is_empty() {
        return Ok(form
            .text
            .map(|text| {
                vec![(
                    1,
                    Form {
                        text: Some(text),
                        members: BTreeMap::new(),
                    },
                )]
            })
            .unwrap_or_default());
    }
    let mut items = form
        .members
        .into_iter()
        .map(|(index, item)| match index.parse::<u32>() {
            Ok(number) if number >= 1 => Ok((number, item)),
            _ => Err(SqsError::invalid_value(format!(
                "Value {index} for parameter {path}.{index} is invalid. Reason: list and map \
                 items are numbered from 1."
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    items.sort_by_key(|(index, _)| *index);
    Ok(items)
}

impl<'de> IntoDeserializer<'de, DeError> for Node {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

/// Parses a text leaf as the number type a field declares.
macro_rules! numbers {
    ($($method:ident $visit:ident $number:ty),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
                match self {
                    Self::Text(text) => match text.trim().parse::<$number>() {
                        Ok(number) => visitor.$visit(number),
                        Err(_) => Err(DeError::custom(format!("{text:?} is not a number"))),
                    },
                    other => other.deserialize_any(visitor),
                }
            }
        )*
    };
}

impl<'de> serde::Deserializer<'de> for Node {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self {
            Self::Text(text) => visitor.visit_string(text),
            Self::List(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            Self::Struct(members) => visitor.visit_map(MapDeserializer::new(members.into_iter())),
        }
    }

    numbers! {
        deserialize_i8 visit_i8 i8,
        deserialize_i16 visit_i16 i16,
        deserialize_i32 visit_i32 i32,
        deserialize_i64 visit_i64 i64,
        deserialize_u8 visit_u8 u8,
        deserialize_u16 visit_u16 u16,
        deserialize_u32 visit_u32 u32,
        deserialize_u64 visit_u64 u64,
        deserialize_f32 visit_f32 f32,
        deserialize_f64 visit_f64 f64,
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self {
            Self::Text(text) => match text.trim() {
                "true" => visitor.visit_bool(true),
                "false" => visitor.visit_bool(false),
                _ => Err(DeError::custom(format!(
                    "{text:?} is not a boolean (true or false)"
                ))),
            },
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self {
            Self::Text(text) => visitor.visit_enum(text.into_deserializer()),
            other => other.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        char str string bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any i128 u128
    }
}

/// Encodes a successful response: `<ActionResponse><ActionResult>…` and the
/// request id.
pub fn respond<T: Serialize>(action: Action, response: &T, request_id: &str) -> Response {
    match serde_json::to_value(response) {
        Ok(value) => xml_response(StatusCode::OK, document(action, &value, request_id)),
        Err(error) => {
            tracing::error!(%error, "response serialization failed");
            render_error(action.service(), &SqsError::internal(), request_id)
        }
    }
}

fn document(action: Action, value: &Value, request_id: &str) -> String {
    let name = action.name();
    let namespace = xml_namespace(action.service());
    let mut xml = format!("<?xml version=\"1.0\"?><{name}Response xmlns=\"{namespace}\">");
    // Actions without output in the SQS model answer with metadata only;
    // clients look for the result element of every other action.
    if has_result(action) {
        let _ = write!(xml, "<{name}Result>");
        write_members(&mut xml, action, value);
        let _ = write!(xml, "</{name}Result>");
    }
    let _ = write!(
        xml,
        "<ResponseMetadata><RequestId>{}</RequestId></ResponseMetadata></{name}Response>",
        escape(request_id)
    );
    xml
}

fn has_result(action: Action) -> bool {
    !matches!(
        action,
        Action::DeleteMessage
            | Action::DeleteQueue
            | Action::ChangeMessageVisibility
            | Action::PurgeQueue
            | Action::SetQueueAttributes
            | Action::TagQueue
            | Action::UntagQueue
            | Action::DeleteTopic
            | Action::SetTopicAttributes
            | Action::Unsubscribe
            | Action::SetSubscriptionAttributes
    )
}

/// The query rendering of an error of `service`'s API.
pub fn render_error(service: Service, error: &SqsError, request_id: &str) -> Response {
    xml_response(
        super::error_status(error.code),
        error_document(service, error, request_id),
    )
}

/// An error code as `service` spells it: SNS's batch codes lack SQS's
/// `AWS.SimpleQueueService.` prefix.
pub fn service_code(service: Service, code: ErrorCode) -> &'static str {
    let code = code.query_code();
    match service {
        Service::Sqs => code,
        Service::Sns => code.strip_prefix("AWS.SimpleQueueService.").unwrap_or(code),
    }
}

fn error_document(service: Service, error: &SqsError, request_id: &str) -> String {
    let code = error.code;
    let fault = super::error_fault(code);
    let namespace = xml_namespace(service);
    // The query protocol's text for a missing queue, as SQS words it.
    let message = if code == ErrorCode::QueueDoesNotExist {
        "The specified queue does not exist for this wsdl version."
    } else {
        &error.message
    };
    format!(
        "<?xml version=\"1.0\"?><ErrorResponse xmlns=\"{namespace}\"><Error><Type>{fault}</Type>\
         <Code>{}</Code><Message>{}</Message><Detail/></Error><RequestId>{}</RequestId>\
         </ErrorResponse>",
        escape(service_code(service, code)),
        escape(message),
        escape(request_id)
    )
}

fn xml_response(status: StatusCode, xml: String) -> Response {
    let mut response = (status, xml).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

fn write_members(xml: &mut String, action: Action, value: &Value) {
    if let Value::Object(members) = value {
        for (name, member) in members {
            write_member(xml, action, name, member);
        }
    }
}

/// One member of a structure: lists and maps are flattened into repeated
/// elements, as the SQS query model declares every one of them.
fn write_member(xml: &mut String, action: Action, name: &str, value: &Value) {
    if action.service() == Service::Sns {
        return write_wrapped_member(xml, action, name, value);
    }
    match value {
        Value::Array(items) => {
            let successful = format!("{}ResultEntry", action.name());
            let element = RESPONSE_LISTS
                .iter()
                .find(|(json, _)| *json == name)
                .map(|(_, element)| *element)
                .unwrap_or(if name == "Successful" {
                    &successful
                } else {
                    name
                });
            for item in items {
                write_element(xml, action, element, item);
            }
        }
        Value::Object(entries) => match MAPS.iter().find(|(_, json, _)| *json == name) {
            Some((element, _, key)) => {
                for (entry_key, entry_value) in entries {
                    let _ = write!(xml, "<{element}><{key}>{}</{key}>", escape(entry_key));
                    write_element(xml, action, "Value", entry_value);
                    let _ = write!(xml, "</{element}>");
                }
            }
            None => write_element(xml, action, name, value),
        },
        _ => write_element(xml, action, name, value),
    }
}

fn write_element(xml: &mut String, action: Action, name: &str, value: &Value) {
    match value {
        Value::Null => {}
        Value::String(text) => {
            let _ = write!(xml, "<{name}>{}</{name}>", escape(text));
        }
        Value::Bool(_) | Value::Number(_) => {
            let _ = write!(xml, "<{name}>{value}</{name}>");
        }
        Value::Object(_) => {
            let _ = write!(xml, "<{name}>");
            write_members(xml, action, value);
            let _ = write!(xml, "</{name}>");
        }
        Value::Array(items) => {
            for item in items {
                write_element(xml, action, name, item);
            }
        }
    }
}

/// One member of an SNS structure: lists wrap their items in `member`,
/// maps their entries in `entry` (`key`, `value`).
fn write_wrapped_member(xml: &mut String, action: Action, name: &str, value: &Value) {
    match value {
        Value::Array(items) => {
            let _ = write!(xml, "<{name}>");
            for item in items {
                write_element(xml, action, "member", item);
            }
            let _ = write!(xml, "</{name}>");
        }
        Value::Object(entries) if SNS_MAPS.contains(&name) => {
            let _ = write!(xml, "<{name}>");
            for (entry_key, entry_value) in entries {
                let _ = write!(xml, "<entry><key>{}</key>", escape(entry_key));
                write_element(xml, action, "value", entry_value);
                let _ = write!(xml, "</entry>");
            }
            let _ = write!(xml, "</{name}>");
        }
        _ => write_element(xml, action, name, value),
    }
}

/// The members of SNS responses that are maps; every other object is a structure.
const SNS_MAPS: &[&str] = &["Attributes"];

/// Escapes XML text. A carriage return is written as a character reference
/// because XML parsers turn a literal one into a line feed, and the body's
/// MD5 would no longer match.
fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['&', '<', '>', '\r']) {
        return text.into();
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '\r' => escaped.push_str("&#xD;"),
            other => escaped.push(other),
        }
    }
    escaped.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{receive_message, send_message, send_message_batch};

    fn form(text: &str) -> Form {
        Form::parse("", text.as_bytes())
    }

    #[test]
    fn flattened_maps_and_lists_become_their_json_members() {
        let request: send_message_batch::Request = form(
            "Action=SendMessageBatch&QueueUrl=http%3A%2F%2Fh%2F1%2Fq\
             &SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=two\
             &SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=one\
             &SendMessageBatchRequestEntry.1.DelaySeconds=5\
             &SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=kind\
             &SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=String\
             &SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=card",
        )
        .decode(Action::SendMessageBatch)
        .unwrap();
        assert_eq!(request.queue_url, "http://h/1/q");
        let ids: Vec<&str> = request.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "items in index order");
        assert_eq!(request.entries[0].delay_seconds, Some(5));
        assert_eq!(
            request.entries[0].message_attributes["kind"]
                .string_value
                .as_deref(),
            Some("card")
        );
        assert!(request.entries[1].message_attributes.is_empty());
    }

    #[test]
    fn a_number_that_is_not_one_names_its_field() {
        let error = form("QueueUrl=q&MaxNumberOfMessages=ten")
            .decode::<receive_message::Request>(Action::ReceiveMessage)
            .unwrap_err()
            .client_error();
        assert_eq!(error.code, ErrorCode::InvalidParameterValue);
        assert!(error.message.contains("MaxNumberOfMessages"), "{error:?}");
        assert!(error.message.contains("\"ten\""), "{error:?}");
    }

    #[test]
    fn a_missing_member_or_map_key_is_missing_parameter() {
        let error = form("MessageBody=x")
            .decode::<send_message::Request>(Action::SendMessage)
            .unwrap_err()
            .client_error();
        assert_eq!(error.code, ErrorCode::MissingParameter);
        assert!(error.message.contains("QueueUrl"), "{error:?}");
        let error = form("QueueUrl=q&MessageBody=x&MessageAttribute.1.Value.DataType=String")
            .decode::<send_message::Request>(Action::SendMessage)
            .unwrap_err()
            .client_error();
        assert_eq!(error.code, ErrorCode::MissingParameter);
        assert!(
            error.message.contains("MessageAttribute.1.Name"),
            "{error:?}"
        );
        let error = form("QueueUrl=q&AttributeName.x=All")
            .decode::<receive_message::Request>(Action::ReceiveMessage)
            .unwrap_err()
            .client_error();
        assert_eq!(error.code, ErrorCode::InvalidParameterValue);
        assert!(error.message.contains("AttributeName.x"), "{error:?}");
    }

    #[test]
    fn responses_flatten_lists_and_maps_and_escape_text() {
        let response = serde_json::json!({
            "Messages": [{
                "Body": "a<b & \r\n",
                "Attributes": {"ApproximateReceiveCount": "1"},
                "MessageAttributes": {"kind": {"DataType": "String", "StringValue": "card"}},
            }],
        });
        assert_eq!(
            document(Action::ReceiveMessage, &response, "rid"),
            "<?xml version=\"1.0\"?><ReceiveMessageResponse \
             xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"><ReceiveMessageResult><Message>\
             <Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>\
             <Body>a&lt;b &amp; &#xD;\n</Body>\
             <MessageAttribute><Name>kind</Name><Value><DataType>String</DataType>\
             <StringValue>card</StringValue></Value></MessageAttribute>\
             </Message></ReceiveMessageResult><ResponseMetadata><RequestId>rid</RequestId>\
             </ResponseMetadata></ReceiveMessageResponse>"
        );
        let batch = serde_json::json!({
            "Successful": [{"Id": "a"}],
            "Failed": [{"Id": "b", "SenderFault": true}],
        });
        let xml = document(Action::DeleteMessageBatch, &batch, "rid");
        assert!(
            xml.contains(
                "<BatchResultErrorEntry><Id>b</Id><SenderFault>true</SenderFault>\
                 </BatchResultErrorEntry><DeleteMessageBatchResultEntry><Id>a</Id>\
                 </DeleteMessageBatchResultEntry>"
            ),
            "{xml}"
        );
        let none = document(Action::DeleteMessage, &serde_json::json!({}), "rid");
        assert!(!none.contains("Result>"), "{none}");
    }

    #[test]
    fn errors_carry_the_query_code_and_wording() {
        let error = SqsError::new(
            ErrorCode::QueueDoesNotExist,
            "The specified queue does not exist.",
        );
        assert_eq!(
            error_document(Service::Sqs, &error, "rid"),
            "<?xml version=\"1.0\"?><ErrorResponse \
             xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"><Error><Type>Sender</Type>\
             <Code>AWS.SimpleQueueService.NonExistentQueue</Code><Message>The specified queue \
             does not exist for this wsdl version.</Message><Detail/></Error>\
             <RequestId>rid</RequestId></ErrorResponse>"
        );
        assert_eq!(
            render_error(Service::Sqs, &error, "rid").status(),
            StatusCode::BAD_REQUEST
        );
    }
}
