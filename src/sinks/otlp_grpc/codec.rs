//! The codec of the `Export` call: the request goes out as the protobuf
//! bytes the sink already wrote (`otlp_http`'s encoder: no request structs,
//! no second encoding), and the answer is read with prost into the one
//! field OTLP puts there, `partial_success`.

use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use super::classify::ExportResponse;

/// Bytes out, an export response in. An answer that is not one is kept as
/// its reason rather than failing the call, so that it is judged as an
/// unreadable answer (retried, counted) and not as a status of the
/// receiver's.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ExportCodec;

impl Codec for ExportCodec {
    type Encode = Vec<u8>;
    type Decode = Result<ExportResponse, String>;
    type Encoder = BytesEncoder;
    type Decoder = ResponseDecoder;

    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder
    }
}

#[derive(Debug)]
pub(super) struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        crate::pool::BODIES.give(item);
        Ok(())
    }
}

#[derive(Debug)]
pub(super) struct ResponseDecoder;

impl Decoder for ResponseDecoder {
    type Item = Result<ExportResponse, String>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        Ok(Some(ExportResponse::decode(src).map_err(|e| {
            format!("the answer is not an OTLP export response ({e})")
        })))
    }
}
