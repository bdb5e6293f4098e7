//! The MD5 digests SQS returns so clients can verify what the server stored.
//!
//! `MD5OfMessageAttributes` is computed over the attributes sorted by name,
//! each encoded as: name length and bytes, data type length and bytes, one
//! transport byte (1 for String/Number, 2 for Binary), value length and bytes;
//! lengths are 4-byte big-endian. SDKs recompute it and reject a mismatch.

use md5::{Digest, Md5};

use crate::message::{AttributeKind, MessageAttributes};

/// Lowercase hex MD5 of the body's UTF-8 bytes.
pub fn md5_of_body(body: &str) -> String {
    lower_hex(&Md5::digest(body.as_bytes()))
}

/// The deduplication id of a FIFO send with content-based deduplication:
/// lowercase hex SHA-256 of the body (attributes are not part of it, as on SQS).
pub fn content_deduplication_id(body: &str) -> String {
    lower_hex(&sha2::Sha256::digest(body.as_bytes()))
}

/// Lowercase hex MD5 of message attributes, or `None` when there are none.
pub fn md5_of_attributes(attributes: &MessageAttributes) -> Option<String> {
    if attributes.is_empty() {
        return None;
    }
    let mut hasher = Md5::new();
    for (name, value) in attributes {
        update_with_length(&mut hasher, name.as_bytes());
        update_with_length(&mut hasher, value.data_type.as_bytes());
        let transport = match value.kind() {
            Some(AttributeKind::Binary) => 2u8,
            _ => 1u8,
        };
        hasher.update([transport]);
        update_with_length(&mut hasher, value.value_bytes());
    }
    Some(lower_hex(&hasher.finalize()))
}

/// Lowercase hex of a digest. Every sent message needs one, and
/// `hex::encode` collected the digits as `char`s one by one: with the
/// digest's finishing, over a quarter of the instructions a 256-byte
/// body's `MD5OfMessageBody` took.
fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    hex
}

fn update_with_length(hasher: &mut Md5, bytes: &[u8]) {
    let length = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    hasher.update(length.to_be_bytes());
    hasher.update(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageAttributeValue;

    fn one(
        name: &str,
        data_type: &str,
        string: Option<&str>,
        binary: Option<&[u8]>,
    ) -> MessageAttributes {
        let value = MessageAttributeValue {
            data_type: data_type.to_owned(),
            string_value: string.map(str::to_owned),
            binary_value: binary.map(<[u8]>::to_vec),
        };
        [(name.to_owned(), value)].into_iter().collect()
    }

    #[test]
    fn body_digest_matches_aws() {
        assert_eq!(md5_of_body("message"), "78e731027d8fd50ed642340b7c9a63b3");
    }

    #[test]
    fn attribute_digests_match_the_published_vectors() {
        let string = one("attribName1", "String", Some("attribValue 1"), None);
        assert_eq!(
            md5_of_attributes(&string).unwrap(),
            "19e27d4e946b072f3f58da80d94fd778"
        );
        let number = one(
            "customNumberTypeAttrib",
            "Number.float",
            Some("4563442423554324324264524243.32543234"),
            None,
        );
        assert_eq!(
            md5_of_attributes(&number).unwrap(),
            "9fe1b90bbd9965bdf77bac517c7d2495"
        );
        let binary = one(
            "binaryAttribute",
            "Binary",
            None,
            Some(b"Hello binary world!"),
        );
        assert_eq!(
            md5_of_attributes(&binary).unwrap(),
            "31a92b15d92f8db860eda32aceb656c3"
        );
        let mut all = string;
        all.extend(number);
        all.extend(binary);
        assert_eq!(
            md5_of_attributes(&all).unwrap(),
            "c932db14a896c663f83c260297d594ff"
        );
        let timestamp = one("timestamp", "Number", Some("1493147359900"), None);
        assert_eq!(
            md5_of_attributes(&timestamp).unwrap(),
            "235c5c510d26fb653d073faed50ae77c"
        );
    }

    #[test]
    fn system_attribute_digest_matches_aws() {
        let trace = one(
            "AWSTraceHeader",
            "String",
            Some("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"),
            None,
        );
        assert_eq!(
            md5_of_attributes(&trace).unwrap(),
            "5ae4d5d7636402d80f4eb6d213245a88"
        );
    }

    #[test]
    fn no_attributes_no_digest() {
        assert_eq!(md5_of_attributes(&MessageAttributes::new()), None);
    }

    #[test]
    fn content_deduplication_id_is_the_bodys_sha256() {
        assert_eq!(
            content_deduplication_id("hello"),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
    }
}
