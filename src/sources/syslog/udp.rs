/*!
The UDP socket: one datagram is one message (RFC 5426), a trailing newline
aside. Datagrams waiting in the socket are taken together into one batch,
so a burst costs few appends. UDP cannot push back: a batch the log has no
room for is counted as dropped (`log_full`) at once rather than waiting
while the kernel drops more, unseen.
*/

use std::io;
use std::sync::Arc;

use tokio::net::UdpSocket;
use tracing::{info, warn};

use super::append::{now_ns, Appender, WhenNoRoom};
use super::mapping::Message;
use super::SyslogSourceSettings;
use crate::component::ComponentContext;

/// Datagrams taken into one batch at most.
const MAX_BATCH: usize = 4096;

/// Reads datagrams from `socket` until the source's stop.
pub(super) async fn serve(
    ctx: ComponentContext,
    opts: SyslogSourceSettings,
    socket: UdpSocket,
    appender: Arc<Appender>,
) -> anyhow::Result<()> {
    let name = &ctx.name;
    let addr = socket.local_addr().unwrap_or(opts.listener.listen);
    info!(source = %name, %addr, "syslog source listening on UDP");
    let max = opts.max_message_size;
    // The largest UDP payload, so that a long datagram's length is known.
    let mut buf = vec![0u8; 65536];
    let mut pending = appender.pending();
    let stop = ctx.stop.clone();
    loop {
        let first = tokio::select! {
            _ = stop.cancelled() => break,
            r = socket.recv_from(&mut buf) => r,
        };
        let mut next = Some(first);
        while let Some(r) = next.take() {
            match r {
                Ok((n, peer)) => {
                    let observed_ns = now_ns();
                    let mut bytes = &buf[..n];
                    if let [rest @ .., b'\n'] = bytes {
                        bytes = rest;
                    }
                    let original_len = (bytes.len() > max).then_some(bytes.len());
                    pending.push(Message {
                        bytes: &bytes[..bytes.len().min(max)],
                        peer: peer.ip(),
                        client_subject: None,
                        original_len,
                        observed_ns,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => warn!(source = %name, error = %e, "syslog UDP receive failed"),
            }
            if pending.len() < MAX_BATCH && pending.bytes() < appender.batch_bytes {
                next = Some(socket.try_recv_from(&mut buf));
            }
        }
        appender.flush(&mut pending, WhenNoRoom::Drop, &stop).await;
    }
    info!(source = %name, "syslog source stopped");
    Ok(())
}
