//! TLS material from PEM files, for both sides: the listeners' server
//! certificates (`sources/listen/tls.rs`) and the sinks' client
//! certificates (`sinks/client_tls.rs`). One crypto provider (ring, named
//! so that TLS never depends on a process-wide default), one way to read a
//! certificate chain and its key, and one way to follow the files when they
//! rotate ([`Reloading`]).
//!
//! Rotation without a restart: before a handshake (a listener) or a request
//! (a sink), the user calls [`Reloading::refresh_at`], which compares the
//! files' stamps (inode, size, modification time) at most every
//! [`CHECK_INTERVAL`]. Changed files are loaded and checked before they
//! replace the current material; files that do not load (often a rotation
//! caught halfway: the certificate written, the key not yet) keep the
//! current one, and are tried again only when a file changes again. What to
//! log, and what a change means further (a sink's fresh connections), is
//! the user's.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio_rustls::rustls::crypto::{self, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::RootCertStore;

use anyhow::Context;

/// How often, at most, the files are looked at: a `stat` call each, cheap
/// enough to keep rotation quick.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Why a certificate/key pair cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error("reading the certificate chain {path} (PEM): {source}")]
    Cert { path: PathBuf, source: pem::Error },
    #[error("{0} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCert(PathBuf),
    #[error("reading the private key {path} (PEM: PKCS#8, PKCS#1 or SEC1): {source}")]
    Key { path: PathBuf, source: pem::Error },
    #[error("the key {key} does not fit the certificate {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: tokio_rustls::rustls::Error,
    },
}

/// The crypto provider of every TLS config holdfast builds.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(crypto::ring::default_provider())
}

/// The system's CA certificates plus those in `ca_file`.
pub fn roots(ca_file: Option<&Path>) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    // Like reqwest's own setup: a system store often holds a few ancient
    // certificates rustls cannot parse; they are skipped, not fatal.
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(ca) = ca_file {
        let pem =
            std::fs::read(ca).with_context(|| format!("reading the CA file {}", ca.display()))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert =
                cert.with_context(|| format!("{} is not a PEM certificate bundle", ca.display()))?;
            roots
                .add(cert)
                .with_context(|| format!("a certificate in {} cannot be used", ca.display()))?;
        }
    }
    Ok(roots)
}

/// A PEM certificate chain (leaf first) and its PEM private key.
pub fn read_pair(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), PairError> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| PairError::Cert {
            path: cert.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(PairError::NoCert(cert.to_path_buf()));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|source| PairError::Key {
        path: key.to_path_buf(),
        source,
    })?;
    Ok((certs, private))
}

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

/// `None` for a file that cannot be looked at now (mid-rotation, say).
fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    // Follows links: a rotation that swaps a link (Kubernetes secrets, a
    // `current` link in a certificate store) changes the target's inode.
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        inode: m.ino(),
        len: m.len(),
        modified: m.modified().ok(),
    })
}

/// When the files were last looked at, and what they looked like.
struct Watch {
    checked: Instant,
    seen: Vec<Option<Stamp>>,
}

/// Material of type `T` (a server's acceptor, a client's certified key)
/// loaded from `files`, and loaded again when they change.
pub struct Reloading<T> {
    files: Vec<PathBuf>,
    /// Cloned for each use; replaced only by files that loaded.
    current: RwLock<T>,
    /// Held by the one caller that looks at the files.
    watch: Mutex<Watch>,
}

/// What [`Reloading::refresh_at`] found.
#[derive(Debug)]
pub enum Refreshed<E> {
    /// Not looked at (too soon, or another caller is looking), or unchanged.
    Same,
    /// The files changed and the new material is current.
    Loaded,
    /// The files changed but do not load; the current material stays.
    Kept(E),
}

impl<T: Clone> Reloading<T> {
    /// Loads the material; an error here is the user's to report (there is
    /// nothing older to keep).
    pub fn load<E>(files: Vec<PathBuf>, load: impl FnOnce() -> Result<T, E>) -> Result<Self, E> {
        // Stamped before reading, so that a write racing the read is seen
        // at the next check.
        let seen = files.iter().map(|f| stamp(f)).collect();
        let current = load()?;
        Ok(Reloading {
            files,
            current: RwLock::new(current),
            watch: Mutex::new(Watch {
                checked: Instant::now(),
                seen,
            }),
        })
    }

    /// The material now current.
    pub fn current(&self) -> T {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Looks at the files if [`CHECK_INTERVAL`] has passed since the last
    /// look (`now`), and loads them with `load` if they changed since.
    pub fn refresh_at<E>(&self, now: Instant, load: impl FnOnce() -> Result<T, E>) -> Refreshed<E> {
        // Another caller is looking: it will see the same files.
        let Ok(mut w) = self.watch.try_lock() else {
            return Refreshed::Same;
        };
        if now.saturating_duration_since(w.checked) < CHECK_INTERVAL {
            return Refreshed::Same;
        }
        w.checked = now;
        let seen: Vec<Option<Stamp>> = self.files.iter().map(|f| stamp(f)).collect();
        if seen == w.seen {
            return Refreshed::Same;
        }
        w.seen = seen;
        match load() {
            Ok(t) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = t;
                Refreshed::Loaded
            }
            Err(e) => Refreshed::Kept(e),
        }
    }
}
