//! The protobuf wire pieces the record writers are made of: each field
//! kind's length and its bytes, side by side so they cannot disagree.
//! Lengths are computed before a message is written (its length prefix
//! comes first), as prost does.

use bytes::BufMut;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};

/// A length-delimited field of `len` bytes.
#[inline]
pub(super) fn bytes_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

#[inline]
pub(super) fn put_bytes(tag: u32, b: &[u8], out: &mut impl BufMut) {
    put_head(tag, b.len(), out);
    out.put_slice(b);
}

/// A length-delimited field's key and length: its `len` bytes follow.
#[inline]
pub(super) fn put_head(tag: u32, len: usize, out: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

/// A varint field, left out when 0 (as prost leaves out a default).
#[inline]
pub(super) fn varint_field_len(tag: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(v)
    }
}

#[inline]
pub(super) fn put_varint_field(tag: u32, v: u64, out: &mut impl BufMut) {
    if v != 0 {
        put_varint(tag, v, out);
    }
}

/// A varint field, written even when 0.
#[inline]
pub(super) fn varint_len(tag: u32, v: u64) -> usize {
    key_len(tag) + encoded_len_varint(v)
}

#[inline]
pub(super) fn put_varint(tag: u32, v: u64, out: &mut impl BufMut) {
    encode_key(tag, WireType::Varint, out);
    encode_varint(v, out);
}

/// A fixed64 (or double) field, written even when 0.
#[inline]
pub(super) fn fixed64_len(tag: u32) -> usize {
    key_len(tag) + 8
}

#[inline]
pub(super) fn put_fixed64(tag: u32, v: u64, out: &mut impl BufMut) {
    encode_key(tag, WireType::SixtyFourBit, out);
    out.put_u64_le(v);
}
