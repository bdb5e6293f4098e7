//! AWS Signature Version 4 (`AWS4-HMAC-SHA256`): finding a request's
//! signature, rebuilding its canonical request, and signing or verifying it.
//!
//! Both places AWS clients put a signature are understood: the
//! `Authorization` header, and the query string of a presigned URL
//! (`X-Amz-Algorithm`, `X-Amz-Credential`, `X-Amz-Date`, `X-Amz-Expires`,
//! `X-Amz-SignedHeaders`, `X-Amz-Signature`). The canonical form follows the
//! AWS specification as the SDKs implement it: the path normalized and
//! percent-encoded a second time, query pairs decoded, re-encoded and sorted,
//! header values trimmed with inner runs of spaces collapsed. The same code
//! signs (the CLI, tests) and verifies (the server), and the server's tests
//! check it against the AWS SDK's own signer.
//!
//! One file though it is long: it is one algorithm, and its canonical
//! request is only checkable read from end to end.
//!
//! Everything here is a pure function of the request and the secret, so it
//! can be fuzzed without a server.

use std::fmt::Write as _;

use ackbox_core::clock::Timestamp;
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::utc::UtcTime;
use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use sha2::{Digest, Sha256};

/// The only algorithm accepted.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// The service presigned URLs are scoped to.
pub const SERVICE: &str = "sqs";
/// The services a credential scope may name: this port answers SQS and SNS.
pub const SERVICES: &[&str] = &["sqs", "sns"];
/// How far a signature's time may be from the server's, either way.
pub const MAX_CLOCK_SKEW_MS: i64 = 5 * 60 * 1_000;
/// The longest validity a presigned URL may ask for (seven days, as AWS).
pub const MAX_PRESIGNED_EXPIRES_SECS: i64 = 604_800;
/// The payload hash of requests whose body is not signed.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

const SCOPE_TERMINATOR: &str = "aws4_request";

/// RFC 3986 unreserved characters stay; everything else is percent-encoded.
const QUERY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
/// As [`QUERY_ENCODE`], keeping the path's separators.
const PATH_ENCODE: &AsciiSet = &QUERY_ENCODE.remove(b'/');

/// The parts of an HTTP request a signature covers.
#[derive(Debug, Clone, Copy)]
pub struct SignableRequest<'a> {
    /// `POST`, `GET`, …
    pub method: &'a str,
    /// The path exactly as it arrived, still percent-encoded.
    pub path: &'a str,
    /// The query string as it arrived, without `?`; empty when there is none.
    pub query: &'a str,
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The whole body.
    pub body: &'a [u8],
}

/// Where a request carried its signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureLocation {
    /// The `Authorization` header.
    Header,
    /// A presigned URL's query string, valid for `expires_secs` after its date.
    Query {
        /// `X-Amz-Expires`.
        expires_secs: i64,
    },
}

/// A signature as the request states it: who signed, for which scope,
/// when, over which headers. Nothing in it is verified yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The access key id of the credential.
    pub access_key_id: String,
    /// The credential scope's date, `YYYYMMDD`.
    pub scope_date: String,
    /// The credential scope's region.
    pub region: String,
    /// The credential scope's service.
    pub service: String,
    /// Lower-case names of the signed headers, in the order given.
    pub signed_headers: Vec<String>,
    /// The signature, lower-case hex.
    pub signature: String,
    /// The signing time as sent, `YYYYMMDD'T'HHMMSS'Z'`.
    pub amz_date: String,
    /// The signing time, epoch milliseconds.
    pub signed_at: Timestamp,
    /// Header or query string.
    pub location: SignatureLocation,
}

fn incomplete(message: impl Into<String>) -> SqsError {
    SqsError::new(ErrorCode::IncompleteSignature, message)
}

fn mismatch(message: impl Into<String>) -> SqsError {
    SqsError::new(ErrorCode::SignatureDoesNotMatch, message)
}

/// The text AWS answers a wrong signature with.
const MISMATCH_TEXT: &str = "The request signature we calculated does not match the signature you \
     provided. Check your AWS Secret Access Key and signing method. Consult the service \
     documentation for details.";

/// Finds and parses the request's signature; `Ok(None)` when it carries none.
pub fn parse(request: &SignableRequest<'_>) -> Result<Option<Signature>, SqsError> {
    let header = request
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .map(|value| {
            value
                .to_str()
                .map_err(|_| incomplete("The Authorization header must be ASCII text."))
        })
        .transpose()?;
    let query = query_pairs(request.query);
    let presigned = query.iter().any(|(name, _)| name == "X-Amz-Algorithm");
    match (header, presigned) {
        (Some(_), true) => Err(incomplete(
            "Only one authentication mechanism is allowed: the Authorization header or the \
             X-Amz-Algorithm query parameter, not both.",
        )),
        (Some(header), false) => parse_header(header, request.headers).map(Some),
        (None, true) => parse_query(&query).map(Some),
        (None, false) => Ok(None),
    }
}

fn parse_header(header: &str, headers: &HeaderMap) -> Result<Signature, SqsError> {
    let (algorithm, rest) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
    if algorithm != ALGORITHM {
        return Err(incomplete(format!(
            "Unsupported AWS 'algorithm': '{algorithm}'; this server accepts {ALGORITHM} only."
        )));
    }
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let Some((name, value)) = part.split_once('=') else {
            return Err(incomplete(format!(
                "Authorization header component '{part}' must have the form Name=Value."
            )));
        };
        match name {
            "Credential" => credential = Some(value),
            "SignedHeaders" => signed_headers = Some(value),
            "Signature" => signature = Some(value),
            _ => {}
        }
    }
    let missing: Vec<&str> = [
        ("Credential", credential.is_none()),
        ("Signature", signature.is_none()),
        ("SignedHeaders", signed_headers.is_none()),
    ]
    .into_iter()
    .filter_map(|(name, absent)| absent.then_some(name))
    .collect();
    if !missing.is_empty() {
        return Err(incomplete(format!(
            "Authorization header requires {} parameter(s); got Authorization={header}",
            missing
                .iter()
                .map(|name| format!("'{name}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let amz_date = match headers.get("x-amz-date") {
        Some(value) => value
            .to_str()
            .map_err(|_| incomplete("The X-Amz-Date header must be ASCII text."))?
            .trim()
            .to_owned(),
        None => match headers.get(axum::http::header::DATE) {
            Some(value) => {
                let text = value
                    .to_str()
                    .map_err(|_| incomplete("The Date header must be ASCII text."))?;
                let at = httpdate::parse_http_date(text.trim()).map_err(|_| {
                    incomplete(format!(
                        "The Date header {text:?} is not an HTTP date (RFC 7231)."
                    ))
                })?;
                let millis = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |elapsed| {
                        i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
                    });
                format_amz_date(millis)
            }
            None => {
                return Err(incomplete(
                    "Authorization header requires existence of either a 'X-Amz-Date' or a \
                     'Date' header.",
                ));
            }
        },
    };
    build(
        credential.unwrap_or_default(),
        signed_headers.unwrap_or_default(),
        signature.unwrap_or_default(),
        amz_date,
        SignatureLocation::Header,
    )
}

fn parse_query(query: &[(String, String)]) -> Result<Signature, SqsError> {
    let get = |name: &str| {
        query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    let algorithm = get("X-Amz-Algorithm").unwrap_or_default();
    if algorithm != ALGORITHM {
        return Err(incomplete(format!(
            "Unsupported AWS 'algorithm': '{algorithm}'; this server accepts {ALGORITHM} only."
        )));
    }
    let required = [
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    ];
    let missing: Vec<&str> = required
        .into_iter()
        .filter(|name| get(name).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(incomplete(format!(
            "A presigned request requires the query parameters {}; it lacks {}.",
            required.join(", "),
            missing.join(", ")
        )));
    }
    let expires = get("X-Amz-Expires").unwrap_or_default();
    let expires_secs = expires
        .parse::<i64>()
        .ok()
        .filter(|seconds| (1..=MAX_PRESIGNED_EXPIRES_SECS).contains(seconds))
        .ok_or_else(|| {
            incomplete(format!(
                "X-Amz-Expires must be a number of seconds from 1 to \
                 {MAX_PRESIGNED_EXPIRES_SECS}; got {expires:?}."
            ))
        })?;
    build(
        get("X-Amz-Credential").unwrap_or_default(),
        get("X-Amz-SignedHeaders").unwrap_or_default(),
        get("X-Amz-Signature").unwrap_or_default(),
        get("X-Amz-Date").unwrap_or_default().to_owned(),
        SignatureLocation::Query { expires_secs },
    )
}

fn build(
    credential: &str,
    signed_headers: &str,
    signature: &str,
    amz_date: String,
    location: SignatureLocation,
) -> Result<Signature, SqsError> {
    let parts: Vec<&str> = credential.split('/').collect();
    let [access_key_id, scope_date, region, service, terminator] = parts.as_slice() else {
        return Err(incomplete(format!(
            "Credential must have the form <AccessKeyId>/<YYYYMMDD>/<region>/{SERVICE}/\
             {SCOPE_TERMINATOR}; got {credential:?}."
        )));
    };
    if access_key_id.is_empty() {
        return Err(incomplete("Credential must name an access key id."));
    }
    if *terminator != SCOPE_TERMINATOR {
        return Err(mismatch(format!(
            "Credential should be scoped with a valid terminator: '{SCOPE_TERMINATOR}', not \
             '{terminator}'."
        )));
    }
    if signature.len() != 64 || !signature.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(incomplete(format!(
            "Signature must be 64 hexadecimal digits; got {} characters.",
            signature.len()
        )));
    }
    let signed_headers: Vec<String> = signed_headers
        .split(';')
        .filter(|name| !name.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    if !signed_headers.iter().any(|name| name == "host") {
        return Err(incomplete(
            "'Host' must be a 'SignedHeader' in the AWS Authorization.",
        ));
    }
    let signed_at = parse_amz_date(&amz_date).ok_or_else(|| {
        incomplete(format!(
            "The signing date {amz_date:?} must have the form YYYYMMDD'T'HHMMSS'Z'."
        ))
    })?;
    Ok(Signature {
        access_key_id: (*access_key_id).to_owned(),
        scope_date: (*scope_date).to_owned(),
        region: (*region).to_owned(),
        service: (*service).to_owned(),
        signed_headers,
        signature: signature.to_ascii_lowercase(),
        amz_date,
        signed_at,
        location,
    })
}

impl Signature {
    /// Checks the credential scope: this server's region, the `sqs` or
    /// `sns` service, and the date of the signing time.
    pub fn check_scope(&self, region: &str) -> Result<(), SqsError> {
        if !SERVICES.contains(&self.service.as_str()) {
            return Err(mismatch(format!(
                "Credential should be scoped to correct service: 'sqs' or 'sns', not '{}'.",
                self.service
            )));
        }
        if self.region != region {
            return Err(mismatch(format!(
                "Credential should be scoped to a valid region: '{region}', not '{}'.",
                self.region
            )));
        }
        if !self.amz_date.starts_with(&self.scope_date) || self.scope_date.len() != 8 {
            return Err(mismatch(format!(
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of \
                 date from HTTP: '{}' != '{}', from '{}'.",
                self.scope_date,
                self.amz_date.get(..8).unwrap_or_default(),
                self.amz_date
            )));
        }
        Ok(())
    }

    /// Checks the signing time against `now`: within the allowed skew, and
    /// for a presigned URL, not past its expiry.
    pub fn check_time(&self, now: Timestamp) -> Result<(), SqsError> {
        if self.signed_at > now + MAX_CLOCK_SKEW_MS {
            return Err(mismatch(format!(
                "Signature not yet current: {} is still later than {} ({} + 5 min.)",
                self.amz_date,
                format_amz_date(now + MAX_CLOCK_SKEW_MS),
                format_amz_date(now)
            )));
        }
        match self.location {
            SignatureLocation::Header if self.signed_at < now - MAX_CLOCK_SKEW_MS => {
                Err(mismatch(format!(
                    "Signature expired: {} is now earlier than {} ({} - 5 min.)",
                    self.amz_date,
                    format_amz_date(now - MAX_CLOCK_SKEW_MS),
                    format_amz_date(now)
                )))
            }
            SignatureLocation::Query { expires_secs }
                if now > self.signed_at + expires_secs * 1_000 =>
            {
                Err(SqsError::new(
                    ErrorCode::RequestExpired,
                    format!(
                        "Request has expired: it was signed at {} for {expires_secs} s, \
                         until {}; it is now {}.",
                        self.amz_date,
                        format_amz_date(self.signed_at + expires_secs * 1_000),
                        format_amz_date(now)
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Verifies the signature with `secret`, in constant time.
    pub fn verify(&self, request: &SignableRequest<'_>, secret: &str) -> Result<(), SqsError> {
        let expected = hex::decode(&self.signature)
            .map_err(|_| incomplete("Signature must be hexadecimal."))?;
        let body_hash = hex::encode(Sha256::digest(request.body));
        if let Some(claimed) = request.headers.get("x-amz-content-sha256")
            && claimed.as_bytes() != body_hash.as_bytes()
        {
            // A body that is not the one signed, or an unsigned body: either
            // way the signature would not cover what the broker acts on.
            return Err(mismatch(
                "The x-amz-content-sha256 header does not match the SHA-256 of the request body.",
            ));
        }
        let mut candidates = vec![body_hash];
        // Presigned URLs of some signers carry no body hash; with no body
        // there is nothing unsigned to act on.
        if matches!(self.location, SignatureLocation::Query { .. }) && request.body.is_empty() {
            candidates.push(UNSIGNED_PAYLOAD.to_owned());
        }
        let key = signing_key(secret, &self.scope_date, &self.region, &self.service);
        for payload_hash in &candidates {
            let canonical =
                canonical_request(request, &self.signed_headers, payload_hash, self.location);
            let to_sign = string_to_sign(&self.amz_date, &self.scope(), &canonical);
            let mut mac = hmac_sha256(&key);
            mac.update(to_sign.as_bytes());
            if mac.verify_slice(&expected).is_ok() {
                return Ok(());
            }
            tracing::debug!(canonical_request = %canonical, string_to_sign = %to_sign, "signature mismatch");
        }
        Err(mismatch(MISMATCH_TEXT))
    }

    fn scope(&self) -> String {
        format!(
            "{}/{}/{}/{SCOPE_TERMINATOR}",
            self.scope_date, self.region, self.service
        )
    }
}

fn hmac_sha256(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC-SHA256 accepts keys of any length")
}

fn hmac(key: &[u8], data: &str) -> [u8; 32] {
    let mut mac = hmac_sha256(key);
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().into()
}

/// The key derived from `secret` for one day, region and service.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let date_key = hmac(format!("AWS4{secret}").as_bytes(), date);
    let region_key = hmac(&date_key, region);
    let service_key = hmac(&region_key, service);
    hmac(&service_key, SCOPE_TERMINATOR)
}

/// The string a signature is the HMAC of.
pub fn string_to_sign(amz_date: &str, scope: &str, canonical_request: &str) -> String {
    format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    )
}

/// The canonical request over `signed_headers` (lower-case names).
/// A presigned request's own `X-Amz-Signature` is left out of its query.
pub fn canonical_request(
    request: &SignableRequest<'_>,
    signed_headers: &[String],
    payload_hash: &str,
    location: SignatureLocation,
) -> String {
    let mut canonical = String::with_capacity(256);
    canonical.push_str(request.method);
    canonical.push('\n');
    canonical.push_str(&canonical_path(request.path));
    canonical.push('\n');
    let mut pairs: Vec<(String, String)> = query_pairs(request.query)
        .into_iter()
        .filter(|(name, _)| {
            !(matches!(location, SignatureLocation::Query { .. }) && name == "X-Amz-Signature")
        })
        .map(|(name, value)| {
            (
                utf8_percent_encode(&name, QUERY_ENCODE).to_string(),
                utf8_percent_encode(&value, QUERY_ENCODE).to_string(),
            )
        })
        .collect();
    pairs.sort();
    for (index, (name, value)) in pairs.iter().enumerate() {
        if index > 0 {
            canonical.push('&');
        }
        let _ = write!(canonical, "{name}={value}");
    }
    canonical.push('\n');
    let mut sorted: Vec<&str> = signed_headers.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    for name in &sorted {
        canonical.push_str(name);
        canonical.push(':');
        let values: Vec<String> = request
            .headers
            .get_all(*name)
            .iter()
            .map(|value| collapse_spaces(&String::from_utf8_lossy(value.as_bytes())))
            .collect();
        canonical.push_str(&values.join(","));
        canonical.push('\n');
    }
    canonical.push('\n');
    canonical.push_str(&sorted.join(";"));
    canonical.push('\n');
    canonical.push_str(payload_hash);
    canonical
}

/// The path with dot segments and empty segments removed, then
/// percent-encoded again (SigV4's double encoding for every service but S3).
fn canonical_path(path: &str) -> String {
    let path = if path.is_empty() { "/" } else { path };
    let normalized = if path.contains('.') || path.contains("//") || !path.starts_with('/') {
        let mut segments: Vec<&str> = Vec::new();
        for segment in path.split('/') {
            match segment {
                "" | "." => {}
                ".." => {
                    segments.pop();
                }
                other => segments.push(other),
            }
        }
        let mut joined = format!("/{}", segments.join("/"));
        if (path.ends_with('/') || path.ends_with("/.") || path.ends_with("/.."))
            && !joined.ends_with('/')
        {
            joined.push('/');
        }
        joined
    } else {
        path.to_owned()
    };
    utf8_percent_encode(&normalized, PATH_ENCODE).to_string()
}

fn collapse_spaces(value: &str) -> String {
    let mut collapsed = String::with_capacity(value.len());
    for word in value
        .trim_matches(' ')
        .split(' ')
        .filter(|word| !word.is_empty())
    {
        if !collapsed.is_empty() {
            collapsed.push(' ');
        }
        collapsed.push_str(word);
    }
    collapsed
}

/// The query string's pairs, percent-decoded (`+` as a space).
fn query_pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect()
}

/// What [`sign_headers`] needs to know of the signer.
#[derive(Debug, Clone, Copy)]
pub struct SigningParams<'a> {
    /// The access key id.
    pub access_key_id: &'a str,
    /// Its secret.
    pub secret_access_key: &'a str,
    /// The region of the credential scope.
    pub region: &'a str,
    /// The signing time, epoch milliseconds.
    pub now: Timestamp,
}

/// Signs a request in its headers: returns the `X-Amz-Date` and
/// `Authorization` values to add. `request.headers` must already hold every
/// header to be signed (at least `host`); all of them are signed except
/// `authorization` itself.
pub fn sign_headers(request: &SignableRequest<'_>, params: SigningParams<'_>) -> (String, String) {
    let amz_date = format_amz_date(params.now);
    let date = &amz_date[..8];
    let mut signed_headers: Vec<String> = request
        .headers
        .keys()
        .map(|name| name.as_str().to_owned())
        .filter(|name| name != "authorization" && name != "x-amz-date")
        .chain(std::iter::once("x-amz-date".to_owned()))
        .collect();
    signed_headers.sort_unstable();
    signed_headers.dedup();
    let mut headers = request.headers.clone();
    if let Ok(value) = axum::http::HeaderValue::from_str(&amz_date) {
        headers.insert("x-amz-date", value);
    }
    let with_date = SignableRequest {
        headers: &headers,
        ..*request
    };
    let payload_hash = hex::encode(Sha256::digest(request.body));
    let canonical = canonical_request(
        &with_date,
        &signed_headers,
        &payload_hash,
        SignatureLocation::Header,
    );
    let scope = format!("{date}/{}/{SERVICE}/{SCOPE_TERMINATOR}", params.region);
    let to_sign = string_to_sign(&amz_date, &scope, &canonical);
    let key = signing_key(params.secret_access_key, date, params.region, SERVICE);
    let signature = hex::encode(hmac(&key, &to_sign));
    let authorization = format!(
        "{ALGORITHM} Credential={}/{scope}, SignedHeaders={}, Signature={signature}",
        params.access_key_id,
        signed_headers.join(";")
    );
    (amz_date, authorization)
}

/// `YYYYMMDD'T'HHMMSS'Z'` for epoch milliseconds.
pub fn format_amz_date(millis: Timestamp) -> String {
    let time = UtcTime::from_epoch_millis(millis);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        time.year, time.month, time.day, time.hour, time.minute, time.second
    )
}

/// Epoch milliseconds of a `YYYYMMDD'T'HHMMSS'Z'` time.
pub fn parse_amz_date(text: &str) -> Option<Timestamp> {
    let bytes = text.as_bytes();
    if bytes.len() != 16 || bytes[8] != b'T' || bytes[15] != b'Z' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = text.get(range)?;
        digits
            .bytes()
            .all(|byte| byte.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    UtcTime {
        year: number(0..4)?,
        month: number(4..6)?,
        day: number(6..8)?,
        hour: number(9..11)?,
        minute: number(11..13)?,
        second: number(13..15)?,
    }
    .to_epoch_millis()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    // The "get-vanilla-query-order-key-case" style example of the AWS
    // SigV4 documentation (IAM ListUsers), whose signature AWS publishes.
    const AWS_EXAMPLE_SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

    fn aws_example_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("iam.amazonaws.com"));
        headers.insert(
            "content-type",
            HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8"),
        );
        headers.insert("x-amz-date", HeaderValue::from_static("20150830T123600Z"));
        headers
    }

    #[test]
    fn the_aws_documentation_example_canonicalizes_and_signs_as_published() {
        let headers = aws_example_headers();
        let request = SignableRequest {
            method: "GET",
            path: "/",
            query: "Action=ListUsers&Version=2010-05-08",
            headers: &headers,
            body: b"",
        };
        let signed = ["content-type", "host", "x-amz-date"].map(str::to_owned);
        let canonical = canonical_request(
            &request,
            &signed,
            &hex::encode(Sha256::digest(b"")),
            SignatureLocation::Header,
        );
        assert_eq!(
            hex::encode(Sha256::digest(canonical.as_bytes())),
            "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59"
        );
        let key = signing_key(AWS_EXAMPLE_SECRET, "20150830", "us-east-1", "iam");
        assert_eq!(
            hex::encode(key),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
        let to_sign = string_to_sign(
            "20150830T123600Z",
            "20150830/us-east-1/iam/aws4_request",
            &canonical,
        );
        assert_eq!(
            hex::encode(hmac(&key, &to_sign)),
            "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    fn signed_request(headers: &mut HeaderMap, body: &[u8], now: Timestamp) -> Signature {
        headers.insert("host", HeaderValue::from_static("127.0.0.1:9324"));
        headers.insert(
            "x-amz-target",
            HeaderValue::from_static("AmazonSQS.ListQueues"),
        );
        let (amz_date, authorization) = sign_headers(
            &post(headers, body),
            SigningParams {
                access_key_id: "AKIDEXAMPLE",
                secret_access_key: AWS_EXAMPLE_SECRET,
                region: "us-east-1",
                now,
            },
        );
        headers.insert("x-amz-date", HeaderValue::from_str(&amz_date).unwrap());
        headers.insert(
            "authorization",
            HeaderValue::from_str(&authorization).unwrap(),
        );
        parse(&post(headers, body)).unwrap().unwrap()
    }

    const NOW: Timestamp = 1_764_700_000_000;

    fn post<'a>(headers: &'a HeaderMap, body: &'a [u8]) -> SignableRequest<'a> {
        SignableRequest {
            method: "POST",
            path: "/",
            query: "",
            headers,
            body,
        }
    }

    #[test]
    fn what_sign_headers_signs_verifies_and_nothing_else_does() {
        let mut headers = HeaderMap::new();
        let body = br#"{"QueueNamePrefix":"a"}"#;
        let signature = signed_request(&mut headers, body, NOW);
        assert_eq!(signature.access_key_id, "AKIDEXAMPLE");
        assert_eq!(signature.signed_at, NOW / 1_000 * 1_000);
        signature.check_scope("us-east-1").unwrap();
        signature.check_time(NOW).unwrap();
        signature
            .verify(&post(&headers, body), AWS_EXAMPLE_SECRET)
            .unwrap();
        let refused = |headers: &HeaderMap, body: &[u8], secret: &str| {
            signature
                .verify(&post(headers, body), secret)
                .unwrap_err()
                .code
        };
        assert_eq!(
            refused(&headers, body, "another secret"),
            ErrorCode::SignatureDoesNotMatch
        );
        assert_eq!(
            refused(&headers, b"{}", AWS_EXAMPLE_SECRET),
            ErrorCode::SignatureDoesNotMatch,
            "another body"
        );
        let mut tampered = headers.clone();
        tampered.insert(
            "x-amz-target",
            HeaderValue::from_static("AmazonSQS.DeleteQueue"),
        );
        assert_eq!(
            refused(&tampered, body, AWS_EXAMPLE_SECRET),
            ErrorCode::SignatureDoesNotMatch,
            "another action"
        );
    }

    #[test]
    fn scope_and_time_are_checked() {
        let mut headers = HeaderMap::new();
        let signature = signed_request(&mut headers, b"", NOW);
        assert_eq!(
            signature.check_scope("eu-west-1").unwrap_err().code,
            ErrorCode::SignatureDoesNotMatch
        );
        let old = signature
            .check_time(NOW + MAX_CLOCK_SKEW_MS + 1_000)
            .unwrap_err();
        assert_eq!(old.code, ErrorCode::SignatureDoesNotMatch);
        assert!(
            old.message.starts_with("Signature expired: "),
            "{}",
            old.message
        );
        let early = signature
            .check_time(NOW - MAX_CLOCK_SKEW_MS - 1_000)
            .unwrap_err();
        assert!(
            early.message.starts_with("Signature not yet current: "),
            "{}",
            early.message
        );
        signature
            .check_time(NOW + MAX_CLOCK_SKEW_MS - 1_000)
            .unwrap();
        let presigned = Signature {
            location: SignatureLocation::Query { expires_secs: 60 },
            ..signature
        };
        presigned.check_time(NOW + 59_000).unwrap();
        assert_eq!(
            presigned.check_time(NOW + 61_000).unwrap_err().code,
            ErrorCode::RequestExpired
        );
    }

    #[test]
    fn malformed_authorization_headers_are_incomplete_signatures() {
        for header in [
            "AWS4-HMAC-SHA256",
            "AWS4-HMAC-SHA256 Credential=AKID/20261202/us-east-1/sqs/aws4_request",
            "AWS4-HMAC-SHA256 Credential=AKID/20261202, SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=AKID/20261202/us-east-1/sqs/aws4_request, SignedHeaders=x-amz-date, Signature=0000000000000000000000000000000000000000000000000000000000000000",
            "AWS4-ECDSA-P256-SHA256 Credential=AKID/20261202/sqs/aws4_request",
            "Basic dXNlcjpwYXNz",
            "AWS4-HMAC-SHA256 garbage",
        ] {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", HeaderValue::from_str(header).unwrap());
            headers.insert("x-amz-date", HeaderValue::from_static("20261202T000000Z"));
            let request = SignableRequest {
                method: "POST",
                path: "/",
                query: "",
                headers: &headers,
                body: b"",
            };
            assert_eq!(
                parse(&request).unwrap_err().code,
                ErrorCode::IncompleteSignature,
                "{header}"
            );
        }
    }

    #[test]
    fn paths_are_normalized_and_encoded_twice() {
        assert_eq!(canonical_path(""), "/");
        assert_eq!(canonical_path("/"), "/");
        assert_eq!(
            canonical_path("/000000000000/orders"),
            "/000000000000/orders"
        );
        assert_eq!(canonical_path("/a/./b/../c//d"), "/a/c/d");
        assert_eq!(canonical_path("/a%20b"), "/a%2520b");
        assert_eq!(canonical_path("/a/b/"), "/a/b/");
    }

    #[test]
    fn amz_dates_round_trip_and_reject_nonsense() {
        for millis in [0, NOW / 1_000 * 1_000, 951_782_400_000, 4_102_444_799_000] {
            assert_eq!(parse_amz_date(&format_amz_date(millis)), Some(millis));
        }
        assert_eq!(format_amz_date(1_440_938_160_000), "20150830T123600Z");
        for bad in [
            "",
            "20150830",
            "20150830T123600",
            "20151330T123600Z",
            "20150230T000000Z",
            "2015083OT123600Z",
        ] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
    }
}
