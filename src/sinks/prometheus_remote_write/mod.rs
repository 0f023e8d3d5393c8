//! The `prometheus_remote_write` sink: metric points to a Prometheus
//! remote write 1.0 receiver (Prometheus with
//! `--web.enable-remote-write-receiver`, Mimir, Cortex, Thanos Receive,
//! VictoriaMetrics), through the shared HTTP transport.
//!
//! | file | concept |
//! |------|---------|
//! | `proto.rs` | the remote write 1.0 messages (prost, the published field numbers) |
//! | `naming.rs` | OTLP names and units to Prometheus names, attribute keys to label names |
//! | `convert.rs` | stored points to one request's series, grouped, in time order; what has no remote write form |
//! | `encode.rs` | a request's bytes, written as its samples come: each series' labels encoded once |
//! | `config.rs` | its keys, check and `holdfast check` lines |
//!
//! A request is a protobuf `WriteRequest` compressed with snappy's block
//! format, as the protocol requires (the sink's `compression` key does not
//! apply). Events that are not metric points, exponential histograms and
//! delta counters or histograms have no remote write 1.0 form: they are
//! finished unsent and counted in `holdfast_dropped_events_total`.
//!
//! The answer: a 2xx stores every sample; 429 and 5xx are retried. A
//! receiver that refuses samples it will never store (too old for its
//! window, out of order) answers 400 for the whole request without saying
//! which ("out of bounds", "too old sample"; Prometheus before 2.49 answers
//! 500 "too old sample" when it has an out-of-order window) and Prometheus
//! stores none of the request: the request is halved until each refused
//! point is alone, and that one is quarantined as `too_old` or
//! `out_of_order`. A too-old refusal also teaches a time no sample at or
//! before which the receiver will take (the refused request's oldest):
//! such samples are quarantined unsent, and where the receiver has an
//! out-of-order window the newer half of a refused request goes first, so
//! a long outage's backlog is settled in a few requests per batch
//! (docs/sinks-prometheus-remote-write.md).

mod config;
mod convert;
mod encode;
mod naming;
mod proto;

use std::sync::{Mutex, PoisonError};

use super::delivery::item::Item;
use super::delivery::options::DeliveryOptions;
use super::delivery::transport::{BodyVerdict, Refusal};
use super::http::{HttpApi, HttpOptions, Request};
use crate::event::Stored;

/// What a `prometheus_remote_write` sink runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteWriteOptions {
    pub common: DeliveryOptions,
    pub http: HttpOptions,
    pub endpoint: reqwest::Url,
    /// Every resource attribute as a label, besides `job` and `instance`.
    pub resource_to_labels: bool,
}

pub(crate) struct RemoteWrite {
    url: reqwest::Url,
    resource_to_labels: bool,
    /// The newest time (Unix ms) known too old for the receiver, and its
    /// refusal: samples no newer are quarantined unsent. Learnt from this
    /// run's answers only (a receiver whose storage was wiped since takes
    /// old samples again after a restart).
    floor: Mutex<Option<(i64, Refusal)>>,
}

impl RemoteWrite {
    pub fn new(opts: &RemoteWriteOptions) -> RemoteWrite {
        RemoteWrite {
            url: opts.endpoint.clone(),
            resource_to_labels: opts.resource_to_labels,
            floor: Mutex::new(None),
        }
    }
}

/// The headers of every request besides its content type: the body's
/// snappy block compression and the protocol version, as remote write
/// 1.0 requires them.
const HEADERS: &[(&str, &str)] = &[
    ("Content-Encoding", "snappy"),
    ("X-Prometheus-Remote-Write-Version", "0.1.0"),
];

impl HttpApi for RemoteWrite {
    fn unsendable(&self, ev: &Stored) -> Option<&'static str> {
        convert::unsendable(ev)
    }

    /// Gauges and sums (nearly every point scraped) are converted from
    /// their stored bytes, never decoded.
    fn reads_points_in_place(&self) -> bool {
        true
    }

    fn encode(&self, items: &[Item], _request: usize) -> Request {
        let request = convert::encode_request(items.iter().map(|i| &i.ev), self.resource_to_labels);
        Request {
            url: self.url.clone(),
            content_type: "application/x-protobuf",
            headers: HEADERS,
            body: snappy(&request),
        }
    }

    /// Remote write 2xx answers carry no verdict (Prometheus: 204, empty).
    fn parse(&self, _content_type: Option<&str>, _body: &[u8], _events: usize) -> BodyVerdict {
        BodyVerdict::Accepted
    }

    fn refused_events(&self, status: u16, error: &str) -> Option<(&'static str, bool)> {
        refusal(status, error).map(|reason| (reason, late_samples_accepted(error)))
    }

    /// Samples sent while older ones wait out a 429 would reach a receiver
    /// without an out-of-order window first, and the older ones would then
    /// be refused as out of order.
    fn in_order(&self) -> bool {
        true
    }

    fn foreknown(&self, ev: &Stored) -> Option<Refusal> {
        let floor = self.floor.lock().unwrap_or_else(PoisonError::into_inner);
        let (ts, refusal) = floor.as_ref()?;
        (convert::point_millis(ev)? <= *ts).then(|| refusal.clone())
    }

    /// A receiver refuses samples as too old by a cutoff in time that only
    /// moves forward: one of the refused request's samples is older than
    /// the cutoff, so every sample no newer than the oldest of them is too.
    fn learn_refusal(&self, items: &[Item], refusal: &Refusal) {
        if refusal.kind != "too_old" {
            return;
        }
        let Some(oldest) = items
            .iter()
            .filter_map(|i| convert::point_millis(&i.ev))
            .min()
        else {
            return;
        };
        let mut floor = self.floor.lock().unwrap_or_else(PoisonError::into_inner);
        if floor.as_ref().is_none_or(|(ts, _)| oldest > *ts) {
            *floor = Some((oldest, refusal.clone()));
        }
    }
}

/// Whether a too-old refusal comes from a receiver that stores late
/// samples (Prometheus says "too old sample" only with an out-of-order
/// window; Mimir "sample-too-old" only past its window): sending a
/// request's newer half first is then safe, and what it teaches settles the
/// older half. Without a window ("out of bounds") the older half goes
/// first, or its good samples would arrive out of order.
fn late_samples_accepted(error: &str) -> bool {
    let e = error.to_ascii_lowercase();
    e.contains("too old") || e.contains("too-old")
}

/// What a refusal says about some samples of the request, from the
/// receivers' texts: Prometheus's `storage` errors ("out of bounds", "too
/// old sample", "out of order sample", "duplicate sample for timestamp")
/// and Mimir's (`err-mimir-sample-too-old`, `…-out-of-order`,
/// `…-sample-out-of-bounds`). Only 400 and, for "too old" (Prometheus
/// 2.39-2.48 with an out-of-order window), 500.
fn refusal(status: u16, error: &str) -> Option<&'static str> {
    let e = error.to_ascii_lowercase();
    let too_old = e.contains("out of bounds")
        || e.contains("out-of-bounds")
        || e.contains("too old")
        || e.contains("too-old");
    let out_of_order = e.contains("out of order sample")
        || e.contains("sample-out-of-order")
        || e.contains("duplicate sample for timestamp")
        || e.contains("duplicate-sample");
    match status {
        400 if too_old => Some("too_old"),
        400 if out_of_order => Some("out_of_order"),
        500 if e.contains("too old sample") => Some("too_old"),
        _ => None,
    }
}

/// Snappy's block format (not its framing format), as remote write wants.
fn snappy(data: &[u8]) -> Vec<u8> {
    // Compressing into a buffer of `max_compress_len` cannot fail.
    snap::raw::Encoder::new()
        .compress_vec(data)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
