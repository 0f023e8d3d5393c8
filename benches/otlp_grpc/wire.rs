//! gRPC on the wire, written out by hand on hyper's HTTP/2 so that the
//! bench's own client and receiver cost the same for both protocols and
//! depend on nothing the receiver or the sink under test use: the
//! length-prefixed message (a compressed flag, a big-endian u32 length, the
//! bytes), `POST /<service>/Export` with `content-type: application/grpc`,
//! and the status in the trailers (`grpc-status`), or in the headers of a
//! trailers-only answer.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use hyper::header::{HeaderMap, HeaderValue};

pub const LOGS_EXPORT: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// One length-prefixed message, gzipped (flag 1) or not.
pub fn frame(message: &[u8], gzip: bool) -> Bytes {
    let payload = if gzip {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(message).unwrap();
        gz.finish().unwrap()
    } else {
        message.to_vec()
    };
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(u8::from(gzip));
    b.put_u32(payload.len() as u32);
    b.put_slice(&payload);
    b.freeze()
}

/// The messages of a request or answer body, decompressed.
pub fn messages(mut body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let compressed = body[0] == 1;
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let payload = &body[5..5 + len];
        out.push(if compressed {
            let mut v = Vec::new();
            flate2::read::GzDecoder::new(payload)
                .read_to_end(&mut v)
                .unwrap();
            v
        } else {
            payload.to_vec()
        });
        body = &body[5 + len..];
    }
    out
}

/// One unary call on an HTTP/2 connection; whether it ended `OK`.
pub async fn call(
    tx: &mut hyper::client::conn::http2::SendRequest<http_body_util::Full<Bytes>>,
    authority: &str,
    path: &str,
    body: Bytes,
    gzip: bool,
) -> bool {
    let mut req = hyper::Request::post(format!("http://{authority}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if gzip {
        req = req.header("grpc-encoding", "gzip");
    }
    let req = req.body(http_body_util::Full::new(body)).unwrap();
    let Ok(resp) = tx.send_request(req).await else {
        return false;
    };
    if resp.status() != 200 {
        return false;
    }
    let head_status = resp.headers().get("grpc-status").cloned();
    let Ok(collected) = resp.into_body().collect().await else {
        return false;
    };
    let status = head_status.or_else(|| collected.trailers()?.get("grpc-status").cloned());
    status.is_some_and(|s| s == "0")
}

/// An `OK` answer to an `Export`: an empty response message (every record
/// accepted, no partial success), then `grpc-status: 0` in the trailers.
pub struct ExportOk {
    sent: u8,
}

impl ExportOk {
    pub fn new() -> ExportOk {
        ExportOk { sent: 0 }
    }
}

impl Body for ExportOk {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.sent += 1;
        Poll::Ready(match self.sent {
            1 => Some(Ok(Frame::data(frame(&[], false)))),
            2 => {
                let mut t = HeaderMap::new();
                t.insert("grpc-status", HeaderValue::from_static("0"));
                Some(Ok(Frame::trailers(t)))
            }
            _ => None,
        })
    }
}
