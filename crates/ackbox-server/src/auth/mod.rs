//! Who is calling, and what they may do.
//!
//! An [`Authenticator`] is either open (every request is the anonymous
//! caller, for local development) or holds the keys of a credentials file
//! and requires every API request to carry a valid AWS Signature Version 4.
//! The dashboard and `/metrics`, which browsers and scrapers reach without
//! an SDK, use the same keys through HTTP Basic authentication.
//!
//! What a [`Caller`] may do is decided per action and per queue by the
//! action layer ([`crate::action`]), which names the queues each request
//! touches before it runs.

pub mod credentials;
pub mod sigv4;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use ackbox_core::clock::Timestamp;
use ackbox_core::error::{ErrorCode, SqsError};
use axum::http::HeaderMap;
use base64::Engine as _;
use subtle::ConstantTimeEq;

use self::credentials::{AccessKey, Credentials, CredentialsError};
use self::sigv4::SignableRequest;

/// The identity of a request.
#[derive(Debug, Clone)]
pub enum Caller {
    /// No authentication is configured: everything is allowed.
    Anonymous,
    /// A verified access key, allowed what its entry allows.
    Key(Arc<AccessKey>),
}

impl Caller {
    /// The name audit records use: the access key id, or `anonymous`.
    pub fn principal(&self) -> &str {
        match self {
            Self::Anonymous => "anonymous",
            Self::Key(key) => &key.access_key_id,
        }
    }

    /// The `SenderId` its sends carry: the access key id, or the account id
    /// when requests are not authenticated.
    pub fn sender_id(&self, account_id: &str) -> String {
        match self {
            Self::Anonymous => account_id.to_owned(),
            Self::Key(key) => key.access_key_id.clone(),
        }
    }

    /// Whether the caller may use the queue `name`.
    pub fn may_use_queue(&self, name: &str) -> bool {
        match self {
            Self::Anonymous => true,
            Self::Key(key) => key.may_use_queue(name),
        }
    }

    /// Whether the caller may use the topic `name`.
    pub fn may_use_topic(&self, name: &str) -> bool {
        match self {
            Self::Anonymous => true,
            Self::Key(key) => key.may_use_topic(name),
        }
    }

    /// Whether the caller holds the IAM-style `permission`.
    pub fn may_perform(&self, permission: &str) -> bool {
        match self {
            Self::Anonymous => true,
            Self::Key(key) => key.may_perform(permission),
        }
    }
}

/// How requests are authenticated.
#[derive(Debug)]
pub struct Authenticator {
    /// `None`: open. Otherwise the credentials file and its keys as last
    /// loaded; written by [`Authenticator::reload`], read by every request.
    keys: Option<(PathBuf, RwLock<Arc<Credentials>>)>,
}

/// Why a dashboard or metrics request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BasicAuthFailure {
    /// No usable `Authorization: Basic` header: ask the browser for one.
    Missing,
    /// An unknown key or a wrong secret.
    Invalid,
}

impl Authenticator {
    /// Every request is allowed, as the anonymous caller.
    pub fn open() -> Self {
        Self { keys: None }
    }

    /// Requests must be signed by a key of the credentials file at `path`.
    pub fn sigv4(path: &Path) -> Result<Self, CredentialsError> {
        let credentials = Credentials::load(path)?;
        Ok(Self {
            keys: Some((path.to_owned(), RwLock::new(Arc::new(credentials)))),
        })
    }

    /// Whether requests need credentials.
    pub fn is_required(&self) -> bool {
        self.keys.is_some()
    }

    /// Reads the credentials file again (key rotation). On error the keys
    /// in use stay; returns how many keys are now in force.
    pub fn reload(&self) -> Result<usize, CredentialsError> {
        let Some((path, current)) = &self.keys else {
            return Ok(0);
        };
        let credentials = Credentials::load(path)?;
        let count = credentials.len();
        *current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(credentials);
        Ok(count)
    }

    fn key(&self, access_key_id: &str) -> Option<Option<Arc<AccessKey>>> {
        let (_, current) = self.keys.as_ref()?;
        let credentials = current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        Some(credentials.get(access_key_id))
    }

    /// Authenticates an API request signed with SigV4, at time `now`, for
    /// this server's `region`.
    pub fn authenticate(
        &self,
        request: &SignableRequest<'_>,
        now: Timestamp,
        region: &str,
    ) -> Result<Caller, SqsError> {
        if self.keys.is_none() {
            return Ok(Caller::Anonymous);
        }
        let Some(signature) = sigv4::parse(request)? else {
            return Err(SqsError::new(
                ErrorCode::MissingAuthenticationToken,
                "The request must contain either a valid (registered) AWS access key ID or \
                 X.509 certificate.",
            ));
        };
        let key = self
            .key(&signature.access_key_id)
            .flatten()
            .ok_or_else(invalid_client_token)?;
        signature.check_scope(region)?;
        signature.check_time(now)?;
        signature.verify(request, key.secret())?;
        Ok(Caller::Key(key))
    }

    /// Authenticates a browser or scraper by HTTP Basic authentication:
    /// the access key id as user name, its secret as password.
    pub fn authenticate_basic(&self, headers: &HeaderMap) -> Result<Caller, BasicAuthFailure> {
        if self.keys.is_none() {
            return Ok(Caller::Anonymous);
        }
        let credentials = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Basic "))
            .and_then(|encoded| {
                base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .ok()
            })
            .and_then(|decoded| String::from_utf8(decoded).ok())
            .ok_or(BasicAuthFailure::Missing)?;
        let (id, secret) = credentials
            .split_once(':')
            .ok_or(BasicAuthFailure::Invalid)?;
        let key = self.key(id).flatten().ok_or(BasicAuthFailure::Invalid)?;
        if bool::from(key.secret().as_bytes().ct_eq(secret.as_bytes())) {
            Ok(Caller::Key(key))
        } else {
            Err(BasicAuthFailure::Invalid)
        }
    }
}

fn invalid_client_token() -> SqsError {
    SqsError::new(
        ErrorCode::InvalidClientTokenId,
        "The X.509 certificate or AWS access key ID provided does not exist in our records.",
    )
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn authenticator() -> (tempfile::TempDir, Authenticator) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials.toml");
        std::fs::write(
            &path,
            "[[keys]]\naccess_key_id = \"AKID\"\nsecret_access_key = \"0123456789abcdef\"\n\
             allow_queues = [\"*\"]\nallow_actions = [\"*\"]\n",
        )
        .unwrap();
        let authenticator = Authenticator::sigv4(&path).unwrap();
        (dir, authenticator)
    }

    fn basic(user_and_password: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_and_password);
        headers.insert(
            "authorization",
            HeaderValue::from_str(&format!("Basic {encoded}")).unwrap(),
        );
        headers
    }

    #[test]
    fn basic_authentication_needs_a_known_key_and_its_secret() {
        let (_dir, authenticator) = authenticator();
        let caller = authenticator
            .authenticate_basic(&basic("AKID:0123456789abcdef"))
            .unwrap();
        assert_eq!(caller.principal(), "AKID");
        for wrong in ["AKID:0123456789abcdeX", "OTHER:0123456789abcdef", "AKID"] {
            assert_eq!(
                authenticator.authenticate_basic(&basic(wrong)).unwrap_err(),
                BasicAuthFailure::Invalid,
                "{wrong}"
            );
        }
        assert_eq!(
            authenticator
                .authenticate_basic(&HeaderMap::new())
                .unwrap_err(),
            BasicAuthFailure::Missing
        );
        assert!(matches!(
            Authenticator::open().authenticate_basic(&HeaderMap::new()),
            Ok(Caller::Anonymous)
        ));
    }

    #[test]
    fn reloading_swaps_the_keys_and_a_broken_file_keeps_the_old_ones() {
        let (dir, authenticator) = authenticator();
        let path = dir.path().join("credentials.toml");
        std::fs::write(
            &path,
            "[[keys]]\naccess_key_id = \"NEWKEY\"\nsecret_access_key = \"fedcba9876543210\"\n",
        )
        .unwrap();
        assert_eq!(authenticator.reload().unwrap(), 1);
        assert!(
            authenticator
                .authenticate_basic(&basic("NEWKEY:fedcba9876543210"))
                .is_ok()
        );
        assert!(
            authenticator
                .authenticate_basic(&basic("AKID:0123456789abcdef"))
                .is_err()
        );
        std::fs::write(&path, "not toml [").unwrap();
        assert!(authenticator.reload().is_err());
        assert!(
            authenticator
                .authenticate_basic(&basic("NEWKEY:fedcba9876543210"))
                .is_ok(),
            "a failed reload keeps the keys in force"
        );
    }
}
