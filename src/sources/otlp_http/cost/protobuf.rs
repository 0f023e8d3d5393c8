/*!
What prost will allocate to decode a protobuf OTLP request, bounded from
above by one pass over the wire format, before anything is decoded.

The pass follows the OTLP message schema (a table per message below: which
field numbers are sub-messages, strings or bytes, repeated scalars) and adds:

* for each element of a repeated message field, twice the size of its
  struct (a `Vec` grown by pushing holds at most twice its length), plus
  four elements per repeated field of each message (the first push
  allocates room for four);
* for each string or bytes field, its length and 8 (the smallest buffer);
* for repeated scalars (histogram buckets and bounds, all 8-byte
  elements), sixteen bytes per element, counted from the fewest wire bytes
  an element takes, plus four elements per field.

Sub-messages that are not repeated live inside their parent's struct and
cost nothing more. Unknown fields are skipped by prost without allocating,
and are skipped here. So the bound holds for any input prost accepts, and
for the part of any input prost reads before it refuses the rest.

The pass stops as soon as the bound passes the caller's limit, so a body
naming millions of records costs a walk over its first part, no more.
*/

use super::schema::{
    Desc, Field, Yes, ANY_VALUE, KEY_VALUE, LOGS_REQUEST, LOG_RECORD, METRICS_REQUEST, SCALAR,
    STRING, TRACE_REQUEST,
};
use super::{Bound, Over, WalkError};
use crate::event::Signal;

/// prost refuses messages nested deeper than this (its recursion limit).
const MAX_DEPTH: u32 = 100;

/// The bound on what decoding `body` as the request of `signal` allocates;
/// stops once it passes `limit`.
pub(crate) fn bound(signal: Signal, body: &[u8], limit: u64) -> Result<Bound, WalkError> {
    let desc = match signal {
        Signal::Logs => &LOGS_REQUEST,
        Signal::Traces => &TRACE_REQUEST,
        Signal::Metrics => &METRICS_REQUEST,
    };
    let mut w = Walk {
        bound: Bound::default(),
        limit,
    };
    w.add(desc.size)?;
    w.message(body, desc, 0)?;
    Ok(w.bound)
}

struct Walk {
    bound: Bound,
    limit: u64,
}

impl Walk {
    #[inline(always)]
    fn add(&mut self, n: u64) -> Result<(), WalkError> {
        self.bound.bytes = self.bound.bytes.saturating_add(n);
        if self.bound.bytes > self.limit {
            return Err(WalkError::Over(Over {
                bytes: self.bound.bytes,
                records: self.bound.records,
            }));
        }
        Ok(())
    }

    fn message(&mut self, mut buf: &[u8], desc: &Desc, depth: u32) -> Result<(), WalkError> {
        within_depth(depth)?;
        // The repeated fields (by their index in `desc.fields`) that already
        // had an element in this message.
        let mut started = 0u32;
        while !buf.is_empty() {
            let (number, wire) = tag(&mut buf)?;
            let known = desc.field(number);
            let mut first = |i: usize| {
                let bit = 1u32 << (i % 32);
                let was = started & bit == 0;
                started |= bit;
                was
            };
            match (wire, known) {
                (2, Some((i, f))) => {
                    let inner = length_delimited(&mut buf)?;
                    match f {
                        Field::Message(d, rep) => {
                            if rep == Yes {
                                let elems = if first(i) { 6 } else { 2 };
                                self.add(elems * d.size)?;
                                if d.record {
                                    self.bound.records += 1;
                                }
                            }
                            match shortcut(inner, d) {
                                Some(cost) => self.add(cost)?,
                                None if std::ptr::eq(d, &LOG_RECORD) => {
                                    self.log_record(inner, depth + 1)?
                                }
                                None => self.message(inner, d, depth + 1)?,
                            }
                        }
                        Field::Bytes(rep) => {
                            if rep == Yes {
                                let elems = if first(i) { 6 } else { 2 };
                                self.add(elems * STRING)?;
                            }
                            self.add(inner.len() as u64 + 8)?;
                        }
                        Field::Scalars { min_wire } => {
                            let extra = if first(i) { 4 } else { 0 };
                            let n = inner.len() as u64 / min_wire;
                            self.add((2 * n + extra) * SCALAR)?;
                        }
                    }
                }
                (0 | 1 | 5, Some((i, Field::Scalars { .. }))) => {
                    let extra = if first(i) { 4 } else { 0 };
                    self.add((2 + extra) * SCALAR)?;
                    skip(&mut buf, wire, number, depth)?;
                }
                // Unknown fields, scalars, and known fields of an unexpected
                // wire type (prost refuses those; nothing to count).
                _ => skip(&mut buf, wire, number, depth)?,
            }
        }
        Ok(())
    }
}

impl Walk {
    /// `message` over a `LogRecord`, the message a logs request is mostly
    /// made of, with its fields known when compiled (a jump on the field
    /// number instead of a table lookup) and its sums added once per record
    /// and before each descent. The same sums as `message` with
    /// `LOG_RECORD` (a test compares them).
    fn log_record(&mut self, mut buf: &[u8], depth: u32) -> Result<(), WalkError> {
        within_depth(depth)?;
        let mut cost = 0u64;
        let mut attributes = false;
        while !buf.is_empty() {
            let (number, wire) = tag(&mut buf)?;
            if wire != 2 || !matches!(number, 3 | 5 | 6 | 9 | 10 | 12) {
                skip(&mut buf, wire, number, depth)?;
                continue;
            }
            let inner = length_delimited(&mut buf)?;
            match number {
                5 => match lone_string(inner) {
                    Some(c) => cost += c,
                    None => {
                        self.add(std::mem::take(&mut cost))?;
                        self.message(inner, &ANY_VALUE, depth + 1)?;
                    }
                },
                6 => {
                    let elems = if attributes { 2 } else { 6 };
                    attributes = true;
                    cost += elems * KEY_VALUE.size;
                    match shortcut(inner, &KEY_VALUE) {
                        Some(c) => cost += c,
                        None => {
                            self.add(std::mem::take(&mut cost))?;
                            self.message(inner, &KEY_VALUE, depth + 1)?;
                        }
                    }
                }
                _ => cost += inner.len() as u64 + 8,
            }
        }
        self.add(cost)
    }
}

/// The cost of the two messages most of a request is made of, read
/// without a call when they take their common shape: an `AnyValue` holding
/// one string, and a `KeyValue` whose value is one (every attribute with a
/// string value). The same sums as `Walk::message`; `None` for any other
/// shape, which the general walk takes.
#[inline(always)]
fn shortcut(inner: &[u8], d: &'static Desc) -> Option<u64> {
    if std::ptr::eq(d, &ANY_VALUE) {
        lone_string(inner)
    } else if std::ptr::eq(d, &KEY_VALUE) {
        // Key (field 1), then value (field 2), each with a one-byte length.
        match inner {
            [0x0a, k, rest @ ..] if *k < 0x80 && rest.len() > usize::from(*k) => {
                match &rest[usize::from(*k)..] {
                    [0x12, v, value @ ..] if *v < 0x80 && value.len() == usize::from(*v) => {
                        Some(u64::from(*k) + 8 + lone_string(value)?)
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    } else {
        None
    }
}

/// An `AnyValue` that is one `string_value` (field 1) with a one-byte
/// length and nothing else: the string's bytes and the smallest buffer.
#[inline(always)]
fn lone_string(any: &[u8]) -> Option<u64> {
    match any {
        [0x0a, len, s @ ..] if *len < 0x80 && s.len() == usize::from(*len) => {
            Some(s.len() as u64 + 8)
        }
        _ => None,
    }
}

/// A field's number and wire type, refused as prost refuses them.
#[inline(always)]
fn tag(buf: &mut &[u8]) -> Result<(u32, u8), WalkError> {
    let key = varint(buf)?;
    let number = u32::try_from(key >> 3).map_err(|_| WalkError::Malformed("bad tag"))?;
    if number == 0 {
        return Err(WalkError::Malformed("field number 0"));
    }
    Ok((number, (key & 7) as u8))
}

/// prost's recursion limit, for a message at `depth`.
#[inline(always)]
fn within_depth(depth: u32) -> Result<(), WalkError> {
    if depth > MAX_DEPTH {
        return Err(WalkError::Malformed(
            "recursion limit reached: messages nested too deeply",
        ));
    }
    Ok(())
}

/// Tags, lengths and most scalars of a request fit in one byte: that case
/// is the walk's hot path, kept inline and branch-light.
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Result<u64, WalkError> {
    if let Some((&b, rest)) = buf.split_first() {
        if b < 0x80 {
            *buf = rest;
            return Ok(u64::from(b));
        }
    }
    varint_long(buf)
}

#[inline(never)]
fn varint_long(buf: &mut &[u8]) -> Result<u64, WalkError> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some((&b, rest)) = buf.split_first() else {
            return Err(WalkError::Malformed("buffer underflow"));
        };
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(WalkError::Malformed("invalid varint"))
}

#[inline(always)]
fn length_delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], WalkError> {
    let len = varint(buf)?;
    let len = usize::try_from(len).map_err(|_| WalkError::Malformed("buffer underflow"))?;
    if len > buf.len() {
        return Err(WalkError::Malformed("buffer underflow"));
    }
    let (inner, rest) = buf.split_at(len);
    *buf = rest;
    Ok(inner)
}

#[inline(always)]
fn take(buf: &mut &[u8], n: usize) -> Result<(), WalkError> {
    if n > buf.len() {
        return Err(WalkError::Malformed("buffer underflow"));
    }
    *buf = &buf[n..];
    Ok(())
}

/// Skips one field's value as prost does, groups included.
#[inline]
fn skip(buf: &mut &[u8], wire: u8, number: u32, depth: u32) -> Result<(), WalkError> {
    match wire {
        0 => varint(buf).map(drop),
        1 => take(buf, 8),
        2 => length_delimited(buf).map(drop),
        5 => take(buf, 4),
        3 => {
            if depth >= MAX_DEPTH {
                return Err(WalkError::Malformed(
                    "recursion limit reached: groups nested too deeply",
                ));
            }
            loop {
                let key = varint(buf)?;
                let (n, w) = ((key >> 3) as u32, (key & 7) as u8);
                if w == 4 {
                    if n != number {
                        return Err(WalkError::Malformed("unexpected end group tag"));
                    }
                    return Ok(());
                }
                skip(buf, w, n, depth + 1)?;
            }
        }
        _ => Err(WalkError::Malformed("invalid wire type")),
    }
}
#[cfg(test)]
mod tests;
