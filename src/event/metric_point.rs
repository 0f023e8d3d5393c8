//! A stored metric record read in place: its name, unit and kind, and its
//! number points' time, value, flags and attributes, each string borrowed
//! from the record's bytes.
//!
//! A sink that needs only those (remote write) is spared what decoding a
//! [`Metric`](opentelemetry_proto::tonic::metrics::v1::Metric) allocates:
//! the strings, the point and attribute vectors, and dropping them again.
//! [`MetricPoints::read`] checks the whole gauge or sum as it reads it
//! (wire types, lengths, UTF-8 of every string it hands out; exemplars and
//! metadata are only skipped), so that what it hands out later cannot fail.
//!
//! It reads the records holdfast writes, and declines (`None`) whatever it
//! does not read in place: histograms, summaries, exponential histograms,
//! a metric without data, a message field given twice (which protobuf
//! merges), a wire type that is not the field's, damaged bytes. The caller
//! then decodes the record with prost, which reads the rest or says what
//! is wrong with it. The field numbers are OTLP's `metrics.proto`; the
//! tests compare what is read with prost's decode.

/// One field's value on the wire.
#[derive(Clone, Copy)]
pub(super) enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32,
}

/// The fields of one protobuf message, in order; `None` (and `bad`) at
/// the first that is not well formed.
#[derive(Clone)]
pub(super) struct Fields<'a> {
    rest: &'a [u8],
    pub bad: bool,
}

pub(super) fn fields(b: &[u8]) -> Fields<'_> {
    Fields {
        rest: b,
        bad: false,
    }
}

/// A varint at the start of `b`, `b` moved past it.
pub(super) fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl<'a> Fields<'a> {
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    fn field(&mut self) -> Option<(u32, Wire<'a>)> {
        let b = &mut self.rest;
        let key = varint(b)?;
        let field = u32::try_from(key >> 3).ok().filter(|&f| f != 0)?;
        let wire = match key & 7 {
            0 => Wire::Varint(varint(b)?),
            1 => {
                let (v, rest) = b.split_first_chunk::<8>()?;
                *b = rest;
                Wire::Fixed64(u64::from_le_bytes(*v))
            }
            2 => {
                let len = usize::try_from(varint(b)?).ok()?;
                let v = b.get(..len)?;
                *b = &b[len..];
                Wire::Bytes(v)
            }
            5 => {
                *b = b.get(4..)?;
                Wire::Fixed32
            }
            // Groups: prost reads them, this reader does not.
            _ => return None,
        };
        Some((field, wire))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = (u32, Wire<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let f = self.field();
        if f.is_none() {
            self.bad = true;
            self.rest = &[];
        }
        f
    }
}

fn text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

/// What kind of number points a metric holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberKind {
    Gauge,
    /// `temporality` as stored (OTLP's `AggregationTemporality` number).
    Sum {
        monotonic: bool,
        temporality: i32,
    },
}

/// A gauge or sum record, read in place.
#[derive(Debug, Clone, Copy)]
pub struct MetricPoints<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub unit: &'a str,
    pub kind: NumberKind,
    /// The `Gauge` or `Sum` message: its points are read from it.
    data: &'a [u8],
}

/// A point's value as stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Double(f64),
    Int(i64),
}

/// One number point, read in place; its attributes are read as they are
/// iterated.
#[derive(Debug, Clone, Copy)]
pub struct NumberPoint<'a> {
    pub time_unix_nano: u64,
    pub value: Option<Number>,
    pub flags: u32,
    bytes: &'a [u8],
}

/// An attribute's value as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef<'a> {
    /// No value, or an `AnyValue` holding none.
    None,
    Str(&'a str),
    /// Any other value: the `AnyValue` message's bytes, for prost to
    /// decode (checked when the record was read).
    Other(&'a [u8]),
}

/// One attribute, read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attribute<'a> {
    pub key: &'a str,
    pub value: ValueRef<'a>,
}

/// `Metric` fields.
const NAME: u32 = 1;
const DESCRIPTION: u32 = 2;
const UNIT: u32 = 3;
const GAUGE: u32 = 5;
const SUM: u32 = 7;
const HISTOGRAM: u32 = 9;
const EXPONENTIAL_HISTOGRAM: u32 = 10;
const SUMMARY: u32 = 11;
/// `Gauge` and `Sum` fields.
const DATA_POINTS: u32 = 1;
const TEMPORALITY: u32 = 2;
const MONOTONIC: u32 = 3;
/// `NumberDataPoint` fields.
const POINT_START: u32 = 2;
const POINT_TIME: u32 = 3;
const AS_DOUBLE: u32 = 4;
const AS_INT: u32 = 6;
const POINT_ATTRIBUTES: u32 = 7;
const POINT_FLAGS: u32 = 8;
/// `KeyValue` and `AnyValue` fields.
const KEY: u32 = 1;
const VALUE: u32 = 2;
const STRING_VALUE: u32 = 1;

impl<'a> MetricPoints<'a> {
    /// Reads and checks a `Metric` record; `None` when it is not a gauge or
    /// sum this reader reads in place (see the module's doc).
    pub fn read(record: &'a [u8]) -> Option<MetricPoints<'a>> {
        let m = MetricPoints::head(record)?;
        // Every point and attribute once, so that iterating them later
        // meets nothing it would have to report.
        let mut it = fields(m.data);
        for (field, v) in it.by_ref() {
            match (field, v) {
                (DATA_POINTS, Wire::Bytes(b)) => {
                    let p = NumberPoint::read(b)?;
                    let mut attrs = fields(p.bytes);
                    for (field, v) in attrs.by_ref() {
                        match (field, v) {
                            (POINT_ATTRIBUTES, Wire::Bytes(b)) => {
                                if let ValueRef::Other(v) = Attribute::read(b)?.value {
                                    check_any_value(v)?;
                                }
                            }
                            (POINT_ATTRIBUTES, _) => return None,
                            _ => {}
                        }
                    }
                    if attrs.bad {
                        return None;
                    }
                }
                (DATA_POINTS, _) => return None,
                _ => {}
            }
        }
        (!it.bad).then_some(m)
    }

    /// The metric's name, unit and kind, its points not looked at: for a
    /// record [`MetricPoints::read`] checked before.
    pub(super) fn head(record: &'a [u8]) -> Option<MetricPoints<'a>> {
        let (mut name, mut description, mut unit) = ("", "", "");
        let mut data = None;
        let mut it = fields(record);
        for (field, v) in it.by_ref() {
            match (field, v) {
                (NAME, Wire::Bytes(b)) => name = text(b)?,
                (DESCRIPTION, Wire::Bytes(b)) => description = text(b)?,
                (UNIT, Wire::Bytes(b)) => unit = text(b)?,
                (GAUGE | SUM, Wire::Bytes(b)) if data.is_none() => data = Some((field, b)),
                (NAME | DESCRIPTION | UNIT | GAUGE | SUM, _) => return None,
                (HISTOGRAM | EXPONENTIAL_HISTOGRAM | SUMMARY, _) => return None,
                _ => {}
            }
        }
        if it.bad {
            return None;
        }
        let (which, data) = data?;
        let kind = if which == GAUGE {
            NumberKind::Gauge
        } else {
            let (mut monotonic, mut temporality) = (false, 0);
            for (field, v) in fields(data) {
                match (field, v) {
                    (TEMPORALITY, Wire::Varint(t)) => temporality = t as i32,
                    (MONOTONIC, Wire::Varint(m)) => monotonic = m != 0,
                    (TEMPORALITY | MONOTONIC, _) => return None,
                    _ => {}
                }
            }
            NumberKind::Sum {
                monotonic,
                temporality,
            }
        };
        Some(MetricPoints {
            name,
            description,
            unit,
            kind,
            data,
        })
    }

    /// The metric's points, in stored order.
    pub fn points(&self) -> impl Iterator<Item = NumberPoint<'a>> + 'a {
        fields(self.data).filter_map(|(field, v)| match (field, v) {
            (DATA_POINTS, Wire::Bytes(b)) => NumberPoint::read(b),
            _ => None,
        })
    }
}

/// An `AnyValue` other than a string is decoded by prost when used: it
/// must decode.
fn check_any_value(b: &[u8]) -> Option<()> {
    use prost::Message;
    opentelemetry_proto::tonic::common::v1::AnyValue::decode(b)
        .ok()
        .map(|_| ())
}

impl<'a> NumberPoint<'a> {
    fn read(b: &'a [u8]) -> Option<NumberPoint<'a>> {
        let mut p = NumberPoint {
            time_unix_nano: 0,
            value: None,
            flags: 0,
            bytes: b,
        };
        let mut it = fields(b);
        for (field, v) in it.by_ref() {
            match (field, v) {
                (POINT_START, Wire::Fixed64(_)) => {}
                (POINT_TIME, Wire::Fixed64(t)) => p.time_unix_nano = t,
                (AS_DOUBLE, Wire::Fixed64(d)) => p.value = Some(Number::Double(f64::from_bits(d))),
                (AS_INT, Wire::Fixed64(i)) => p.value = Some(Number::Int(i as i64)),
                (POINT_FLAGS, Wire::Varint(f)) => p.flags = f as u32,
                (POINT_START | POINT_TIME | AS_DOUBLE | AS_INT | POINT_FLAGS, _) => return None,
                _ => {}
            }
        }
        (!it.bad).then_some(p)
    }

    /// The point's attributes, in stored order.
    pub fn attributes(&self) -> impl Iterator<Item = Attribute<'a>> + Clone + 'a {
        fields(self.bytes).filter_map(|(field, v)| match (field, v) {
            (POINT_ATTRIBUTES, Wire::Bytes(b)) => Attribute::read(b),
            _ => None,
        })
    }
}

impl<'a> Attribute<'a> {
    fn read(b: &'a [u8]) -> Option<Attribute<'a>> {
        let mut key = "";
        let mut value = None;
        let mut it = fields(b);
        for (field, v) in it.by_ref() {
            match (field, v) {
                (KEY, Wire::Bytes(k)) => key = text(k)?,
                (VALUE, Wire::Bytes(v)) if value.is_none() => value = Some(v),
                (KEY | VALUE, _) => return None,
                _ => {}
            }
        }
        if it.bad {
            return None;
        }
        let value = match value {
            None => ValueRef::None,
            Some(v) => any_value(v)?,
        };
        Some(Attribute { key, value })
    }
}

/// An `AnyValue` holding nothing, exactly one string, or anything else.
fn any_value(b: &[u8]) -> Option<ValueRef<'_>> {
    let mut it = fields(b);
    let first = it.next();
    let only = it.next().is_none() && !it.bad;
    match first {
        None if !it.bad => Some(ValueRef::None),
        Some((STRING_VALUE, Wire::Bytes(s))) if only => text(s).map(ValueRef::Str),
        _ => Some(ValueRef::Other(b)),
    }
}

#[cfg(test)]
mod tests;
