/*!
Optional TLS (rustls, ring provider, TLS 1.2 and 1.3) from a PEM certificate
chain and a PEM private key, read once at start. The provider is named
explicitly, so the server never depends on a process-wide default.
*/

use std::sync::Arc;

use anyhow::{bail, Context};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{crypto, ServerConfig};
use tokio_rustls::TlsAcceptor;

use super::TlsSettings;

pub(crate) fn acceptor(tls: &TlsSettings) -> anyhow::Result<TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert_file)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| {
            format!(
                "reading the certificate chain {} (PEM)",
                tls.cert_file.display()
            )
        })?;
    if certs.is_empty() {
        bail!(
            "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            tls.cert_file.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key_file).with_context(|| {
        format!(
            "reading the private key {} (PEM: PKCS#8, PKCS#1 or SEC1)",
            tls.key_file.display()
        )
    })?;
    let provider = Arc::new(crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!(
                "the key {} does not fit the certificate {}",
                tls.key_file.display(),
                tls.cert_file.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
