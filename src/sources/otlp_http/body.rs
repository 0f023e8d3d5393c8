/*!
Receiving a request body within its bounds: at most `max_body_bytes`, before
the request's deadline, and inside the source-wide memory budget.

The budget is a semaphore whose permits are bytes. A request reserves its
`Content-Length` before reading (or each chunk as it arrives when the length
is not declared), its decompressed bytes as they are produced, and then
what decoding it will allocate (bounded before decoding, `cost/`); the
reservation is released when the request is answered. So however many
clients send at once, and however slowly, the bodies in memory stay within
the budget; a request that cannot get room before its deadline is answered
429 and retried by the client.
*/

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Instant;

use super::response::RequestError;
pub(crate) use crate::sources::budget::{Budget, Reservation};

/// A source's budget: `max(64 MiB, 2 × max_body_bytes + 1 MiB)`, room for
/// at least one largest request, compressed and decompressed.
pub(crate) fn budget_for(max_body_bytes: u64) -> Budget {
    let bytes = (64u64 << 20).max(2 * max_body_bytes + (1 << 20));
    Budget::with_bytes(bytes.min(u32::MAX as u64) as usize)
}

/// How long a request waits for room in the budget before it is answered
/// 429 (its own deadline permitting).
const BUDGET_WAIT: Duration = Duration::from_secs(2);

/// The time by which a request must have room in the budget.
pub(crate) fn room_by(deadline: Instant) -> Instant {
    deadline.min(Instant::now() + BUDGET_WAIT)
}

/// How the body says its own length, besides `Content-Length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Nothing: room is reserved chunk by chunk as the bytes arrive.
    None,
    /// A gRPC message: its 5-byte prefix declares the length, so the whole
    /// message is reserved (and a message over the limit refused) as soon
    /// as the prefix is in, once instead of once per HTTP/2 frame.
    GrpcPrefix,
}

/// Reads the whole body: at most `limit` bytes, before `deadline`, with
/// room reserved in `res` for every byte held.
pub(crate) async fn read(
    body: &mut Incoming,
    limit: u64,
    declared: Option<u64>,
    framing: Framing,
    deadline: Instant,
    timeout: Duration,
    res: &mut Reservation,
) -> Result<Bytes, RequestError> {
    // One timer for the whole body, not one per frame: a message of many
    // frames would otherwise arm and cancel one for each.
    match tokio::time::timeout_at(
        deadline,
        read_all(body, limit, declared, framing, deadline, res),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(RequestError::Timeout(timeout)),
    }
}

async fn read_all(
    body: &mut Incoming,
    limit: u64,
    declared: Option<u64>,
    framing: Framing,
    deadline: Instant,
    res: &mut Reservation,
) -> Result<Bytes, RequestError> {
    let room_by = || room_by(deadline);
    if let Some(n) = declared {
        // `declared <= limit` was checked by the caller; hyper ends the body
        // at exactly Content-Length bytes, so this covers all of it.
        res.grow(n as usize, room_by()).await?;
    }
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    let mut prefix_read = framing == Framing::None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| RequestError::BodyRead(e.to_string()))?;
        // Trailers carry nothing OTLP uses.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len() as u64;
        if total > limit {
            return Err(RequestError::BodyTooLarge { limit });
        }
        if !data.is_empty() {
            chunks.push(data);
        }
        if !prefix_read && total >= 5 {
            prefix_read = true;
            // The prefix: a flag byte, then the length, big-endian.
            let mut head = [0u8; 5];
            let mut at = 0;
            for c in &chunks {
                let n = (5 - at).min(c.len());
                head[at..at + n].copy_from_slice(&c[..n]);
                at += n;
                if at == 5 {
                    break;
                }
            }
            let whole = 5 + u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as u64;
            // A flag byte other than 0 or 1: not a gRPC message at all, which
            // the caller refuses for what it is once the body is in.
            if head[0] <= 1 {
                if whole > limit {
                    return Err(RequestError::BodyTooLarge { limit });
                }
                let held = res.held() as u64;
                if whole > held {
                    res.grow((whole - held) as usize, room_by()).await?;
                }
            }
        }
        let held = res.held() as u64;
        if total > held {
            res.grow((total - held) as usize, room_by()).await?;
        }
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        // The common case: no copy.
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut all = BytesMut::with_capacity(total as usize);
            for c in chunks {
                all.extend_from_slice(&c);
            }
            all.freeze()
        }
    })
}

/// Reads and discards up to `limit` bytes of a body we answer without
/// using, so the connection stays usable and the client, which usually
/// sends its whole body before reading the answer, sees the answer rather
/// than a reset. Returns whether the body was read to its end.
pub(crate) async fn discard(body: &mut Incoming, limit: u64, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let mut seen = 0u64;
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(None) => return true,
            Ok(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    seen += d.len() as u64;
                    if seen > limit {
                        return false;
                    }
                }
            }
            _ => return false,
        }
    }
}
