//! What one connection or request may cost the server: body and header
//! sizes, the number of connections, and how long each phase may take.
//!
//! Every limit has a default that no well-behaved SQS client comes near and
//! that keeps a hostile one cheap: a body over the cap is refused from its
//! `Content-Length` before it is read, a client that sends its headers or
//! body too slowly (slowloris) is cut off, and connections beyond the cap
//! wait in the kernel's accept queue instead of costing memory.

use std::time::Duration;

use ackbox_core::limits::MAX_WAIT_TIME_SECONDS;

/// The limits of the HTTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body, bytes. Above SQS's 1 MiB payload limit because
    /// JSON escaping can grow a legal payload up to six times; the payload
    /// limits themselves are checked after decoding.
    pub max_body_bytes: usize,
    /// Largest request head (request line and headers), bytes.
    pub max_header_bytes: usize,
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// Longest wait for a request's headers, from connection or from the
    /// end of the previous response (so it also ends idle connections),
    /// and for a TLS handshake.
    pub header_timeout: Duration,
    /// Longest wait for a request's whole body once its headers arrived.
    pub body_timeout: Duration,
    /// Longest a request may take from its headers to its response,
    /// long polls included; must exceed the longest long poll.
    pub request_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 * 1_048_576,
            max_header_bytes: 16 * 1_024,
            max_connections: 4_096,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
        }
    }
}

/// A limit that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsError {
    /// A limit below the smallest value that can serve SQS clients.
    #[error("{name} must be at least {minimum}; got {value}")]
    TooSmall {
        /// The limit's flag name.
        name: &'static str,
        /// Its smallest workable value.
        minimum: u64,
        /// The value given.
        value: u64,
    },
}

/// Smallest body cap: a full 1 MiB SQS payload must fit.
pub const MIN_BODY_BYTES: usize = 1_048_576 + 64 * 1_024;
/// Smallest header cap: SigV4 headers with a few signed headers must fit.
pub const MIN_HEADER_BYTES: usize = 4_096;

impl HttpLimits {
    /// Checks that every limit can serve SQS clients.
    pub fn validate(&self) -> Result<(), LimitsError> {
        let too_small = |name, minimum: u64, value: u64| {
            (value < minimum).then_some(LimitsError::TooSmall {
                name,
                minimum,
                value,
            })
        };
        let seconds = |duration: Duration| duration.as_secs();
        let checks = [
            too_small(
                "--max-body-bytes",
                MIN_BODY_BYTES as u64,
                self.max_body_bytes as u64,
            ),
            too_small(
                "--max-header-bytes",
                MIN_HEADER_BYTES as u64,
                self.max_header_bytes as u64,
            ),
            too_small("--max-connections", 1, self.max_connections as u64),
            too_small(
                "--header-timeout-ms",
                1,
                self.header_timeout.as_millis() as u64,
            ),
            too_small("--body-timeout-ms", 1, self.body_timeout.as_millis() as u64),
            // A long poll may wait 20 s and must still be answered.
            too_small(
                "--request-timeout-secs",
                u64::from(MAX_WAIT_TIME_SECONDS.unsigned_abs()) + 1,
                seconds(self.request_timeout),
            ),
        ];
        match checks.into_iter().flatten().next() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_unworkable_limits_are_named() {
        HttpLimits::default().validate().unwrap();
        let short_request = HttpLimits {
            request_timeout: Duration::from_secs(5),
            ..HttpLimits::default()
        };
        assert_eq!(
            short_request.validate().unwrap_err().to_string(),
            "--request-timeout-secs must be at least 21; got 5"
        );
        let tiny_body = HttpLimits {
            max_body_bytes: 1_000,
            ..HttpLimits::default()
        };
        assert!(
            tiny_body
                .validate()
                .unwrap_err()
                .to_string()
                .starts_with("--max-body-bytes must be at least")
        );
    }
}
