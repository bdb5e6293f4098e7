//! TLS for the listener, through rustls: a certificate chain and its
//! private key from PEM files, TLS 1.2 and 1.3, HTTP/1.1 by ALPN.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The PEM files of a server certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub certificate: PathBuf,
    /// The private key of the leaf (PKCS#8, PKCS#1 or SEC1).
    pub private_key: PathBuf,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("cannot read {what} from {path}")]
    Pem {
        /// `a certificate chain` or `a private key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The PEM error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{path} holds no PEM certificate")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the certificate or key (a key that does not match, say).
    #[error("the certificate in {certificate} and the key in {private_key} cannot be used")]
    Config {
        /// The certificate file.
        certificate: PathBuf,
        /// The key file.
        private_key: PathBuf,
        /// rustls's reason.
        #[source]
        source: rustls::Error,
    },
}

impl TlsFiles {
    /// Loads the files into an acceptor.
    pub fn acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let pem_error = |what, path: &Path| {
            let path = path.to_owned();
            move |source| TlsError::Pem { what, path, source }
        };
        let chain = CertificateDer::pem_file_iter(&self.certificate)
            .map_err(pem_error("a certificate chain", &self.certificate))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(pem_error("a certificate chain", &self.certificate))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: self.certificate.clone(),
            });
        }
        let key = PrivateKeyDer::from_pem_file(&self.private_key)
            .map_err(pem_error("a private key", &self.private_key))?;
        let config_error = |source| TlsError::Config {
            certificate: self.certificate.clone(),
            private_key: self.private_key.clone(),
            source,
        };
        // The provider is named, not taken from the process default, so
        // another crate enabling a second rustls backend changes nothing.
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(config_error)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}
