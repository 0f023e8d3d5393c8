//! The client side of TLS for network sinks: the rustls [`ClientConfig`]
//! (the system's CA certificates plus `tls.ca_file`, ring provider, TLS 1.2
//! and 1.3) and the device's identity, a client certificate from
//! `tls.client_cert_file` / `tls.client_key_file` that follows its files so
//! certificates rotate without a restart.
//!
//! Rotation: before each request the sink calls
//! [`ClientIdentity::refresh`], which follows the files as the TLS kit does
//! for both sides (`src/tls_material.rs`: stamps compared at most every
//! second). A changed pair is loaded and checked (both parse, the key fits
//! the certificate) before it replaces the current one. A bad pair — often a rotation caught
//! halfway, the certificate written and the key not yet — keeps the current
//! one, is logged with the reason, and is tried again when a file changes
//! again. A new pair bumps the generation, so that the HTTP client starts
//! over with fresh connections and no session tickets: TLS authenticates a
//! client once per connection (and a resumed session keeps the identity it
//! was made with), so pooled connections would go on speaking for the old
//! certificate.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio_rustls::rustls::client::{ResolvesClientCert, Resumption};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{ClientConfig, SignatureScheme};

pub use crate::tls_material::PairError;
#[cfg(test)]
use crate::tls_material::CHECK_INTERVAL;
use crate::tls_material::{provider, read_pair, roots, Refreshed, Reloading};

/// [`read_pair`], with the key loaded and checked against the certificate.
pub(crate) fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, PairError> {
    let (certs, private) = read_pair(cert, key)?;
    let mismatch = |reason| PairError::Mismatch {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        reason,
    };
    let signing = provider()
        .key_provider
        .load_private_key(private)
        .map_err(mismatch)?;
    let pair = CertifiedKey::new(certs, signing);
    pair.keys_match().map_err(mismatch)?;
    Ok(pair)
}

/// The client certificate a sink presents; see the module docs.
pub(crate) struct ClientIdentity {
    cert_file: PathBuf,
    key_file: PathBuf,
    /// Read at each TLS handshake; replaced only by a pair that loaded.
    pair: Reloading<Arc<CertifiedKey>>,
    /// Counts the pairs loaded since start (0 for the first).
    generation: AtomicU64,
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("generation", &self.generation())
            .finish()
    }
}

impl ClientIdentity {
    /// Loads the pair; an error here stops the sink from starting (there is
    /// no older pair to keep).
    pub(crate) fn load(cert_file: &Path, key_file: &Path) -> Result<ClientIdentity, PairError> {
        let files = vec![cert_file.to_path_buf(), key_file.to_path_buf()];
        let pair = Reloading::load(files, || load_pair(cert_file, key_file).map(Arc::new))?;
        Ok(ClientIdentity {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            pair,
            generation: AtomicU64::new(0),
        })
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Loads the files again if they changed since the last look (at most
    /// every [`CHECK_INTERVAL`]); returns the generation now current.
    pub(crate) fn refresh(&self) -> u64 {
        self.refresh_at(Instant::now())
    }

    fn refresh_at(&self, now: Instant) -> u64 {
        let load = || load_pair(&self.cert_file, &self.key_file).map(Arc::new);
        match self.pair.refresh_at(now, load) {
            Refreshed::Same => self.generation(),
            Refreshed::Loaded => {
                let g = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
                tracing::info!(
                    cert = %self.cert_file.display(),
                    "loaded the new client certificate; new connections present it"
                );
                g
            }
            Refreshed::Kept(e) => {
                tracing::warn!(
                    "keeping the current client certificate: the changed files cannot be used \
                     ({e}); they are tried again when they change"
                );
                self.generation()
            }
        }
    }
}

impl ResolvesClientCert for ClientIdentity {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.pair.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The TLS setup of one sink: verification and, when configured, the
/// client certificate.
#[derive(Clone)]
pub(crate) struct ClientTls {
    config: ClientConfig,
    identity: Option<Arc<ClientIdentity>>,
}

impl ClientTls {
    pub(crate) fn new(
        ca_file: Option<&Path>,
        client_cert: Option<(&Path, &Path)>,
    ) -> anyhow::Result<ClientTls> {
        let identity = match client_cert {
            Some((cert, key)) => Some(Arc::new(
                ClientIdentity::load(cert, key).context("loading the client certificate")?,
            )),
            None => None,
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .context("choosing TLS versions")?
            .with_root_certificates(roots(ca_file)?);
        let mut config = match &identity {
            Some(id) => builder.with_client_cert_resolver(id.clone()),
            None => builder.with_no_client_auth(),
        };
        // The sinks speak HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ClientTls { config, identity })
    }

    /// The client certificate, if one is configured.
    pub(crate) fn identity(&self) -> Option<&ClientIdentity> {
        self.identity.as_deref()
    }

    /// A config for a new HTTP client: shares the verifier and the
    /// identity, but not the session tickets of earlier clients.
    pub(crate) fn config(&self) -> ClientConfig {
        let mut c = self.config.clone();
        c.resumption = Resumption::default();
        c
    }
}

#[cfg(test)]
mod tests;
