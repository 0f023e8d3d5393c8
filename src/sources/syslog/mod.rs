/*!
The `syslog` source: RFC 5424 and RFC 3164 messages over TCP (newline or
octet-counted framing, optionally inside TLS as RFC 5425 says) or UDP,
appended to the log many at a time.

```text
 device ── TCP [TLS] ──▶ tcp.rs      connections in the slots of sources/listen/, idle timeout
                          framing.rs  octet counting | newline, chosen by the first byte
 device ── UDP ────────▶ udp.rs      one datagram, one message
                          syslog_format::parse  the pure parser (RFC 5424, RFC 3164 variants)
                          mapping.rs  parsed message → format-2 event, one batch per read
                          memory.rs   the source's budget: batches and large buffers
                          append.rs   Log::append_timeout, retries, counts
```

# Durability

Syslog has no acknowledgement, so what holdfast can promise depends on the
transport:

* **TCP**: a connection's bytes are read, framed, parsed and appended, and
  the next read waits until that append returned. Under `when_full =
  "block"` with a full log the append is retried and the connection is not
  read: the kernel's buffers fill and TCP flow control stops the sender.
  Nothing read is dropped (but what was read and not yet durable when the
  daemon stops is counted as lost, reason `log_full` or `log_error`).
* **UDP** cannot push back. Datagrams that arrive while the log is full
  (`block`) are counted as dropped with reason `log_full`; what the
  kernel drops while its receive buffer is full, holdfast never sees.

# Ids

Network input is never read again, so ids follow the `otlp_http` source:
one random seed per batch, each event's id derived from it and its index
(`mapping.rs`). A batch appended again after a refusal keeps its ids.

# Bad input

Nothing a sender writes is dropped for its content: a message that does
not parse is kept whole (`syslog.parse_error`), one longer than
`max_message_size` keeps its start (`log.record.truncated`), binary and
non-UTF-8 bytes are kept as bytes. An octet count that is not a number
ends the connection (`holdfast_syslog_connection_errors_total{reason=
"bad_frame"}`) after what was buffered is kept as one message; a connection
quiet for `idle_timeout` is closed (`idle_timeout`), a partial message it
left kept.
*/

mod append;
mod config;
mod framing;
mod mapping;
mod memory;
pub mod metrics;
mod tcp;
mod udp;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};

pub use config::{SyslogSourceSettings, Transport};
pub use framing::{Frame, FrameError, Framer};
pub use mapping::SCOPE_NAME;

use crate::component::ComponentContext;

/// Runs the source until its `stop` is cancelled; fails at start if the
/// address cannot be bound or TLS cannot be set up.
pub async fn run(ctx: ComponentContext, opts: SyslogSourceSettings) -> anyhow::Result<()> {
    let appender = Arc::new(append::Appender::new(&ctx, &opts));
    let listen = opts.listener.listen;
    let cannot_bind = |e| bind_error(&ctx.name, listen, opts.mode, e);
    match opts.mode {
        Transport::Tcp => {
            // TLS first: bad certificate files are named before the port is
            // taken.
            let tls = opts.listener.server_tls(&ctx.name)?;
            let socket = TcpListener::bind(listen).await.map_err(cannot_bind)?;
            tcp::serve(ctx, opts, socket, tls, appender).await
        }
        Transport::Udp => {
            let socket = UdpSocket::bind(listen).await.map_err(cannot_bind)?;
            udp::serve(ctx, opts, socket, appender).await
        }
    }
}

/// Why the source cannot start on `listen`, naming the key to change.
fn bind_error(name: &str, listen: SocketAddr, mode: Transport, e: std::io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "source {name} cannot listen on {listen} for syslog over {}: {e}; change \
         sources.{name}.listen or stop what uses the port",
        mode.as_str().to_uppercase()
    )
}
