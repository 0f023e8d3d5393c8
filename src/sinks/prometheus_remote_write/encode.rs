//! One request's protobuf bytes, written as its samples come: each
//! series' labels encoded once into one buffer (the series' identity within
//! the request is those bytes), its samples kept as (series, time, value),
//! and the `WriteRequest` written from them at the end.
//!
//! Byte for byte what prost writes for the [`WriteRequest`] of the same
//! series and samples (`proto.rs`; a test checks it): label and sample
//! fields at their default (an empty string, a zero) are left out, as
//! proto3 leaves them out. Writing the bytes directly spares the
//! `TimeSeries`, `Label` and `String` of every sample: a request of 500
//! points of 500 distinct series is a few buffers, not thousands of
//! allocations.
//!
//! [`WriteRequest`]: super::proto::WriteRequest

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use prost::encoding::{encode_varint, encoded_len_varint};
use xxhash_rust::xxh3::xxh3_64;

use super::proto::MetricMetadata;

/// No further series with the same hash.
const END: u32 = u32::MAX;

/// A request being written.
#[derive(Default)]
pub(super) struct RequestWriter {
    /// Every series' encoded `labels` fields, one after another.
    labels: Vec<u8>,
    /// The series, in the order of their first sample.
    series: Vec<Series>,
    /// The first series whose labels hash to the key; the others are
    /// chained through `Series::next`.
    index: HashMap<u64, u32, BuildHasherDefault<Hashed>>,
    /// Every sample, in the order it came.
    samples: Vec<Point>,
}

struct Series {
    /// Its labels' bytes in `labels`.
    start: usize,
    end: usize,
    /// The next series with the same hash, or `END`.
    next: u32,
}

struct Point {
    series: u32,
    timestamp: i64,
    value: f64,
}

impl RequestWriter {
    /// A writer for about `points` points (a series and a sample each).
    pub fn with_capacity(points: usize) -> RequestWriter {
        RequestWriter {
            labels: Vec::with_capacity(points * 64),
            series: Vec::with_capacity(points),
            index: HashMap::with_capacity_and_hasher(points, BuildHasherDefault::default()),
            samples: Vec::with_capacity(points),
        }
    }

    /// One sample of the series with `labels` (sorted by name, names
    /// unique, `__name__` among them).
    pub fn sample<'l>(
        &mut self,
        labels: impl Iterator<Item = (&'l str, &'l str)>,
        value: f64,
        timestamp: i64,
    ) {
        let start = self.labels.len();
        for (name, value) in labels {
            put_label(&mut self.labels, name, value);
        }
        let end = self.labels.len();
        let hash = xxh3_64(&self.labels[start..end]);
        let head = self.index.get(&hash).copied().unwrap_or(END);
        let mut at = head;
        while at != END {
            let s = &self.series[at as usize];
            if self.labels[s.start..s.end] == self.labels[start..end] {
                break;
            }
            at = s.next;
        }
        let series = if at != END {
            // A series seen before in this request: its labels are there.
            self.labels.truncate(start);
            at
        } else {
            let i = self.series.len() as u32;
            self.series.push(Series {
                start,
                end,
                next: head,
            });
            self.index.insert(hash, i);
            i
        };
        self.samples.push(Point {
            series,
            timestamp,
            value,
        });
    }

    /// The encoded `WriteRequest`: the series in the order of their first
    /// sample, each with its samples in time order (two of one instant in
    /// the order they came), then `metadata`.
    pub fn finish<'m>(mut self, metadata: impl Iterator<Item = &'m MetricMetadata>) -> Vec<u8> {
        // Stable: equal times keep their order.
        self.samples.sort_by_key(|p| (p.series, p.timestamp));
        let mut out = Vec::with_capacity(self.labels.len() + self.samples.len() * 24 + 64);
        let mut rest = &self.samples[..];
        while let Some(first) = rest.first() {
            let n = rest
                .iter()
                .position(|p| p.series != first.series)
                .unwrap_or(rest.len());
            let (mine, after) = rest.split_at(n);
            rest = after;
            let s = &self.series[first.series as usize];
            let labels = &self.labels[s.start..s.end];
            let samples_len: usize = mine.iter().map(|p| field_len(sample_len(p))).sum();
            out.push(TIMESERIES_KEY);
            encode_varint((labels.len() + samples_len) as u64, &mut out);
            out.extend_from_slice(labels);
            for p in mine {
                out.push(SAMPLES_KEY);
                encode_varint(sample_len(p) as u64, &mut out);
                if p.value != 0.0 {
                    out.push(VALUE_KEY);
                    out.extend_from_slice(&p.value.to_le_bytes());
                }
                if p.timestamp != 0 {
                    out.push(TIMESTAMP_KEY);
                    encode_varint(p.timestamp as u64, &mut out);
                }
            }
        }
        for m in metadata {
            prost::encoding::message::encode(METADATA_FIELD, m, &mut out);
        }
        out
    }
}

/// The index's keys are hashes already: used as they are.
#[derive(Default)]
struct Hashed(u64);

impl Hasher for Hashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is called for a u64 key; this keeps any other
        // use correct.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// `WriteRequest.timeseries` (1) and `TimeSeries.labels` (1), both
/// length-delimited.
const TIMESERIES_KEY: u8 = 1 << 3 | 2;
const LABELS_KEY: u8 = 1 << 3 | 2;
/// `TimeSeries.samples` (2).
const SAMPLES_KEY: u8 = 2 << 3 | 2;
/// `Label.name` (1) and `Label.value` (2).
const NAME_KEY: u8 = 1 << 3 | 2;
const LABEL_VALUE_KEY: u8 = 2 << 3 | 2;
/// `Sample.value` (1, a double) and `Sample.timestamp` (2, an int64 varint).
const VALUE_KEY: u8 = 1 << 3 | 1;
const TIMESTAMP_KEY: u8 = 2 << 3;
/// `WriteRequest.metadata`.
const METADATA_FIELD: u32 = 3;

fn put_label(out: &mut Vec<u8>, name: &str, value: &str) {
    let len = string_field_len(name) + string_field_len(value);
    out.push(LABELS_KEY);
    encode_varint(len as u64, out);
    put_string(out, NAME_KEY, name);
    put_string(out, LABEL_VALUE_KEY, value);
}

fn put_string(out: &mut Vec<u8>, key: u8, s: &str) {
    if !s.is_empty() {
        out.push(key);
        encode_varint(s.len() as u64, out);
        out.extend_from_slice(s.as_bytes());
    }
}

fn string_field_len(s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        field_len(s.len())
    }
}

/// A length-delimited field's bytes: key, length, `len` bytes.
fn field_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

fn sample_len(p: &Point) -> usize {
    let value = if p.value != 0.0 { 9 } else { 0 };
    let timestamp = if p.timestamp != 0 {
        1 + encoded_len_varint(p.timestamp as u64)
    } else {
        0
    };
    value + timestamp
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::super::proto::{Label, MetricType, Sample, TimeSeries, WriteRequest};
    use super::*;

    /// The writer's bytes against prost's for the same request: repeated
    /// series, samples out of time order, equal times, zero and negative
    /// values and times, NaN, empty label values, metadata.
    #[test]
    fn the_bytes_are_what_prost_writes() {
        let mut w = RequestWriter::default();
        let a = [("__name__", "a"), ("x", "1")];
        let b = [("__name__", "b"), ("e", ""), ("x", "2")];
        type Labels<'l> = &'l [(&'l str, &'l str)];
        let samples: &[(Labels, f64, i64)] = &[
            (&a, 1.0, 20),
            (&b, 0.0, 10),
            (&a, -0.0, 10),
            (&a, f64::NAN, 20),
            (&b, 3.5, -5),
            (&b, 2.0, 0),
        ];
        for (labels, v, t) in samples {
            w.sample(labels.iter().copied(), *v, *t);
        }
        let meta = MetricMetadata {
            r#type: MetricType::Gauge as i32,
            metric_family_name: "a".into(),
            help: "h".into(),
            unit: String::new(),
        };
        let got = w.finish([&meta].into_iter());

        let labels = |l: &[(&str, &str)]| {
            l.iter()
                .map(|(n, v)| Label {
                    name: n.to_string(),
                    value: v.to_string(),
                })
                .collect()
        };
        let s = |value, timestamp| Sample { value, timestamp };
        let want = WriteRequest {
            timeseries: vec![
                TimeSeries {
                    labels: labels(&a),
                    samples: vec![s(-0.0, 10), s(1.0, 20), s(f64::NAN, 20)],
                },
                TimeSeries {
                    labels: labels(&b),
                    samples: vec![s(3.5, -5), s(2.0, 0), s(0.0, 10)],
                },
            ],
            metadata: vec![meta],
        };
        assert_eq!(got, want.encode_to_vec());
    }
}
