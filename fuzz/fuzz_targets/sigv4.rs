//! SigV4 parsing and verification on arbitrary input: whatever the
//! `Authorization` header, query string, path, date and body, finding,
//! checking and verifying a signature returns an answer and never panics.

#![no_main]

use ackbox_server::auth::sigv4::{self, SignableRequest};
use axum::http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Fields separated by 0xFF (never valid UTF-8, so never inside a field).
    let mut fields = data.split(|&byte| byte == 0xFF);
    let mut next = || String::from_utf8_lossy(fields.next().unwrap_or_default()).into_owned();
    let (authorization, query, path, date, signed, body) =
        (next(), next(), next(), next(), next(), next());
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("authorization", &authorization),
        ("x-amz-date", &date),
        ("host", &signed),
        ("x-amz-content-sha256", &signed),
    ] {
        if !value.is_empty()
            && let Ok(value) = HeaderValue::from_str(value)
        {
            headers.insert(name, value);
        }
    }
    let request = SignableRequest {
        method: "POST",
        path: &path,
        query: &query,
        headers: &headers,
        body: body.as_bytes(),
    };
    if let Ok(Some(signature)) = sigv4::parse(&request) {
        let _ = signature.check_scope("us-east-1");
        let _ = signature.check_time(1_764_700_000_000);
        let _ = signature.check_time(i64::MAX / 4);
        let _ = signature.verify(&request, "fuzz-secret-0123456789");
    }
    let _ = sigv4::parse_amz_date(&date);
});
