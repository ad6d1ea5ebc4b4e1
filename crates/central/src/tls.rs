//! The rustls client configuration for each `sslmode` (decisions (bt)).
//!
//! `verify-full` is rustls' own WebPKI verifier over the site's CAs. `verify-ca` is the same
//! verifier with one error forgiven: a certificate that chains to a site CA but names another
//! host (the WebPKI verifier checks the chain before the name, so that error means the chain
//! was good). `prefer` and `require` without a CA check nothing about the certificate, as in
//! libpq, but still check that the server holds its key (the handshake signatures).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, Error, RootCertStore};

use crate::endpoint::{RootCerts, TlsMode};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The site's CAs.
fn roots(root: &RootCerts) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match root {
        RootCerts::File(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?
                .collect::<Result<_, _>>()
                .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "sslrootcert {}: no PEM certificate in it",
                    path.display()
                ));
            }
            for c in certs {
                store
                    .add(c)
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            }
        }
        RootCerts::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err("sslrootcert=system: no CA certificate in the system's store".into());
            }
        }
    }
    Ok(store)
}

/// The client configuration for `mode`.
pub fn client_config(mode: TlsMode, root: Option<&RootCerts>) -> Result<ClientConfig, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let verifier: Arc<dyn ServerCertVerifier> = match (mode, root) {
        (TlsMode::Disable, _) => return Err("no TLS configuration for sslmode=disable".into()),
        (TlsMode::Prefer, None) | (TlsMode::Require, None) => Arc::new(Unverified { provider }),
        (TlsMode::Prefer, Some(r)) | (TlsMode::Require, Some(r)) | (TlsMode::VerifyCa, Some(r)) => {
            Arc::new(ChainOnly(webpki(r, provider)?))
        }
        (TlsMode::VerifyFull, Some(r)) => webpki(r, provider)?,
        (_, None) => return Err(format!("sslmode={} needs sslrootcert", mode.as_str())),
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

fn webpki(
    root: &RootCerts,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots(root)?), provider)
        .build()
        .map_err(|e| e.to_string())
}

/// `verify-ca`: the chain must lead to a site CA; the name may differ.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer`/`require` without a CA: encryption without authentication, as libpq does.
#[derive(Debug)]
struct Unverified {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
