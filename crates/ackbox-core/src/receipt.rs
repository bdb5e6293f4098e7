//! Receipt handles: opaque, unguessable and checked.
//!
//! A handle names one lease of one message: the queue, the message's sequence
//! number and the lease generation (bumped on every receive), and when the
//! lease began, so that a delete can tell how long the message took to
//! process. It is sealed with an HMAC-SHA256 under a per-installation
//! secret, so a forged, garbled or foreign handle is rejected before it
//! reaches the store. Handles of the first version (without the lease's
//! start) still open, so leases taken before an upgrade can be deleted.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as BASE64URL;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::error::SqsError;

/// Queue, sequence number, lease.
const VERSION_1: u8 = 1;
/// Queue, sequence number, lease, when the lease began.
const VERSION_2: u8 = 2;
const MAC_LEN: usize = 16;
const PAYLOAD_1_LEN: usize = 1 + 8 + 8 + 8;
const PAYLOAD_2_LEN: usize = PAYLOAD_1_LEN + 8;
/// Length of the installation secret, in bytes.
pub const SECRET_LEN: usize = 32;

/// What a receipt handle proves: which lease of which message it was issued for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReceiptClaims {
    /// Store id of the queue.
    pub queue_id: i64,
    /// Store sequence number of the message.
    pub seq: i64,
    /// Lease generation: the message's receive count when the handle was issued.
    pub lease: i64,
    /// When the lease began, epoch milliseconds (`None` in a handle sealed
    /// before handles carried it).
    pub leased_at: Option<i64>,
}

/// The key that seals and opens receipt handles.
#[derive(Clone)]
pub struct ReceiptKey {
    /// HMAC-SHA256 already keyed: its inner and outer pads are hashed once
    /// here instead of for every handle, half of a handle's hashing.
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

impl ReceiptKey {
    /// A key from an installation secret.
    pub fn new(secret: [u8; SECRET_LEN]) -> Self {
        Self {
            keyed: Hmac::<Sha256>::new_from_slice(&secret)
                .expect("HMAC-SHA256 accepts keys of any length"),
        }
    }

    /// A fresh random secret for a new installation.
    pub fn generate_secret() -> [u8; SECRET_LEN] {
        let mut secret = [0u8; SECRET_LEN];
        rand::rng().fill_bytes(&mut secret);
        secret
    }

    fn mac(&self, payload: &[u8]) -> [u8; MAC_LEN] {
        let mut mac = self.keyed.clone();
        mac.update(payload);
        let tag = mac.finalize().into_bytes();
        let mut truncated = [0u8; MAC_LEN];
        truncated.copy_from_slice(&tag[..MAC_LEN]);
        truncated
    }

    /// Seals `claims` into an opaque handle.
    pub fn seal(&self, claims: ReceiptClaims) -> String {
        let mut bytes = Vec::with_capacity(PAYLOAD_2_LEN + MAC_LEN);
        bytes.push(if claims.leased_at.is_some() {
            VERSION_2
        } else {
            VERSION_1
        });
        bytes.extend_from_slice(&claims.queue_id.to_be_bytes());
        bytes.extend_from_slice(&claims.seq.to_be_bytes());
        bytes.extend_from_slice(&claims.lease.to_be_bytes());
        if let Some(leased_at) = claims.leased_at {
            bytes.extend_from_slice(&leased_at.to_be_bytes());
        }
        let tag = self.mac(&bytes);
        bytes.extend_from_slice(&tag);
        BASE64URL.encode(bytes)
    }

    /// Opens a handle, rejecting anything this key did not seal.
    pub fn open(&self, handle: &str) -> Result<ReceiptClaims, SqsError> {
        let invalid = || SqsError::receipt_handle_invalid(handle);
        let bytes = BASE64URL.decode(handle.as_bytes()).map_err(|_| invalid())?;
        let payload_len = match bytes.first() {
            Some(&VERSION_1) => PAYLOAD_1_LEN,
            Some(&VERSION_2) => PAYLOAD_2_LEN,
            _ => return Err(invalid()),
        };
        if bytes.len() != payload_len + MAC_LEN {
            return Err(invalid());
        }
        let (payload, tag) = bytes.split_at(payload_len);
        let mut mac = self.keyed.clone();
        mac.update(payload);
        mac.verify_truncated_left(tag).map_err(|_| invalid())?;
        let field = |offset: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&payload[offset..offset + 8]);
            i64::from_be_bytes(word)
        };
        Ok(ReceiptClaims {
            queue_id: field(1),
            seq: field(9),
            lease: field(17),
            leased_at: (payload_len == PAYLOAD_2_LEN).then(|| field(25)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    const CLAIMS: ReceiptClaims = ReceiptClaims {
        queue_id: 7,
        seq: 42,
        lease: 3,
        leased_at: Some(1_700_000_000_000),
    };

    #[test]
    fn sealed_handle_opens_to_the_same_claims() {
        let key = ReceiptKey::new([9; SECRET_LEN]);
        assert_eq!(key.open(&key.seal(CLAIMS)).unwrap(), CLAIMS);
    }

    #[test]
    fn a_handle_sealed_before_handles_carried_the_leases_start_still_opens() {
        let key = ReceiptKey::new([9; SECRET_LEN]);
        let first_version = ReceiptClaims {
            leased_at: None,
            ..CLAIMS
        };
        let handle = key.seal(first_version);
        assert_eq!(BASE64URL.decode(&handle).unwrap()[0], VERSION_1);
        assert_eq!(key.open(&handle).unwrap(), first_version);
    }

    #[test]
    fn tampered_garbled_or_foreign_handles_are_invalid() {
        let key = ReceiptKey::new([9; SECRET_LEN]);
        let other = ReceiptKey::new([8; SECRET_LEN]);
        let handle = key.seal(CLAIMS);
        let mut bytes = BASE64URL.decode(&handle).unwrap();
        bytes[10] ^= 1;
        let tampered = BASE64URL.encode(bytes);
        for bad in [
            tampered.as_str(),
            "garbage",
            "",
            &other.seal(CLAIMS),
            &handle[..handle.len() - 2],
        ] {
            assert_eq!(
                key.open(bad).unwrap_err().code,
                ErrorCode::ReceiptHandleIsInvalid,
                "{bad}"
            );
        }
    }
}
