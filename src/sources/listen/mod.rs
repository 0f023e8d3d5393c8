/*!
What the sources that listen on a TCP port share (`otlp_http`, and `syslog`
over TCP; the coming OTLP/gRPC and MQTT sources are meant to use the same):
the address, the connection slots (`max_connections`, and
`max_connections_per_peer` per source IP), the TLS handshake timeout, and
optional TLS from a PEM certificate chain and its key, optionally asking
clients for a certificate signed by `tls.client_ca_file`. Their keys are
checked, probed on the machine and set up here once, with the same messages
for every such source.

```text
 accept ──▶ slots.rs   per-peer limit, max_connections, the idle eviction
        ──▶ tls.rs     handshake (bounded by tls_handshake_timeout), with
                       files re-read when they change; the client's subject
                       (subject.rs) for the records
        ──▶ the source's own protocol, marking its slot busy while it works
```

Each source's raw struct keeps these keys among its own, in its own order
(the order `holdfast check` lists the allowed keys in), and hands them to
[`Listener::check`] as a [`RawListener`].
*/

mod slots;
mod subject;
pub(crate) mod tls;

use std::fmt::{self, Write};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use toml::Spanned;

use crate::checking::units::{format_duration, Count, Dur};
use crate::checking::{Checker, Env};

pub(crate) use slots::{Slot, Slots, EVICTION_GRACE};
pub(crate) use tls::{Alpn, HandshakeError, RawTls, ServerTls};
pub use tls::{ClientAuth, TlsSettings};

/// Connections served at once unless `max_connections` says otherwise.
const MAX_CONNECTIONS: u64 = 256;
/// Connections from one IP address unless `max_connections_per_peer` says
/// otherwise: room for a relay or a collector that opens a few, while one
/// device alone cannot take more than an eighth of the default slots.
const MAX_CONNECTIONS_PER_PEER: u64 = 32;
/// Time a client has to finish the TLS handshake: one round trip or two on
/// a LAN; a client that has not finished by then is not going to.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TCP listener: where, how many connections at once (in all and per
/// peer), and TLS or not.
#[derive(Debug, Clone)]
pub struct Listener {
    /// Address to listen on; port 0 picks a free port (for tests).
    pub listen: SocketAddr,
    /// Connections served at once. When all are taken, a new connection
    /// closes the one idle longest (past [`EVICTION_GRACE`]), or waits in
    /// the kernel's backlog while every connection is busy.
    pub max_connections: NonZeroUsize,
    /// Connections served at once from one IP address; more are closed at
    /// once.
    pub max_connections_per_peer: NonZeroUsize,
    /// Time allowed for a TLS handshake; never zero.
    pub tls_handshake_timeout: Duration,
    /// Serve TLS with this certificate and key.
    pub tls: Option<TlsSettings>,
}

/// A source's listener keys as written.
#[derive(Default)]
pub(crate) struct RawListener<'r> {
    pub listen: Option<&'r Spanned<String>>,
    pub max_connections: Option<&'r Spanned<Count>>,
    pub max_connections_per_peer: Option<&'r Spanned<Count>>,
    pub tls_handshake_timeout: Option<&'r Spanned<Dur>>,
    pub tls: Option<&'r Spanned<RawTls>>,
}

/// How a source authenticates clients besides TLS client certificates, for
/// the warning about a listener other machines can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OtherAuth {
    /// The source has no other way (syslog over TCP).
    None,
    /// UDP: no connection, no TLS, and any sender address can be forged.
    NoneOverUdp,
    /// A bearer token (`bearer_token_file`): set or not.
    Token { set: bool },
}

impl Listener {
    /// Checks the listener's keys of table `table` (its full key): `listen`
    /// (default `default_listen`), `max_connections` (1 to 65536, default
    /// 256), `max_connections_per_peer` (1 to 65536, default 32),
    /// `tls_handshake_timeout` (default 10 s) and `tls`; and warns when the
    /// address is reachable from other machines without authentication or
    /// without encryption.
    pub(crate) fn check(
        cx: &mut Checker<'_>,
        table: &str,
        default_listen: SocketAddr,
        raw: RawListener<'_>,
        auth: OtherAuth,
    ) -> Listener {
        let key = |k: &str| format!("{table}.{k}");
        let listen = cx.listen(&key("listen"), raw.listen, default_listen);
        let [max_connections, max_connections_per_peer] = [
            ("max_connections", raw.max_connections, MAX_CONNECTIONS),
            (
                "max_connections_per_peer",
                raw.max_connections_per_peer,
                MAX_CONNECTIONS_PER_PEER,
            ),
        ]
        .map(|(k, v, default)| {
            let n = cx.count(&key(k), v, default, 1..=65536);
            NonZeroUsize::new(n as usize).unwrap_or(NonZeroUsize::MIN)
        });
        let tls_handshake_timeout = cx.duration(
            &key("tls_handshake_timeout"),
            raw.tls_handshake_timeout,
            TLS_HANDSHAKE_TIMEOUT,
            Some("every TLS client would be dropped before it could finish its handshake"),
        );
        let tls = raw.tls.and_then(|t| tls::check(cx, &key("tls"), t));
        if let (Some(v), None) = (raw.tls_handshake_timeout, raw.tls) {
            cx.warn(
                Some(v.span()),
                &key("tls_handshake_timeout"),
                "has no effect without tls: this listener does no TLS handshake; remove it, or \
                 set tls.cert_file and tls.key_file",
            );
        }
        let l = Listener {
            listen,
            max_connections,
            max_connections_per_peer,
            tls_handshake_timeout,
            tls,
        };
        if let Some(problem) = l.exposure(auth) {
            let span = raw.listen.map(|v| v.span());
            cx.warn(
                span,
                &key("listen"),
                format!("listens on {listen} {problem}"),
            );
        }
        l
    }

    /// What is wrong with listening where this listener does, if anything:
    /// a loopback address is this machine's business; any other lets the
    /// network in, which needs a way to tell who sends (a client
    /// certificate or a token) and TLS to keep it private.
    fn exposure(&self, auth: OtherAuth) -> Option<&'static str> {
        if self.listen.ip().is_loopback() {
            return None;
        }
        let certs = self
            .tls
            .as_ref()
            .is_some_and(|t| t.client_auth() == Some(ClientAuth::Required));
        let token = auth == OtherAuth::Token { set: true };
        let tls = self.tls.is_some();
        match (tls, certs || token, auth) {
            (_, _, OtherAuth::NoneOverUdp) => Some(
                "over UDP: anyone who can reach this port can write logs under any sender \
                 address, in clear text; listen on 127.0.0.1, use mode = \"tcp\" with TLS and \
                 client certificates, or make sure a firewall limits who can send",
            ),
            (true, true, _) => None,
            (false, true, _) => Some(
                "without TLS: the bearer token and the telemetry travel in clear text; set \
                 tls.cert_file and tls.key_file",
            ),
            (false, false, OtherAuth::Token { .. }) => Some(
                "without TLS or a bearer token: anyone who can reach this port can write \
                 telemetry, and it travels in clear text; set bearer_token_file and \
                 tls.cert_file/tls.key_file, or listen on 127.0.0.1",
            ),
            (false, false, _) => Some(
                "without TLS or client certificates: anyone who can reach this port can write \
                 logs, and they travel in clear text; set tls.cert_file, tls.key_file and \
                 tls.client_ca_file, or listen on 127.0.0.1, or make sure a firewall limits who \
                 can connect",
            ),
            (true, false, OtherAuth::Token { .. }) => Some(
                "without a bearer token or required client certificates: anyone who can reach \
                 this port can write telemetry; set bearer_token_file, or tls.client_ca_file \
                 with tls.client_auth = \"required\", or make sure a firewall limits who can \
                 connect",
            ),
            (true, false, _) => Some(
                "without required client certificates: anyone who can reach this port can write \
                 logs; set tls.client_ca_file (with tls.client_auth = \"required\"), or make sure \
                 a firewall limits who can connect",
            ),
        }
    }

    /// The TLS of source `name`, set up from its files; `None` without TLS.
    /// The error names the keys to look at.
    pub(crate) fn server_tls(&self, name: &str) -> anyhow::Result<Option<ServerTls>> {
        self.tls
            .as_ref()
            .map(|t| ServerTls::load(name, t))
            .transpose()
    }

    /// [`Listener::server_tls`] for an HTTP/2 listener (gRPC): ALPN `h2`.
    pub(crate) fn server_tls_h2(&self, name: &str) -> anyhow::Result<Option<ServerTls>> {
        self.tls
            .as_ref()
            .map(|t| ServerTls::load_for(name, t, Alpn::H2))
            .transpose()
    }

    /// The checks that need the machine, `prefix` being the source's key
    /// (`sources.<name>`): the address can be bound, the TLS files load.
    pub(crate) fn check_environment(&self, env: &mut Env<'_>, prefix: &str) {
        env.bindable(&format!("{prefix}.listen"), self.listen);
        if let Some(tls) = &self.tls {
            tls.check_environment(env, prefix);
        }
    }

    /// Its lines in `holdfast check`, after the source's own first line.
    pub(crate) fn describe(&self, out: &mut String) -> fmt::Result {
        writeln!(
            out,
            "    at most {} connections, {} per client address; when all are taken, the one \
             idle longest (over {}) is closed to make room",
            self.max_connections,
            self.max_connections_per_peer,
            format_duration(EVICTION_GRACE)
        )?;
        if let Some(tls) = &self.tls {
            tls.describe(out, self.tls_handshake_timeout)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn listener(listen: &str, tls: Option<Option<ClientAuth>>) -> Listener {
        Listener {
            listen: listen.parse().unwrap(),
            max_connections: NonZeroUsize::MIN,
            max_connections_per_peer: NonZeroUsize::MIN,
            tls_handshake_timeout: TLS_HANDSHAKE_TIMEOUT,
            tls: tls.map(|auth| TlsSettings {
                cert_file: PathBuf::from("c.pem"),
                key_file: PathBuf::from("k.pem"),
                client_ca: auth.map(|a| (PathBuf::from("ca.pem"), a)),
            }),
        }
    }

    #[test]
    fn only_an_authenticated_tls_listener_on_the_network_goes_unwarned() {
        let token = OtherAuth::Token { set: true };
        let no_token = OtherAuth::Token { set: false };
        let required = Some(Some(ClientAuth::Required));
        let optional = Some(Some(ClientAuth::Optional));
        for auth in [OtherAuth::None, OtherAuth::NoneOverUdp, token, no_token] {
            assert_eq!(listener("127.0.0.1:1", None).exposure(auth), None);
            assert_eq!(listener("[::1]:1", None).exposure(auth), None);
        }
        let lan = "192.0.2.1:1";
        assert_eq!(listener(lan, required).exposure(OtherAuth::None), None);
        assert_eq!(listener(lan, Some(None)).exposure(token), None);
        assert_eq!(listener(lan, optional).exposure(token), None);
        for (tls, auth, says) in [
            (None, OtherAuth::None, "without TLS or client certificates"),
            (None, no_token, "without TLS or a bearer token"),
            (None, token, "without TLS: the bearer token"),
            (
                optional,
                OtherAuth::None,
                "without required client certificates",
            ),
            (Some(None), no_token, "without a bearer token or required"),
            (required, OtherAuth::NoneOverUdp, "over UDP"),
        ] {
            let warning = listener(lan, tls).exposure(auth).unwrap_or_default();
            assert!(warning.starts_with(says), "{tls:?} {auth:?}: {warning}");
        }
    }
}
