//! Wire protocols. A request is routed on its `Content-Type` and
//! `X-Amz-Target` so that another protocol (the query protocol) can be added
//! beside JSON 1.0 without touching the engine or the actions.

pub mod json;
