//! What every benchmark sends: W1's message.

use ackbox_log::record::Content;

/// A W1 message: 256 B body, an id, its MD5, a sender.
pub(crate) fn content() -> Content {
    Content {
        message_id: "0d6c8f2e-8a3b-4c7e-9a41-3b5f0e2d9c11".to_owned(),
        body: "x".repeat(256),
        md5_of_body: "4c2b1e8f0a9d7c6b5a4f3e2d1c0b9a88".to_owned(),
        sender_id: "AIDAEXAMPLE".to_owned(),
        ..Content::default()
    }
}
