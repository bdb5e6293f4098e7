//! The installation secret that seals receipt handles.
//!
//! It is created once per data directory, readable by its owner only, and
//! reused at every start, so handles issued before a restart stay valid after
//! it, and handles from another installation never verify here.

use std::io::Write;
use std::path::Path;

use ackbox_core::receipt::{ReceiptKey, SECRET_LEN};

use crate::store::StoreError;

/// The secret's file name inside the data directory.
pub const RECEIPT_SECRET_FILE: &str = "receipt.key";

/// Loads the data directory's receipt key, creating it on first use.
pub fn load_or_create_receipt_key(data_dir: &Path) -> Result<ReceiptKey, StoreError> {
    let path = data_dir.join(RECEIPT_SECRET_FILE);
    let io_error = |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    };
    ackbox_log::log::create_dir_durably(&ackbox_log::disk::RealDisk, data_dir).map_err(io_error)?;
    match std::fs::read(&path) {
        Ok(bytes) => {
            let secret: [u8; SECRET_LEN] =
                bytes
                    .as_slice()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt {
                        detail: format!(
                            "{} must hold exactly {SECRET_LEN} bytes; it holds {}",
                            path.display(),
                            bytes.len()
                        ),
                    })?;
            Ok(ReceiptKey::new(secret))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            // Written aside and renamed into place, so a crash never leaves a
            // truncated secret that would stop every later start.
            let secret = ReceiptKey::generate_secret();
            let partial = data_dir.join(format!("{RECEIPT_SECRET_FILE}.partial"));
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&partial).map_err(io_error)?;
            file.write_all(&secret).map_err(io_error)?;
            file.sync_all().map_err(io_error)?;
            std::fs::rename(&partial, &path).map_err(io_error)?;
            std::fs::File::open(data_dir)
                .and_then(|dir| dir.sync_all())
                .map_err(io_error)?;
            Ok(ReceiptKey::new(secret))
        }
        Err(error) => Err(io_error(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ackbox_core::receipt::ReceiptClaims;

    #[test]
    fn the_secret_is_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_receipt_key(dir.path()).unwrap();
        let second = load_or_create_receipt_key(dir.path()).unwrap();
        let claims = ReceiptClaims {
            queue_id: 1,
            seq: 2,
            lease: 3,
            leased_at: Some(4),
        };
        assert_eq!(second.open(&first.seal(claims)).unwrap(), claims);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(RECEIPT_SECRET_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_truncated_secret_is_reported_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(RECEIPT_SECRET_FILE), b"short").unwrap();
        assert!(matches!(
            load_or_create_receipt_key(dir.path()),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
