//! Certificates for HTTPS tests: a throwaway certificate authority and a
//! server certificate it signed for `localhost` and `127.0.0.1`.

use std::path::Path;

use ackbox_server::tls::TlsFiles;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A server certificate on disk and the authority a client must trust.
#[derive(Debug, Clone)]
pub struct TestCertificate {
    /// The server's certificate and key files.
    pub files: TlsFiles,
    /// The certificate authority, PEM: what clients put in their trust store.
    pub authority_pem: String,
}

impl TestCertificate {
    /// Generates an authority and a server certificate into `dir`.
    ///
    /// # Panics
    /// When the keys cannot be generated or the files written.
    pub fn generate(dir: &Path) -> Self {
        let mut authority = CertificateParams::new(Vec::new()).expect("no names is valid");
        authority.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        authority
            .distinguished_name
            .push(DnType::CommonName, "ackbox test authority");
        authority.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let authority_key = KeyPair::generate().expect("an authority key");
        let authority_certificate = authority
            .self_signed(&authority_key)
            .expect("a self-signed authority");
        let issuer = Issuer::new(authority, authority_key);

        let mut server =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("valid names");
        server
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        server.use_authority_key_identifier_extension = true;
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().expect("a server key");
        let server_certificate = server
            .signed_by(&server_key, &issuer)
            .expect("a signed server certificate");

        let files = TlsFiles {
            certificate: dir.join("server.crt"),
            private_key: dir.join("server.key"),
        };
        std::fs::write(&files.certificate, server_certificate.pem())
            .expect("the certificate is written");
        std::fs::write(&files.private_key, server_key.serialize_pem()).expect("the key is written");
        Self {
            files,
            authority_pem: authority_certificate.pem(),
        }
    }
}
