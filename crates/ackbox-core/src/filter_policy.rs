//! SNS subscription filter policies: which messages a subscription takes.
//!
//! A policy is a JSON object. Each key names a message attribute (scope
//! `MessageAttributes`) or a property of the JSON body (scope
//! `MessageBody`, where objects nest as the body does), and every key must
//! match (`$or` lists alternatives). A key's value is a list of conditions,
//! any of which may match: an exact string or number, `null` (body scope),
//! `{"prefix"}`, `{"suffix"}`, `{"equals-ignore-case"}`, `{"anything-but"}`
//! (a value, a list, or a prefix/suffix), `{"numeric": [op, n, …]}` and
//! `{"exists": bool}` — the operators of the SNS Developer Guide ("Amazon
//! SNS message filtering"). A list value (a `String.Array` attribute, a
//! JSON array) matches when one of its elements does. A missing attribute
//! matches only `{"exists": false}`.

use std::borrow::Cow;

use serde_json::{Map, Number, Value};

use crate::message::{AttributeKind, MessageAttributes};

/// Keys one policy may name (SNS's limit for attribute policies).
pub const MAX_POLICY_KEYS: usize = 5;
/// Key × condition combinations one policy may hold (SNS's limit).
pub const MAX_POLICY_COMBINATIONS: usize = 150;

/// Where a policy looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterScope {
    /// The message's attributes (SNS's default).
    MessageAttributes,
    /// The message's JSON body.
    MessageBody,
}

impl FilterScope {
    /// The scope a `FilterPolicyScope` value names.
    pub fn parse(scope: &str) -> Result<Self, String> {
        match scope {
            "MessageAttributes" => Ok(Self::MessageAttributes),
            "MessageBody" => Ok(Self::MessageBody),
            other => Err(format!(
                "{other:?} is not a filter policy scope (MessageAttributes or MessageBody)."
            )),
        }
    }
}

/// A checked filter policy.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterPolicy {
    root: Node,
}

/// What one level of a policy requires.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// Every member must match; `$or` members as alternatives.
    All(Vec<(String, Member)>, Vec<Vec<Node>>),
}

#[derive(Debug, Clone, PartialEq)]
enum Member {
    /// A nested object (body scope).
    Nested(Node),
    /// Conditions on the value at this key, any of which may match.
    Conditions(Vec<Condition>),
}

#[derive(Debug, Clone, PartialEq)]
enum Condition {
    Exact(String),
    Number(f64),
    Null,
    Prefix(String),
    Suffix(String),
    EqualsIgnoreCase(String),
    AnythingBut(Vec<Condition>),
    Numeric(Vec<(Comparison, f64)>),
    Exists(bool),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Comparison {
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

/// A value the policy is matched against.
#[derive(Debug, Clone)]
enum Seen<'a> {
    Text(Cow<'a, str>),
    Number(f64),
    Null,
    /// Present, but matched only by `exists` (a boolean, an object).
    Other,
    Missing,
}

impl FilterPolicy {
    /// Parses and checks a policy for `scope`, or says what is wrong.
    pub fn parse(policy: &str, scope: FilterScope) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(policy).map_err(|error| format!("not JSON: {error}."))?;
        let Value::Object(members) = value else {
            return Err("a filter policy is a JSON object.".to_owned());
        };
        let root = node(&members, scope, 0)?;
        let keys = root.key_count();
        if scope == FilterScope::MessageAttributes && keys > MAX_POLICY_KEYS {
            return Err(format!(
                "a policy may name at most {MAX_POLICY_KEYS} attributes; this one names {keys}."
            ));
        }
        let combinations = root.combinations();
        if combinations > MAX_POLICY_COMBINATIONS {
            return Err(format!(
                "a policy may hold at most {MAX_POLICY_COMBINATIONS} combinations of conditions; \
                 this one holds {combinations}."
            ));
        }
        Ok(Self { root })
    }

    /// Whether a message with these attributes passes (scope `MessageAttributes`).
    pub fn matches_attributes(&self, attributes: &MessageAttributes) -> bool {
        self.root.matches(&|path: &[&str]| {
            let [name] = path else {
                return vec![Seen::Missing];
            };
            match attributes.get(*name) {
                None => vec![Seen::Missing],
                Some(value) => {
                    let text = value.string_value.as_deref().unwrap_or_default();
                    match value.kind() {
                        Some(AttributeKind::Number) => vec![
                            text.trim()
                                .parse()
                                .map_or(Seen::Text(text.into()), Seen::Number),
                        ],
                        Some(AttributeKind::String) if value.data_type == "String.Array" => {
                            array_elements(text)
                        }
                        Some(AttributeKind::String) => vec![Seen::Text(text.into())],
                        // Binary attributes are never matched, as in SNS.
                        _ => vec![],
                    }
                }
            }
        })
    }

    /// Whether a message with this body passes (scope `MessageBody`). A body
    /// that is not a JSON object matches nothing.
    pub fn matches_body(&self, body: &str) -> bool {
        let Ok(Value::Object(body)) = serde_json::from_str::<Value>(body) else {
            return false;
        };
        self.root.matches(&|path: &[&str]| {
            let mut at = Some(&body);
            let (last, parents) = path.split_last().expect("a path has a key");
            for key in parents {
                at = at
                    .and_then(|object| object.get(*key))
                    .and_then(Value::as_object);
            }
            match at.and_then(|object| object.get(*last)) {
                None => vec![Seen::Missing],
                Some(Value::Array(items)) => items.iter().map(seen).collect(),
                Some(value) => vec![seen(value)],
            }
        })
    }
}

fn seen(value: &Value) -> Seen<'_> {
    match value {
        Value::String(text) => Seen::Text(text.as_str().into()),
        Value::Number(number) => number.as_f64().map_or(Seen::Missing, Seen::Number),
        Value::Null => Seen::Null,
        // Booleans and objects match no condition but `exists`.
        Value::Bool(_) | Value::Object(_) | Value::Array(_) => Seen::Other,
    }
}

/// A `String.Array` attribute's elements; text that is not a JSON array is
/// one string.
fn array_elements(text: &str) -> Vec<Seen<'_>> {
    match serde_json::from_str::<Vec<Value>>(text) {
        Ok(items) => items
            .into_iter()
            .map(|item| match item {
                Value::String(element) => Seen::Text(element.into()),
                Value::Number(number) => number.as_f64().map_or(Seen::Other, Seen::Number),
                Value::Null => Seen::Null,
                _ => Seen::Other,
            })
            .collect(),
        Err(_) => vec![Seen::Text(text.into())],
    }
}

const MAX_DEPTH: usize = 5;

fn node(members: &Map<String, Value>, scope: FilterScope, depth: usize) -> Result<Node, String> {
    if depth >= MAX_DEPTH {
        return Err(format!("a policy nests at most {MAX_DEPTH} levels deep."));
    }
    if members.is_empty() {
        return Err("a filter policy object needs at least one key.".to_owned());
    }
    let mut all = Vec::new();
    let mut alternatives = Vec::new();
    for (key, value) in members {
        if key == "$or" {
            let Value::Array(options) = value else {
                return Err("$or takes a list of policy objects.".to_owned());
            };
            if options.len() < 2 {
                return Err("$or takes at least two policy objects.".to_owned());
            }
            let options = options
                .iter()
                .map(|option| match option {
                    Value::Object(option) => node(option, scope, depth + 1),
                    _ => Err("$or takes a list of policy objects.".to_owned()),
                })
                .collect::<Result<Vec<_>, _>>()?;
            alternatives.push(options);
            continue;
        }
        let member = match value {
            Value::Array(conditions) => Member::Conditions(
                conditions
                    .iter()
                    .map(|condition| self::condition(key, condition))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(nested) if scope == FilterScope::MessageBody => {
                Member::Nested(node(nested, scope, depth + 1)?)
            }
            _ => {
                return Err(format!(
                    "the value of {key:?} must be a list of conditions, e.g. [\"a\", {{\"prefix\": \"b\"}}]."
                ));
            }
        };
        if let Member::Conditions(conditions) = &member
            && conditions.is_empty()
        {
            return Err(format!("{key:?} has an empty list of conditions."));
        }
        all.push((key.clone(), member));
    }
    Ok(Node::All(all, alternatives))
}

fn condition(key: &str, value: &Value) -> Result<Condition, String> {
    let bad = |what: &str| format!("{key:?}: {what}");
    match value {
        Value::String(text) => Ok(Condition::Exact(text.clone())),
        Value::Number(number) => Ok(Condition::Number(
            finite(number).ok_or_else(|| bad("a number out of range."))?,
        )),
        Value::Null => Ok(Condition::Null),
        Value::Object(operator) if operator.len() == 1 => {
            let (name, operand) = operator.iter().next().expect("one member");
            match (name.as_str(), operand) {
                ("prefix", Value::String(prefix)) => Ok(Condition::Prefix(prefix.clone())),
                ("suffix", Value::String(suffix)) => Ok(Condition::Suffix(suffix.clone())),
                ("equals-ignore-case", Value::String(text)) => {
                    Ok(Condition::EqualsIgnoreCase(text.clone()))
                }
                ("exists", Value::Bool(exists)) => Ok(Condition::Exists(*exists)),
                ("anything-but", Value::Array(values)) if !values.is_empty() => values
                    .iter()
                    .map(|value| match value {
                        Value::String(_) | Value::Number(_) => condition(key, value),
                        _ => Err(bad("anything-but lists strings or numbers.")),
                    })
                    .collect::<Result<_, _>>()
                    .map(Condition::AnythingBut),
                ("anything-but", Value::String(_) | Value::Number(_)) => {
                    Ok(Condition::AnythingBut(vec![condition(key, operand)?]))
                }
                ("anything-but", Value::Object(inner)) if inner.len() == 1 => {
                    match condition(key, operand)? {
                        inner @ (Condition::Prefix(_) | Condition::Suffix(_)) => {
                            Ok(Condition::AnythingBut(vec![inner]))
                        }
                        _ => Err(bad(
                            "anything-but takes a value, a list, a prefix or a suffix.",
                        )),
                    }
                }
                ("numeric", Value::Array(terms)) => numeric(terms).map_err(|reason| bad(&reason)),
                _ => Err(bad(&format!(
                    "{name:?} with {operand} is not a filter operator SNS knows."
                ))),
            }
        }
        _ => Err(bad(&format!("{value} is not a condition."))),
    }
}

fn finite(number: &Number) -> Option<f64> {
    number
        .as_f64()
        .filter(|value| value.is_finite() && value.abs() <= 1e9)
}

/// `["=", 5]`, `[">", 0]`, `[">=", 0, "<", 10]`: one equality, or up to
/// two bounds, lower first.
fn numeric(terms: &[Value]) -> Result<Condition, String> {
    let mut comparisons = Vec::new();
    for pair in terms.chunks(2) {
        let [Value::String(operator), Value::Number(bound)] = pair else {
            return Err(
                "numeric takes an operator and a number, e.g. [\">\", 0, \"<=\", 5].".to_owned(),
            );
        };
        let comparison = match operator.as_str() {
            "=" => Comparison::Equal,
            "<" => Comparison::Less,
            "<=" => Comparison::LessOrEqual,
            ">" => Comparison::Greater,
            ">=" => Comparison::GreaterOrEqual,
            other => {
                return Err(format!(
                    "{other:?} is not a numeric operator (=, <, <=, >, >=)."
                ));
            }
        };
        let bound = finite(bound).ok_or("a numeric bound is out of range (at most 1e9).")?;
        comparisons.push((comparison, bound));
    }
    let valid = match comparisons.as_slice() {
        [(_, _)] => true,
        [(lower, low), (upper, high)] => {
            matches!(lower, Comparison::Greater | Comparison::GreaterOrEqual)
                && matches!(upper, Comparison::Less | Comparison::LessOrEqual)
                && low < high
        }
        _ => false,
    };
    if valid {
        Ok(Condition::Numeric(comparisons))
    } else {
        Err("numeric takes one comparison, or a lower bound then a higher upper bound.".to_owned())
    }
}

impl Node {
    fn key_count(&self) -> usize {
        let Self::All(members, alternatives) = self;
        members
            .iter()
            .map(|(_, member)| match member {
                Member::Nested(node) => node.key_count(),
                Member::Conditions(_) => 1,
            })
            .sum::<usize>()
            + alternatives
                .iter()
                .flatten()
                .map(Node::key_count)
                .max()
                .unwrap_or(0)
    }

    fn combinations(&self) -> usize {
        let Self::All(members, alternatives) = self;
        let own = members
            .iter()
            .map(|(_, member)| match member {
                Member::Nested(node) => node.combinations(),
                Member::Conditions(conditions) => conditions.len(),
            })
            .product::<usize>();
        alternatives.iter().fold(own, |total, options| {
            total.saturating_mul(options.iter().map(Node::combinations).sum())
        })
    }

    fn matches<'a>(&self, lookup: &dyn Fn(&[&str]) -> Vec<Seen<'a>>) -> bool {
        self.matches_at(&[], lookup)
    }

    fn matches_at<'a>(&self, path: &[&str], lookup: &dyn Fn(&[&str]) -> Vec<Seen<'a>>) -> bool {
        let Self::All(members, alternatives) = self;
        members.iter().all(|(key, member)| {
            let mut here = path.to_vec();
            here.push(key);
            match member {
                Member::Nested(node) => node.matches_at(&here, lookup),
                Member::Conditions(conditions) => {
                    let values = lookup(&here);
                    conditions
                        .iter()
                        .any(|condition| condition.matches(&values))
                }
            }
        }) && alternatives
            .iter()
            .all(|options| options.iter().any(|option| option.matches_at(path, lookup)))
    }
}

impl Condition {
    /// Whether the values at a key (one, several for a list, or `Missing`) pass.
    fn matches(&self, values: &[Seen<'_>]) -> bool {
        let present: Vec<&Seen<'_>> = values
            .iter()
            .filter(|value| !matches!(value, Seen::Missing))
            .collect();
        match self {
            Self::Exists(exists) => *exists != present.is_empty(),
            Self::AnythingBut(excluded) => {
                !present.is_empty()
                    && present.iter().all(|value| {
                        !excluded
                            .iter()
                            .any(|condition| condition.matches_one(value))
                    })
            }
            _ => present.iter().any(|value| self.matches_one(value)),
        }
    }

    fn matches_one(&self, value: &Seen<'_>) -> bool {
        match (self, value) {
            (Self::Exact(expected), Seen::Text(text)) => expected.as_str() == text.as_ref(),
            (Self::Number(expected), Seen::Number(number)) => expected == number,
            (Self::Null, Seen::Null) => true,
            (Self::Prefix(prefix), Seen::Text(text)) => text.starts_with(prefix.as_str()),
            (Self::Suffix(suffix), Seen::Text(text)) => text.ends_with(suffix.as_str()),
            (Self::EqualsIgnoreCase(expected), Seen::Text(text)) => {
                expected.to_lowercase() == text.to_lowercase()
            }
            (Self::Numeric(comparisons), Seen::Number(number)) => {
                comparisons
                    .iter()
                    .all(|(comparison, bound)| match comparison {
                        Comparison::Equal => number == bound,
                        Comparison::Less => number < bound,
                        Comparison::LessOrEqual => number <= bound,
                        Comparison::Greater => number > bound,
                        Comparison::GreaterOrEqual => number >= bound,
                    })
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageAttributeValue;

    fn attributes(pairs: &[(&str, &str, &str)]) -> MessageAttributes {
        pairs
            .iter()
            .map(|(name, data_type, value)| {
                (
                    (*name).to_owned(),
                    MessageAttributeValue {
                        data_type: (*data_type).to_owned(),
                        string_value: Some((*value).to_owned()),
                        binary_value: None,
                    },
                )
            })
            .collect()
    }

    fn on_attributes(policy: &str, pairs: &[(&str, &str, &str)]) -> bool {
        FilterPolicy::parse(policy, FilterScope::MessageAttributes)
            .unwrap()
            .matches_attributes(&attributes(pairs))
    }

    fn on_body(policy: &str, body: &str) -> bool {
        FilterPolicy::parse(policy, FilterScope::MessageBody)
            .unwrap()
            .matches_body(body)
    }

    #[test]
    fn exact_values_prefixes_suffixes_and_case() {
        let policy = r#"{"store": ["example_corp", {"prefix": "shop-"}], "kind": [{"suffix": "ed"}, {"equals-ignore-case": "NEW"}]}"#;
        assert!(on_attributes(
            policy,
            &[
                ("store", "String", "example_corp"),
                ("kind", "String", "placed")
            ]
        ));
        assert!(on_attributes(
            policy,
            &[("store", "String", "shop-7"), ("kind", "String", "new")]
        ));
        assert!(!on_attributes(
            policy,
            &[("store", "String", "other"), ("kind", "String", "placed")]
        ));
        assert!(
            !on_attributes(policy, &[("store", "String", "shop-7")]),
            "every key must match"
        );
    }

    #[test]
    fn numbers_match_by_value_and_range() {
        let policy = r#"{"price": [{"numeric": [">=", 10, "<", 20]}], "qty": [3]}"#;
        assert!(on_attributes(
            policy,
            &[("price", "Number", "10"), ("qty", "Number", "3.0")]
        ));
        assert!(on_attributes(
            policy,
            &[("price", "Number", "19.99"), ("qty", "Number", "3")]
        ));
        assert!(!on_attributes(
            policy,
            &[("price", "Number", "20"), ("qty", "Number", "3")]
        ));
        assert!(
            !on_attributes(policy, &[("price", "String", "15"), ("qty", "Number", "3")]),
            "a string is not a number"
        );
    }

    #[test]
    fn anything_but_and_exists_treat_a_missing_attribute_as_sns_does() {
        let policy = r#"{"state": [{"anything-but": ["cancelled", "void"]}]}"#;
        assert!(on_attributes(policy, &[("state", "String", "paid")]));
        assert!(!on_attributes(policy, &[("state", "String", "void")]));
        assert!(
            !on_attributes(policy, &[]),
            "anything-but needs the attribute"
        );
        assert!(on_attributes(
            r#"{"state": [{"anything-but": {"prefix": "test-"}}]}"#,
            &[("state", "String", "live")]
        ));
        assert!(on_attributes(r#"{"trace": [{"exists": false}]}"#, &[]));
        assert!(!on_attributes(
            r#"{"trace": [{"exists": false}]}"#,
            &[("trace", "String", "x")]
        ));
        assert!(on_attributes(
            r#"{"trace": [{"exists": true}]}"#,
            &[("trace", "String", "x")]
        ));
    }

    #[test]
    fn string_arrays_match_when_one_element_does() {
        let policy = r#"{"tags": ["urgent"]}"#;
        assert!(on_attributes(
            policy,
            &[("tags", "String.Array", r#"["low", "urgent"]"#)]
        ));
        assert!(!on_attributes(
            policy,
            &[("tags", "String.Array", r#"["low"]"#)]
        ));
    }

    #[test]
    fn body_policies_follow_the_body_and_or_gives_alternatives() {
        let policy = r#"{"order": {"country": ["ID", "SG"], "total": [{"numeric": [">", 100]}]}}"#;
        assert!(on_body(
            policy,
            r#"{"order": {"country": "ID", "total": 250}}"#
        ));
        assert!(!on_body(
            policy,
            r#"{"order": {"country": "ID", "total": 50}}"#
        ));
        assert!(!on_body(policy, r#"{"country": "ID", "total": 250}"#));
        assert!(!on_body(policy, "not json"));
        assert!(on_body(
            r#"{"items": ["book"]}"#,
            r#"{"items": ["pen", "book"]}"#
        ));
        assert!(on_body(r#"{"coupon": [null]}"#, r#"{"coupon": null}"#));
        let either = r#"{"source": ["web"], "$or": [{"total": [{"numeric": [">", 100]}]}, {"vip": ["yes"]}]}"#;
        assert!(on_body(either, r#"{"source": "web", "total": 500}"#));
        assert!(on_body(either, r#"{"source": "web", "vip": "yes"}"#));
        assert!(!on_body(either, r#"{"source": "web", "total": 5}"#));
    }

    #[test]
    fn malformed_policies_say_what_is_wrong() {
        for (policy, says) in [
            ("[]", "JSON object"),
            ("{\"a\": \"b\"}", "list of conditions"),
            ("{\"a\": []}", "empty list"),
            (
                "{\"a\": [{\"numeric\": [\"<\", 5, \">\", 1]}]}",
                "lower bound",
            ),
            ("{\"a\": [{\"regex\": \"x\"}]}", "not a filter operator"),
            (
                "{\"a\":[1],\"b\":[1],\"c\":[1],\"d\":[1],\"e\":[1],\"f\":[1]}",
                "at most 5",
            ),
            ("{\"a\": {\"b\": [\"c\"]}}", "list of conditions"),
        ] {
            let error = FilterPolicy::parse(policy, FilterScope::MessageAttributes).unwrap_err();
            assert!(error.contains(says), "{policy}: {error}");
        }
        let many: Vec<String> = (0..151).map(|n| n.to_string()).collect();
        let policy = format!("{{\"a\": {}}}", serde_json::to_string(&many).unwrap());
        assert!(
            FilterPolicy::parse(&policy, FilterScope::MessageAttributes)
                .unwrap_err()
                .contains("150")
        );
    }
}
