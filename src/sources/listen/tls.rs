/*!
A listener's TLS (rustls, ring provider, TLS 1.2 and 1.3): the server's PEM
certificate chain and key, and optionally the CA that client certificates
must be signed by (`tls.client_ca_file`, with `tls.client_auth` =
`"required"` or `"optional"`). The provider is named explicitly, so the
server never depends on a process-wide default.

The files follow rotation without a restart, as the sinks' client
certificates do, through the TLS kit (`src/tls_material.rs`): before a
handshake, [`ServerTls::acceptor`] compares the files' stamps (inode, size,
modification time) at most every second. Changed files are
loaded and checked before they replace the current ones; files that do not
load (often a rotation caught halfway) keep the current ones, are logged
with the reason, and are tried again when a file changes again.
*/

use std::fmt::{self, Write};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use toml::Spanned;
use tracing::{info, warn};

use super::slots::{CloseReason, Slot};
use super::subject;
use crate::checking::units::format_duration;
use crate::checking::{Checker, Env, Severity};
use crate::tls_material::{provider, read_pair, Refreshed, Reloading};

/// Whether a client must present a certificate signed by the client CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A client without a valid certificate fails the handshake.
    Required,
    /// A client may present none; one it presents must be valid.
    Optional,
}

impl ClientAuth {
    fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Required => "required",
            ClientAuth::Optional => "optional",
        }
    }
}

/// A certificate chain and its private key, both PEM files, and the CA
/// client certificates are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key of the leaf certificate.
    pub key_file: PathBuf,
    /// PEM CA certificates that sign client certificates, and whether a
    /// client must present one; `None`: clients are not asked.
    pub client_ca: Option<(PathBuf, ClientAuth)>,
}

/// `tls.*`, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with cert_file and key_file (and client_ca_file, client_auth)"
)]
pub(crate) struct RawTls {
    cert_file: Option<Spanned<String>>,
    key_file: Option<Spanned<String>>,
    client_ca_file: Option<Spanned<String>>,
    client_auth: Option<Spanned<String>>,
}

/// Checks a `tls` table (`tkey` is its full key): both files or an error;
/// `client_auth` only with `client_ca_file`.
pub(super) fn check(
    cx: &mut Checker<'_>,
    tkey: &str,
    tls: &Spanned<RawTls>,
) -> Option<TlsSettings> {
    let raw = tls.get_ref();
    let cert = cx.path(&format!("{tkey}.cert_file"), raw.cert_file.as_ref());
    let keyf = cx.path(&format!("{tkey}.key_file"), raw.key_file.as_ref());
    let client_ca = check_client_ca(cx, tkey, raw);
    match (&raw.cert_file, &raw.key_file) {
        (Some(_), Some(_)) => Some(TlsSettings {
            cert_file: cert?,
            key_file: keyf?,
            client_ca: client_ca?,
        }),
        (Some(present), None) | (None, Some(present)) => {
            let (set, missing) = if raw.cert_file.is_some() {
                ("cert_file", "key_file")
            } else {
                ("key_file", "cert_file")
            };
            cx.error(
                Some(present.span()),
                &format!("{tkey}.{set}"),
                format!(
                    "tls.{set} is set but tls.{missing} is not: TLS needs both the \
                     certificate chain and its private key (PEM files); set \
                     tls.{missing}, or remove tls to serve without TLS"
                ),
            );
            None
        }
        (None, None) => {
            let what = if raw.client_ca_file.is_none() && raw.client_auth.is_none() {
                "tls is empty"
            } else {
                "tls has no cert_file and key_file"
            };
            cx.error(
                Some(tls.span()),
                tkey,
                format!(
                    "{what}: set tls.cert_file and tls.key_file, or remove tls to serve without \
                     TLS"
                ),
            );
            None
        }
    }
}

/// `Some(None)`: no client certificates; `None`: an error was reported.
fn check_client_ca(
    cx: &mut Checker<'_>,
    tkey: &str,
    raw: &RawTls,
) -> Option<Option<(PathBuf, ClientAuth)>> {
    let akey = format!("{tkey}.client_auth");
    let auth = match raw.client_auth.as_ref().map(|v| (v.get_ref().as_str(), v)) {
        None | Some(("required", _)) => Some(ClientAuth::Required),
        Some(("optional", _)) => Some(ClientAuth::Optional),
        Some((other, v)) => {
            cx.error(
                Some(v.span()),
                &akey,
                format!(
                    "unknown client_auth {other:?}: write \"required\" (every client presents \
                     a certificate signed by tls.client_ca_file) or \"optional\""
                ),
            );
            None
        }
    };
    let ca = cx.path(
        &format!("{tkey}.client_ca_file"),
        raw.client_ca_file.as_ref(),
    );
    match (&raw.client_ca_file, &raw.client_auth) {
        (None, Some(v)) => {
            cx.error(
                Some(v.span()),
                &akey,
                "tls.client_auth is set but tls.client_ca_file is not: client certificates are \
                 checked against that CA; set tls.client_ca_file (PEM), or remove \
                 tls.client_auth",
            );
            None
        }
        (None, None) => Some(None),
        (Some(_), _) => Some(Some((ca?, auth?))),
    }
}

impl TlsSettings {
    /// Whether and how clients are asked for a certificate.
    pub fn client_auth(&self) -> Option<ClientAuth> {
        self.client_ca.as_ref().map(|(_, a)| *a)
    }

    /// The checks of the TLS files that need the machine, `prefix` being
    /// the source's key (`sources.<name>`).
    pub(crate) fn check_environment(&self, env: &mut Env<'_>, prefix: &str) {
        let key = |k: &str| format!("{prefix}.{k}");
        let cert = env.pem_file(&key("tls.cert_file"), &self.cert_file, "CERTIFICATE");
        let private = env.pem_file(&key("tls.key_file"), &self.key_file, "PRIVATE KEY");
        if private {
            env.secret_file(&key("tls.key_file"), &self.key_file, "private key");
        }
        let ca = match &self.client_ca {
            Some((ca, _)) => {
                let ok = env.pem_file(&key("tls.client_ca_file"), ca, "CERTIFICATE");
                if ok {
                    if let Err(e) = client_roots(ca) {
                        env.push(
                            Severity::Error,
                            &key("tls.client_ca_file"),
                            format!("{e:#}"),
                        );
                        return;
                    }
                }
                ok
            }
            None => true,
        };
        // What `run` does with them, so that a file that only looks like PEM,
        // or a key that does not fit the certificate, is found before start.
        if cert && private && ca {
            if let Err(e) = acceptor(self) {
                env.push(Severity::Error, &key("tls.cert_file"), format!("{e:#}"));
            }
        }
    }

    /// Its lines in `holdfast check` (every source that serves TLS).
    pub(crate) fn describe(&self, out: &mut String, handshake: Duration) -> fmt::Result {
        writeln!(
            out,
            "    TLS with certificate {} and key {}; handshakes within {}",
            self.cert_file.display(),
            self.key_file.display(),
            format_duration(handshake)
        )?;
        match &self.client_ca {
            Some((ca, auth)) => writeln!(
                out,
                "    client certificates {} (signed by a CA in {}); the subject is stored as \
                 tls.client.subject",
                auth.as_str(),
                ca.display()
            ),
            None => writeln!(out, "    no client certificates asked for"),
        }
    }
}

/// Why a TLS handshake did not give a connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    #[error("the TLS handshake did not finish within tls_handshake_timeout")]
    TimedOut,
    #[error("the TLS handshake failed: {0}")]
    Failed(io::Error),
    #[error("closed during the TLS handshake to make room for a new connection")]
    Evicted,
}

/// A listener's TLS, following its files; see the module docs.
pub(crate) struct ServerTls {
    source: String,
    settings: TlsSettings,
    /// The protocol offered by ALPN: `http/1.1`, or `h2` for gRPC.
    alpn: Alpn,
    /// Cloned for each handshake; replaced only by files that loaded.
    acceptor: Reloading<TlsAcceptor>,
}

impl ServerTls {
    /// Loads the files; an error here stops the source from starting
    /// (there is nothing older to keep), naming the keys to look at.
    pub(crate) fn load(source: &str, settings: &TlsSettings) -> anyhow::Result<ServerTls> {
        ServerTls::load_for(source, settings, Alpn::Http1)
    }

    /// [`ServerTls::load`] for a listener that speaks `alpn`.
    pub(crate) fn load_for(
        source: &str,
        settings: &TlsSettings,
        alpn: Alpn,
    ) -> anyhow::Result<ServerTls> {
        let acceptor = Reloading::load(files(settings), || acceptor_for(settings, alpn))
            .with_context(|| {
                format!(
                    "setting up TLS for source {source} (sources.{source}.tls.cert_file, \
                 sources.{source}.tls.key_file and sources.{source}.tls.client_ca_file)"
                )
            })?;
        Ok(ServerTls {
            source: source.to_string(),
            settings: settings.clone(),
            alpn,
            acceptor,
        })
    }

    /// The acceptor for the next handshake, from files re-read if they
    /// changed.
    fn acceptor(&self) -> TlsAcceptor {
        self.refresh();
        self.acceptor.current()
    }

    fn refresh(&self) {
        match self
            .acceptor
            .refresh_at(Instant::now(), || acceptor_for(&self.settings, self.alpn))
        {
            Refreshed::Same => {}
            Refreshed::Loaded => {
                info!(source = %self.source, "TLS files changed: new handshakes use the new certificate, key and client CA");
            }
            Refreshed::Kept(e) => warn!(
                source = %self.source,
                error = format!("{e:#}"),
                "TLS files changed but cannot be used (a rotation caught halfway?): keeping the \
                 ones loaded before; they are tried again when a file changes"
            ),
        }
    }

    /// Runs the server side of the handshake on `io` within `timeout`,
    /// giving up if `slot` is taken back; the stream and the verified
    /// client certificate's subject (RFC 4514), if the client sent one.
    pub(crate) async fn handshake<IO>(
        &self,
        io: IO,
        timeout: Duration,
        slot: &Slot,
    ) -> Result<(TlsStream<IO>, Option<String>), HandshakeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let accept = tokio::time::timeout(timeout, self.acceptor().accept(io));
        let r = tokio::select! {
            r = accept => r,
            _ = slot.evicted() => return Err(HandshakeError::Evicted),
        };
        let e = match r {
            Ok(Ok(s)) => {
                let subject = s
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| subject::of_certificate(c.as_ref()));
                return Ok((s, subject));
            }
            Ok(Err(e)) => HandshakeError::Failed(e),
            Err(_) => HandshakeError::TimedOut,
        };
        slot.closed(match e {
            HandshakeError::TimedOut => CloseReason::TlsHandshakeTimeout,
            _ => CloseReason::TlsHandshakeFailed,
        });
        Err(e)
    }
}

/// The files a listener's TLS follows.
fn files(s: &TlsSettings) -> Vec<PathBuf> {
    let mut files = vec![s.cert_file.clone(), s.key_file.clone()];
    if let Some((ca, _)) = &s.client_ca {
        files.push(ca.clone());
    }
    files
}

/// The CA certificates of `tls.client_ca_file`.
fn client_roots(ca: &Path) -> anyhow::Result<RootCertStore> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading the client CA certificates {} (PEM)", ca.display()))?;
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .with_context(|| format!("a certificate in {} is not a usable CA", ca.display()))?;
    }
    if roots.is_empty() {
        bail!(
            "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----): give the CA that signs \
             the client certificates",
            ca.display()
        );
    }
    Ok(roots)
}

/// The application protocol a listener offers in the TLS handshake (ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// `http/1.1`: OTLP/HTTP, syslog.
    Http1,
    /// `h2`: gRPC, which clients only speak over HTTP/2.
    H2,
}

pub(crate) fn acceptor(tls: &TlsSettings) -> anyhow::Result<TlsAcceptor> {
    acceptor_for(tls, Alpn::Http1)
}

fn acceptor_for(tls: &TlsSettings, alpn: Alpn) -> anyhow::Result<TlsAcceptor> {
    // The pair's error as one message: its text already ends with the
    // PEM reader's cause.
    let (certs, key) =
        read_pair(&tls.cert_file, &tls.key_file).map_err(|e| anyhow!(e.to_string()))?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some((ca, auth)) => {
            let roots = Arc::new(client_roots(ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = match auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            let verifier = verifier.build().with_context(|| {
                format!(
                    "the client CA certificates in {} cannot be used",
                    ca.display()
                )
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).with_context(|| {
        format!(
            "the key {} does not fit the certificate {}",
            tls.key_file.display(),
            tls.cert_file.display()
        )
    })?;
    config.alpn_protocols = match alpn {
        Alpn::Http1 => vec![b"http/1.1".to_vec()],
        Alpn::H2 => vec![b"h2".to_vec()],
    };
    Ok(TlsAcceptor::from(Arc::new(config)))
}
