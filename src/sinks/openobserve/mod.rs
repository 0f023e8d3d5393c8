//! The `openobserve` sink: OpenObserve's JSON ingestion,
//! `POST {endpoint}/api/{org}/{stream}/_json` with a JSON array of
//! documents (`document.rs`, plus `_timestamp` in microseconds, the field
//! OpenObserve keys its time on).
//!
//! The stream is chosen per event by a template; one request carries one
//! stream. The answer counts per stream:
//!
//! ```json
//! {"code":200,"status":[{"name":"logs","successful":9,"failed":1,"error":"…"}]}
//! ```
//!
//! It does not say *which* events failed, so `failed > 0` is handled like an
//! OTLP partial success: the whole request is quarantined with the reason
//! "partially rejected: N of M; receiver did not say which" and the error.
//! An answer accounting for fewer events than were sent proves nothing and
//! is retried (counted toward `max_attempts`).

mod config;

use std::io::Write;

use serde::Deserialize;

use super::delivery::item::Item;
use super::delivery::options::DeliveryOptions;
use super::delivery::transport::{short_text, BodyVerdict};
use super::document::{self, Layout};
use super::http::{json_answer, HttpApi, HttpOptions, Request};
use super::template::{event_time, Template};
use crate::event::Stored;

/// What an `openobserve` sink runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenObserveOptions {
    pub common: DeliveryOptions,
    pub http: HttpOptions,
    /// The server, like `http://openobserve:5080`.
    pub endpoint: reqwest::Url,
    /// The organization.
    pub org: String,
    /// The stream of each event.
    pub stream: Template,
    /// What each document repeats.
    pub document: Layout,
}

pub const DEFAULT_ORG: &str = "default";
pub const DEFAULT_STREAM: &str = "{signal}";

pub(crate) struct OpenObserve {
    base: reqwest::Url,
    org: String,
    stream: Template,
    layout: Layout,
}

impl OpenObserve {
    pub fn new(opts: &OpenObserveOptions) -> OpenObserve {
        OpenObserve {
            base: opts.endpoint.clone(),
            org: opts.org.clone(),
            stream: opts.stream.clone(),
            layout: opts.document,
        }
    }

    fn stream_of(&self, ev: &Stored) -> String {
        let mut s = String::new();
        self.stream.render(ev, &mut s);
        s
    }
}

impl HttpApi for OpenObserve {
    fn route(&self, ev: &Stored) -> u64 {
        if self.stream.by_signal_only() {
            return ev.signal().map_or(0, |s| s as u64);
        }
        xxhash_rust::xxh3::xxh3_64(self.stream_of(ev).as_bytes())
    }

    fn encode(&self, items: &[Item], _request: usize) -> Request {
        let stream = self.stream_of(&items[0].ev);
        // As for `_bulk` (see elasticsearch/mod.rs).
        let mut body =
            crate::pool::BODIES.take_with(items.iter().map(|i| i.data.len() * 3 + 264).sum());
        let mut doc = Vec::with_capacity(1024);
        let mut shared = document::Shared::new(self.layout);
        body.push(b'[');
        for (i, it) in items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            doc.clear();
            // OpenObserve has no `_id`: the document keeps the event id.
            document::write_with(&mut doc, &it.ev, None, false, &mut shared);
            body.extend_from_slice(b"{\"_timestamp\":");
            let _ = write!(body, "{}", event_time(&it.ev) / 1000);
            body.push(b',');
            body.extend_from_slice(&doc[1..]);
        }
        body.push(b']');
        let url =
            super::network_config::join(&self.base, &format!("api/{}/{}/_json", self.org, stream));
        Request {
            url,
            content_type: "application/json",
            headers: &[],
            body,
        }
    }

    fn parse(&self, _content_type: Option<&str>, body: &[u8], events: usize) -> BodyVerdict {
        parse_status(body, events)
    }
}

/// Reads an ingestion answer.
pub(crate) fn parse_status(body: &[u8], events: usize) -> BodyVerdict {
    #[derive(Deserialize)]
    struct Answer {
        status: Option<Vec<Stream>>,
    }
    #[derive(Deserialize)]
    struct Stream {
        #[serde(default)]
        successful: u64,
        #[serde(default)]
        failed: u64,
        #[serde(default)]
        error: Option<String>,
    }
    let answer: Answer = match json_answer(body, "the ingestion answer") {
        Ok(a) => a,
        Err(verdict) => return verdict,
    };
    let Some(status) = answer.status else {
        return BodyVerdict::Unreadable(format!(
            "the ingestion answer has no \"status\" array: {}",
            short_text(body)
        ));
    };
    let successful: u64 = status.iter().map(|s| s.successful).sum();
    let failed: u64 = status.iter().map(|s| s.failed).sum();
    let errors: Vec<&str> = status
        .iter()
        .filter_map(|s| s.error.as_deref())
        .filter(|e| !e.is_empty())
        .collect();
    if failed > 0 {
        return BodyVerdict::PartiallyRejected {
            rejected: failed,
            message: errors.join("; "),
        };
    }
    if successful < events as u64 {
        return BodyVerdict::Unreadable(format!(
            "the receiver accounted for {successful} of {events} events"
        ));
    }
    BodyVerdict::Accepted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::test_events::{items_v1, items_v2, mixed};

    #[test]
    fn both_log_formats_give_the_same_request() {
        let envs = mixed();
        for stream in ["{signal}", "{source}_{signal}_{hour}"] {
            let oo = OpenObserve {
                base: reqwest::Url::parse("http://oo:5080").unwrap(),
                org: "default".into(),
                stream: Template::parse(stream).unwrap(),
                layout: Layout::Full,
            };
            let (v1, v2) = (items_v1(&envs, 0), items_v2(&envs, 2, 0));
            let routes =
                |items: &[Item]| -> Vec<u64> { items.iter().map(|i| oo.route(&i.ev)).collect() };
            assert_eq!(routes(&v1), routes(&v2));
            // One request per route, as the delivery task forms them.
            for r in routes(&v1) {
                let pick = |items: &[Item]| -> Vec<Item> {
                    items
                        .iter()
                        .filter(|i| oo.route(&i.ev) == r)
                        .cloned()
                        .collect()
                };
                let (a, b) = (oo.encode(&pick(&v1), 0), oo.encode(&pick(&v2), 0));
                assert_eq!(a.url, b.url);
                assert_eq!(
                    String::from_utf8_lossy(&a.body),
                    String::from_utf8_lossy(&b.body)
                );
            }
        }
    }

    #[test]
    fn status_arrays_decide() {
        assert_eq!(
            parse_status(
                br#"{"code":200,"status":[{"name":"logs","successful":3,"failed":0}]}"#,
                3
            ),
            BodyVerdict::Accepted
        );
        assert_eq!(
            parse_status(
                br#"{"code":200,"status":[{"name":"logs","successful":2,"failed":1,"error":"too old"}]}"#,
                3
            ),
            BodyVerdict::PartiallyRejected {
                rejected: 1,
                message: "too old".into()
            }
        );
        assert!(matches!(
            parse_status(
                br#"{"code":200,"status":[{"name":"logs","successful":2,"failed":0}]}"#,
                3
            ),
            BodyVerdict::Unreadable(_)
        ));
        assert!(matches!(parse_status(b"ok", 3), BodyVerdict::Unreadable(_)));
    }
}
