//! `[sources.<name>]` with `type = "syslog"`: the settings the listener
//! runs with, the table as written, its check and its lines in
//! `holdfast check`.

use std::fmt::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use super::metrics::{SyslogSourceMetrics, SYSLOG_DROP_REASONS};
use crate::calendar::TimeZone;
use crate::checking::units::{format_duration, format_size, Count, Dur, Size};
use crate::checking::{Checker, Env, NamedTable};
use crate::component::{ComponentContext, Run, Source, SourceEnv};
use crate::metrics::Metrics;
use crate::sources::listen::{Listener, OtherAuth, RawListener, RawTls};
use crate::sources::raw::raw_source;

/// The transport a syslog source listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }
}

/// `type = "syslog"`: RFC 5424 and RFC 3164 over TCP (optionally TLS) or UDP.
#[derive(Debug, Clone)]
pub struct SyslogSourceSettings {
    pub mode: Transport,
    /// Where; TCP only: how many connections at once, and TLS (RFC 5425)
    /// or not.
    pub listener: Listener,
    /// Longest message kept whole; longer ones keep their start.
    pub max_message_size: usize,
    /// TCP: what all connections' batches and large read buffers may hold
    /// at once (`memory.rs`).
    pub max_buffer_size: usize,
    /// A TCP connection that sends nothing for this long is closed.
    pub idle_timeout: Duration,
    /// The zone of RFC 3164 timestamps.
    pub time_zone: TimeZone,
}

mod syslog_defaults {
    use super::*;
    pub const LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 5514));
    pub const MAX_MESSAGE_SIZE: u64 = 64 << 10;
    pub const MAX_BUFFER_SIZE: u64 = 64 << 20;
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
}

raw_source! {
    /// `[sources.<name>]` with `type = "syslog"`, as written.
    struct RawSyslogSource {
        /// `"tcp"` (default) or `"udp"`.
        mode: String,
        /// Default `"127.0.0.1:5514"`.
        listen: String,
        /// Default 256; 1 to 65536. TCP only.
        max_connections: Count,
        /// Default 32; 1 to 65536. TCP only.
        max_connections_per_peer: Count,
        /// Default `"64KiB"`; 480 bytes (RFC 3164's smallest) to 1 MiB.
        max_message_size: Size,
        /// Default `"64MiB"`; at least what one connection needs for a
        /// message of `max_message_size` (about 4 × it), at most 4 GiB.
        /// TCP only.
        max_buffer_size: Size,
        /// Default `"10m"`. TCP only.
        idle_timeout: Dur,
        /// Default `"local"`; `"UTC"` or an offset like `"+02:00"`.
        time_zone: String,
        /// Default `"10s"`. TCP with TLS only.
        tls_handshake_timeout: Dur,
        /// Default: absent, plain TCP. TCP only.
        tls: RawTls,
    }
}

impl RawSyslogSource {
    fn check(self, cx: &mut Checker<'_>, t: &NamedTable<'_>) -> SyslogSourceSettings {
        use syslog_defaults as d;
        let key = |k: &str| format!("{}.{k}", t.key);
        let mode = match self.mode.as_ref().map(|m| (m.get_ref().as_str(), m)) {
            None | Some(("tcp", _)) => Transport::Tcp,
            Some(("udp", _)) => Transport::Udp,
            Some((other, m)) => {
                cx.error(
                    Some(m.span()),
                    &key("mode"),
                    format!("unknown mode {other:?}: write \"tcp\" or \"udp\""),
                );
                Transport::Tcp
            }
        };
        let raw_listener = RawListener {
            listen: self.listen.as_ref(),
            max_connections: self.max_connections.as_ref(),
            max_connections_per_peer: self.max_connections_per_peer.as_ref(),
            tls_handshake_timeout: self.tls_handshake_timeout.as_ref(),
            tls: self.tls.as_ref(),
        };
        // Over UDP the connection keys are refused below, and the warning
        // about other machines is UDP's own.
        let auth = match mode {
            Transport::Tcp => OtherAuth::None,
            Transport::Udp => OtherAuth::NoneOverUdp,
        };
        let listener = Listener::check(cx, &t.key, d::LISTEN, raw_listener, auth);
        let max_message_size = cx.size(
            &key("max_message_size"),
            self.max_message_size.as_ref(),
            d::MAX_MESSAGE_SIZE,
            480,
            1 << 20,
        ) as usize;
        let max_buffer_size = self.check_buffer(cx, &key("max_buffer_size"), max_message_size);
        let idle_timeout = cx.duration(
            &key("idle_timeout"),
            self.idle_timeout.as_ref(),
            d::IDLE_TIMEOUT,
            Some("every connection would be closed at once"),
        );
        let time_zone = match &self.time_zone {
            None => TimeZone::Local,
            Some(v) => TimeZone::parse(v.get_ref()).unwrap_or_else(|| {
                cx.error(
                    Some(v.span()),
                    &key("time_zone"),
                    format!(
                        "unknown time zone {:?}: write \"local\" (this machine's zone), \"UTC\" \
                         or a fixed offset like \"+02:00\"",
                        v.get_ref()
                    ),
                );
                TimeZone::Local
            }),
        };
        if mode == Transport::Udp {
            for (name, span) in [
                ("tls", self.tls.as_ref().map(|v| v.span())),
                (
                    "max_connections",
                    self.max_connections.as_ref().map(|v| v.span()),
                ),
                (
                    "max_connections_per_peer",
                    self.max_connections_per_peer.as_ref().map(|v| v.span()),
                ),
                ("idle_timeout", self.idle_timeout.as_ref().map(|v| v.span())),
                (
                    "max_buffer_size",
                    self.max_buffer_size.as_ref().map(|v| v.span()),
                ),
                (
                    "tls_handshake_timeout",
                    self.tls_handshake_timeout.as_ref().map(|v| v.span()),
                ),
            ] {
                if let Some(span) = span {
                    cx.error(
                        Some(span),
                        &key(name),
                        format!(
                            "applies to mode = \"tcp\" only: UDP has no connections; remove \
                             {name}, or set mode = \"tcp\""
                        ),
                    );
                }
            }
        }
        SyslogSourceSettings {
            mode,
            listener,
            max_message_size,
            max_buffer_size,
            idle_timeout,
            time_zone,
        }
    }

    /// `max_buffer_size`: room for at least one connection with a message
    /// of `max_message_size`, or none could ever be read.
    fn check_buffer(&self, cx: &mut Checker<'_>, key: &str, max_message_size: usize) -> usize {
        let least = super::memory::unit(max_message_size) as u64;
        let raw = self.max_buffer_size.as_ref();
        let bytes = cx.size(
            key,
            raw,
            syslog_defaults::MAX_BUFFER_SIZE,
            1,
            u32::MAX as u64,
        );
        if bytes < least {
            cx.error(
                raw.map(|v| v.span()),
                key,
                format!(
                    "{} cannot hold one connection's message of max_message_size ({}): a \
                     connection needs {} for it; raise max_buffer_size to at least that, or \
                     lower max_message_size",
                    format_size(bytes),
                    format_size(max_message_size as u64),
                    format_size(least)
                ),
            );
        }
        bytes as usize
    }
}

impl Source for SyslogSourceSettings {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, _env: &SourceEnv<'_>) -> Option<Self> {
        cx.deserialize::<RawSyslogSource>(&t.key, t.value)
            .map(|raw| raw.check(cx, t))
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        let l = &self.listener;
        let how = match (self.mode, &l.tls) {
            (Transport::Udp, _) => "UDP",
            (Transport::Tcp, None) => "TCP",
            (Transport::Tcp, Some(_)) => "TCP with TLS",
        };
        writeln!(
            out,
            "    receives syslog (RFC 5424 and RFC 3164) over {how} on {}",
            l.listen
        )?;
        writeln!(
            out,
            "    messages up to {} (longer ones keep their start); RFC 3164 times in zone {}",
            format_size(self.max_message_size as u64),
            self.time_zone
        )?;
        if self.mode == Transport::Tcp {
            writeln!(
                out,
                "    connections silent for {} are closed; their batches and large buffers \
                 share {}",
                format_duration(self.idle_timeout),
                format_size(self.max_buffer_size as u64)
            )?;
            l.describe(out)?;
        }
        Ok(())
    }

    fn register_families(metrics: &Metrics) {
        metrics.group::<SyslogSourceMetrics>();
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.declare_listener(name);
        metrics.group::<SyslogSourceMetrics>().declare(name);
        metrics.declare_source_drops(name, SYSLOG_DROP_REASONS);
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        if self.mode == Transport::Tcp {
            self.listener
                .check_environment(env, &format!("sources.{name}"));
        }
    }

    fn listens(&self) -> Vec<(&'static str, SocketAddr)> {
        // Only one TCP listener may hold a port; a UDP socket on the same
        // number is another port.
        match self.mode {
            Transport::Tcp => vec![("listen", self.listener.listen)],
            _ => Vec::new(),
        }
    }
}
