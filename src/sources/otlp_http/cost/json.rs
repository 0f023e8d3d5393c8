/*!
What decoding an OTLP/JSON body allocates, bounded from above by one pass
over its bytes, before anything is parsed.

Decoding builds the tree ([`J`]) and then the prost structs from it, and
both are alive at once. The pass counts, for each array and object, its
elements, and adds:

* the tree: each non-empty array or object holds a `Vec` grown by pushing
  (four slots, then doubling) of `J`s (arrays) or of keys and `J`s
  (objects), and half the largest of them again for the copy a growing
  `Vec` makes; each string (key or value) its length and 8;
* the structs: an array's elements become a `Vec` sized exactly, each
  element at most the largest OTLP message ([`LARGEST_MESSAGE`]) when it
  is an object, or a `String` otherwise; an object that is a key's value
  lives inside its parent's struct (every such OTLP field is an `Option`
  or a oneof, none is boxed) and costs nothing more; each string at most
  its length again.

Records are counted as the objects in arrays (every record is one). The
pass does not validate: bytes that are not JSON are refused by the parser,
which will have allocated no more than the pass counted for the part it
read (open arrays and objects are counted as if closed at the end).
*/

use std::mem::size_of;

use opentelemetry_proto::tonic::common::v1 as common;
use opentelemetry_proto::tonic::logs::v1 as logs;
use opentelemetry_proto::tonic::metrics::v1 as metrics;
use opentelemetry_proto::tonic::resource::v1 as resource;
use opentelemetry_proto::tonic::trace::v1 as trace;

use super::{Bound, Over, WalkError};
use crate::sources::otlp_http::json::J;

const fn max(sizes: &[usize]) -> u64 {
    let mut m = 0;
    let mut i = 0;
    while i < sizes.len() {
        if sizes[i] > m {
            m = sizes[i];
        }
        i += 1;
    }
    m as u64
}

/// The largest struct an OTLP/JSON object can become.
pub(crate) const LARGEST_MESSAGE: u64 = max(&[
    size_of::<common::AnyValue>(),
    size_of::<common::KeyValue>(),
    size_of::<common::InstrumentationScope>(),
    size_of::<common::EntityRef>(),
    size_of::<resource::Resource>(),
    size_of::<logs::ResourceLogs>(),
    size_of::<logs::ScopeLogs>(),
    size_of::<logs::LogRecord>(),
    size_of::<trace::ResourceSpans>(),
    size_of::<trace::ScopeSpans>(),
    size_of::<trace::Span>(),
    size_of::<trace::span::Event>(),
    size_of::<trace::span::Link>(),
    size_of::<trace::Status>(),
    size_of::<metrics::ResourceMetrics>(),
    size_of::<metrics::ScopeMetrics>(),
    size_of::<metrics::Metric>(),
    size_of::<metrics::NumberDataPoint>(),
    size_of::<metrics::HistogramDataPoint>(),
    size_of::<metrics::ExponentialHistogramDataPoint>(),
    size_of::<metrics::exponential_histogram_data_point::Buckets>(),
    size_of::<metrics::SummaryDataPoint>(),
    size_of::<metrics::summary_data_point::ValueAtQuantile>(),
    size_of::<metrics::Exemplar>(),
]);

const ARRAY_SLOT: u64 = size_of::<J>() as u64;
const OBJECT_SLOT: u64 = size_of::<(String, J)>() as u64;
/// What an array element that is not an object becomes at most: a
/// `String` (a repeated string), or an 8-byte bucket count or bound.
const SCALAR_ELEMENT: u64 = size_of::<String>() as u64;

/// One array or object not yet closed.
struct Open {
    object: bool,
    commas: u64,
    empty: bool,
}

/// The slots a `Vec` grown by pushing `n` elements has: none, then four,
/// then doubling.
fn pushed_capacity(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        n.next_power_of_two().max(4)
    }
}

/// The bound on what decoding `body` as OTLP/JSON allocates; stops once it
/// passes `limit`.
pub(crate) fn bound(body: &[u8], limit: u64) -> Result<Bound, WalkError> {
    let mut b = Bound::default();
    let add = |b: &mut Bound, n: u64| {
        b.bytes = b.bytes.saturating_add(n);
        if b.bytes > limit {
            Err(WalkError::Over(Over {
                bytes: b.bytes,
                records: b.records,
            }))
        } else {
            Ok(())
        }
    };
    // A value starts: if it is an array's element, it is a `Vec` element
    // of the structs too (an object's other values live inside its struct).
    let element = |b: &mut Bound, open: &mut [Open], object: bool| -> u64 {
        let Some(top) = open.last_mut() else {
            return 0;
        };
        top.empty = false;
        if top.object {
            0
        } else if object {
            b.records += 1;
            LARGEST_MESSAGE
        } else {
            SCALAR_ELEMENT
        }
    };
    let mut largest = 0u64;
    let mut tree = |o: Open| -> u64 {
        let n = o.commas + u64::from(!o.empty);
        let cost = pushed_capacity(n) * if o.object { OBJECT_SLOT } else { ARRAY_SLOT };
        // The copy growing it made: counted once, for the largest.
        let copy = (cost / 2).saturating_sub(largest / 2);
        largest = largest.max(cost);
        cost + copy
    };
    let mut open: Vec<Open> = Vec::new();
    // The root is one struct, a few words.
    add(&mut b, LARGEST_MESSAGE)?;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                let cost = element(&mut b, &mut open, false);
                let start = i + 1;
                i = start;
                while i < body.len() && body[i] != b'"' {
                    i += if body[i] == b'\\' { 2 } else { 1 };
                }
                let len = (i.min(body.len()) - start) as u64;
                // Once in the tree, once in the struct.
                add(&mut b, cost + 2 * (len + 8))?;
            }
            c @ (b'[' | b'{') => {
                let cost = element(&mut b, &mut open, c == b'{');
                add(&mut b, cost)?;
                open.push(Open {
                    object: c == b'{',
                    commas: 0,
                    empty: true,
                });
            }
            b']' | b'}' => {
                if let Some(o) = open.pop() {
                    add(&mut b, tree(o))?;
                }
            }
            b',' => {
                if let Some(top) = open.last_mut() {
                    top.commas += 1;
                }
            }
            b' ' | b'\t' | b'\n' | b'\r' | b':' => {}
            _ => {
                let cost = element(&mut b, &mut open, false);
                add(&mut b, cost)?;
                // The rest of a number or literal costs nothing more.
                while i + 1 < body.len()
                    && !matches!(
                        body[i + 1],
                        b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r'
                    )
                {
                    i += 1;
                }
            }
        }
        i += 1;
    }
    while let Some(o) = open.pop() {
        add(&mut b, tree(o))?;
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_objects_arrays_and_strings() {
        let body = br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{},{"body":{"stringValue":"a,]}\"b"}}]}]}]}"#;
        let b = bound(body, u64::MAX).unwrap();
        // A resource, a scope, two records: the objects in arrays.
        assert_eq!(b.records, 4);
        assert!(b.bytes >= 5 * LARGEST_MESSAGE, "{}", b.bytes);
        assert!(J::parse(body).is_ok());
    }

    #[test]
    fn many_empty_records_pass_the_limit_early() {
        let records = vec!["{}"; 100_000].join(",");
        let body =
            format!(r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{records}]}}]}}]}}"#);
        match bound(body.as_bytes(), 10 << 20) {
            Err(WalkError::Over(o)) => assert!(o.records < 100_000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unclosed_array_still_counts() {
        let body = format!("[{}", vec!["1"; 1000].join(","));
        let b = bound(body.as_bytes(), u64::MAX).unwrap();
        assert!(b.bytes >= 1000 * ARRAY_SLOT, "{}", b.bytes);
    }
}
