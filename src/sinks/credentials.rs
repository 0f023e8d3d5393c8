//! What a network sink reads from files besides its config: TLS files
//! (extra CA certificates, a client certificate) and secrets (passwords,
//! tokens, keys), whatever its transport.

use std::path::PathBuf;

use anyhow::Context;

/// The `tls.*` keys of a network sink.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// Extra CA certificates (PEM) to trust besides the system's.
    pub ca_file: Option<PathBuf>,
    /// The certificate this device presents to the receiver (mTLS).
    pub client_cert: Option<ClientCert>,
}

/// A client certificate chain and its private key (PEM files), read at
/// start and again whenever they change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// A secret file's content without surrounding blanks; empty is an error.
pub(crate) fn read_secret(path: &std::path::Path, what: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the {what} file {}", path.display()))?;
    let t = text.trim();
    if t.is_empty() {
        anyhow::bail!("the {what} file {} is empty", path.display());
    }
    Ok(t.to_string())
}
