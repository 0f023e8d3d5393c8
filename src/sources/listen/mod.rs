/*!
What the sources that listen on a TCP port share (`otlp_http`, and `syslog`
over TCP): the address, the cap on connections served at once, and
optional TLS from a PEM certificate chain and its key. Their keys
(`listen`, `max_connections`, `tls.*`) are checked, probed on the machine
and set up here once, with the same messages for every such source.

Each source's raw struct keeps these keys among its own, in its own order
(the order `holdfast check` lists the allowed keys in), and hands them to
[`Listener::check`].
*/

pub(crate) mod tls;

use std::fmt::{self, Write};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;
use tokio_rustls::TlsAcceptor;
use toml::Spanned;

use crate::config::check::Checker;
use crate::config::environment::Env;
use crate::config::units::Count;
use crate::config::Severity;

/// Connections served at once unless `max_connections` says otherwise.
const MAX_CONNECTIONS: u64 = 256;

/// A TCP listener: where, how many connections at once, and TLS or not.
#[derive(Debug, Clone)]
pub struct Listener {
    /// Address to listen on; port 0 picks a free port (for tests).
    pub listen: SocketAddr,
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: NonZeroUsize,
    /// Serve TLS with this certificate and key.
    pub tls: Option<TlsSettings>,
}

/// A certificate chain and its private key, both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key of the leaf certificate.
    pub key_file: PathBuf,
}

/// `tls.*`, as written: both or neither.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with cert_file and key_file")]
pub(crate) struct RawTls {
    cert_file: Option<Spanned<String>>,
    key_file: Option<Spanned<String>>,
}

/// A source's `listen`, `max_connections` and `tls` as written.
pub(crate) type RawListener<'r> = (
    Option<&'r Spanned<String>>,
    Option<&'r Spanned<Count>>,
    Option<&'r Spanned<RawTls>>,
);

impl Listener {
    /// Checks the listener's keys of table `table` (its full key): `listen`
    /// (default `default_listen`), `max_connections` (1 to 65536, default
    /// 256) and `tls`.
    pub(crate) fn check(
        cx: &mut Checker<'_>,
        table: &str,
        default_listen: SocketAddr,
        (listen, max_connections, tls): RawListener<'_>,
    ) -> Listener {
        let key = |k: &str| format!("{table}.{k}");
        let listen = cx.listen(&key("listen"), listen, default_listen);
        let max_connections = cx.count(
            &key("max_connections"),
            max_connections,
            MAX_CONNECTIONS,
            1..=65536,
        );
        Listener {
            listen,
            max_connections: NonZeroUsize::new(max_connections as usize)
                .unwrap_or(NonZeroUsize::MIN),
            tls: check_tls(cx, &key("tls"), tls),
        }
    }

    /// The TLS acceptor of source `name`, set up from its files; `None`
    /// without TLS. The error names the keys to look at.
    pub(crate) fn tls_acceptor(&self, name: &str) -> anyhow::Result<Option<TlsAcceptor>> {
        self.tls
            .as_ref()
            .map(|t| {
                tls::acceptor(t).with_context(|| {
                    format!(
                        "setting up TLS for source {name} (sources.{name}.tls.cert_file and sources.{name}.tls.key_file)"
                    )
                })
            })
            .transpose()
    }
}

impl TlsSettings {
    /// The checks of the TLS files that need the machine, `prefix` being
    /// the source's key (`sources.<name>`).
    pub(crate) fn check_environment(&self, env: &mut Env<'_>, prefix: &str) {
        let key = |k: &str| format!("{prefix}.{k}");
        let cert = env.pem_file(&key("tls.cert_file"), &self.cert_file, "CERTIFICATE");
        let private = env.pem_file(&key("tls.key_file"), &self.key_file, "PRIVATE KEY");
        if private {
            env.secret_file(&key("tls.key_file"), &self.key_file, "private key");
        }
        // What `run` does with them, so that a file that only looks like PEM,
        // or a key that does not fit the certificate, is found before start.
        if cert && private {
            if let Err(e) = tls::acceptor(self) {
                env.push(Severity::Error, &key("tls.cert_file"), format!("{e:#}"));
            }
        }
    }

    /// Its line in `holdfast check` (every source that serves TLS).
    pub(crate) fn describe(&self, out: &mut String) -> fmt::Result {
        writeln!(
            out,
            "    TLS with certificate {} and key {}",
            self.cert_file.display(),
            self.key_file.display()
        )
    }
}

/// Checks a `tls` table (`tkey` is its full key): both files or an error.
fn check_tls(
    cx: &mut Checker<'_>,
    tkey: &str,
    tls: Option<&Spanned<RawTls>>,
) -> Option<TlsSettings> {
    tls.and_then(|tls| {
        let raw = tls.get_ref();
        let cert = cx.path(&format!("{tkey}.cert_file"), raw.cert_file.as_ref());
        let keyf = cx.path(&format!("{tkey}.key_file"), raw.key_file.as_ref());
        match (&raw.cert_file, &raw.key_file) {
            (Some(_), Some(_)) => Some(TlsSettings {
                cert_file: cert?,
                key_file: keyf?,
            }),
            (Some(present), None) | (None, Some(present)) => {
                let (set, missing) = if raw.cert_file.is_some() { ("cert_file", "key_file") } else { ("key_file", "cert_file") };
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
                cx.error(
                    Some(tls.span()),
                    tkey,
                    "tls is empty: set tls.cert_file and tls.key_file, or remove tls to serve without TLS",
                );
                None
            }
        }
    })
}
