//! The `elasticsearch` sink: the `_bulk` API, as served by Elasticsearch,
//! OpenSearch, OpenObserve, Quickwit and VictoriaLogs.
//!
//! Every event is a `create` action whose `_id` is its idempotency key
//! (`keys.rs`), into an index chosen per event by a template
//! (`template.rs`), followed by its document (`document.rs`):
//!
//! ```text
//! {"create":{"_index":"holdfast-logs-2024.05.01","_id":"5f1c…"}}
//! {"@timestamp":"2024-05-01T12:00:00.000Z","event_id":"5f1c…","message":"…",…}
//! ```
//!
//! `create` (not `index`) is what makes resends harmless: a document whose
//! `_id` exists is refused with 409, which means "already delivered" — the
//! usual case after a request whose answer was lost — and is counted as a
//! suppressed duplicate, not as an error.
//!
//! The answer decides per item (`items[i].create.status`): a 200 with
//! `"errors": true` is *not* a success. `"errors": false` is the fast path:
//! every item succeeded, and `items` is not parsed.

mod config;

use std::collections::HashMap;

use serde::Deserialize;

use super::delivery::item::Item;
use super::delivery::keys;
use super::delivery::options::DeliveryOptions;
use super::delivery::transport::{short_text, truncate, BodyVerdict, ItemAnswer, MAX_ERROR_TEXT};
use super::document::{self, Layout};
use super::http::{json_answer, HttpApi, HttpOptions, Request};
use super::network_config::join;
use super::template::{Rendered, Template};

/// What an `elasticsearch` sink runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct ElasticsearchOptions {
    pub common: DeliveryOptions,
    pub http: HttpOptions,
    /// Base URLs (`https://es1:9200`, or `http://oo:5080/api/default` for
    /// OpenObserve's compatible API); `/_bulk` is appended. Requests go to
    /// them in turn.
    pub endpoints: Vec<reqwest::Url>,
    /// The index of each event.
    pub index: Template,
    /// What each document repeats.
    pub document: Layout,
}

/// The default index template.
pub const DEFAULT_INDEX: &str = "holdfast-{signal}-{date}";

pub(crate) struct Elasticsearch {
    bulk: Vec<reqwest::Url>,
    index: Template,
    layout: Layout,
}

impl Elasticsearch {
    pub fn new(opts: &ElasticsearchOptions) -> Elasticsearch {
        Elasticsearch {
            bulk: opts.endpoints.iter().map(|e| join(e, "_bulk")).collect(),
            index: opts.index.clone(),
            layout: opts.document,
        }
    }
}

impl HttpApi for Elasticsearch {
    fn encode(&self, items: &[Item], request: usize) -> Request {
        // Documents run about twice the size of a whole (format-1) event,
        // plus the action; a format-2 event's own bytes leave out what its
        // batch shares, some 200 bytes.
        let mut body =
            crate::pool::BODIES.take_with(items.iter().map(|i| i.data.len() * 3 + 360).sum());
        let mut cache = Rendered::default();
        let mut key = String::with_capacity(66);
        let mut shared = document::Shared::new(self.layout);
        for it in items {
            let index = self.index.render_cached(&it.ev, &mut cache);
            key.clear();
            let key_is_id = keys::idempotency_key(&it.ev, &mut key);
            body.extend_from_slice(b"{\"create\":{\"_index\":");
            document::string(&mut body, index);
            body.extend_from_slice(b",\"_id\":\"");
            body.extend_from_slice(key.as_bytes());
            body.extend_from_slice(b"\"}}\n");
            let id_hex = key_is_id.then_some(key.as_bytes());
            document::write_with(&mut body, &it.ev, id_hex, key_is_id, &mut shared);
            body.push(b'\n');
        }
        Request {
            url: self.bulk[request % self.bulk.len()].clone(),
            content_type: "application/x-ndjson",
            headers: &[],
            body,
        }
    }

    fn parse(&self, _content_type: Option<&str>, body: &[u8], events: usize) -> BodyVerdict {
        parse_bulk(body, events)
    }

    fn error_text(&self, _content_type: Option<&str>, body: &[u8]) -> String {
        #[derive(Deserialize)]
        struct ErrorBody {
            error: serde_json::Value,
        }
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(e) => truncate(&error_string(&e.error), MAX_ERROR_TEXT),
            Err(_) => short_text(body),
        }
    }
}

/// Where `"errors"` is looked for by the fast path: Elasticsearch and
/// OpenSearch put it right after `took`.
const FAST_PATH_WINDOW: usize = 256;

/// Reads a `_bulk` answer.
pub(crate) fn parse_bulk(body: &[u8], events: usize) -> BodyVerdict {
    if errors_flag(body) == Some(false) {
        return BodyVerdict::Accepted;
    }
    #[derive(Deserialize)]
    struct Bulk {
        errors: Option<bool>,
        #[serde(default)]
        items: Vec<HashMap<String, BulkItem>>,
    }
    #[derive(Deserialize)]
    struct BulkItem {
        status: u16,
        #[serde(default)]
        error: Option<serde_json::Value>,
    }
    let bulk: Bulk = match json_answer(body, "the _bulk answer") {
        Ok(b) => b,
        Err(verdict) => return verdict,
    };
    match bulk.errors {
        None => {
            return BodyVerdict::Unreadable(format!(
                "the _bulk answer has no \"errors\" field: {}",
                short_text(body)
            ))
        }
        Some(false) => return BodyVerdict::Accepted,
        Some(true) => {}
    }
    let mut answers = Vec::with_capacity(events);
    for item in bulk.items {
        // One action per item: `create` here, whatever its name.
        let Some(action) = item.into_values().next() else {
            return BodyVerdict::Unreadable("a _bulk item without an action".into());
        };
        answers.push(ItemAnswer {
            status: action.status,
            error: action
                .error
                .map(|e| truncate(&error_string(&e), MAX_ERROR_TEXT)),
        });
    }
    BodyVerdict::PerItem(answers)
}

/// The value of a top-level `"errors"` near the start of the body.
fn errors_flag(body: &[u8]) -> Option<bool> {
    let head = &body[..body.len().min(FAST_PATH_WINDOW)];
    let at = memchr::memmem::find(head, b"\"errors\"")? + 8;
    let rest = head.get(at..)?;
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start();
    if rest.starts_with(b"false") {
        Some(false)
    } else if rest.starts_with(b"true") {
        Some(true)
    } else {
        None
    }
}

/// An Elasticsearch error object as one line: `type: reason (caused by
/// type: reason)`.
fn error_string(e: &serde_json::Value) -> String {
    match e {
        serde_json::Value::Object(o) => {
            let t = o.get("type").and_then(|v| v.as_str()).unwrap_or("error");
            let r = o.get("reason").and_then(|v| v.as_str()).unwrap_or("");
            let mut s = format!("{t}: {r}");
            if let Some(c) = o.get("caused_by") {
                s.push_str(&format!(" (caused by {})", error_string(c)));
            }
            s
        }
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::test_events::{items_v1, items_v2, mixed};

    #[test]
    fn both_log_formats_give_the_same_bulk_body() {
        let envs = mixed();
        let es = Elasticsearch {
            bulk: vec![reqwest::Url::parse("http://es:9200/_bulk").unwrap()],
            index: Template::parse("hf-{signal}-{source}-{date}").unwrap(),
            layout: Layout::Full,
        };
        let v1 = es.encode(&items_v1(&envs, 100), 0);
        let v2 = es.encode(&items_v2(&envs, 2, 100), 0);
        assert_eq!(
            String::from_utf8_lossy(&v1.body),
            String::from_utf8_lossy(&v2.body)
        );
        // The shared attributes are in the documents, before the own ones.
        let text = String::from_utf8(v2.body).unwrap();
        assert!(text.contains(
            r#""attributes":{"log.file.path":"/var/log/app/app.log","log.file.name":"app.log","log.iostream":"stdout"}"#
        ));
        assert!(text.contains(r#""log.file.offset":700"#));
    }

    #[test]
    fn errors_false_is_the_fast_path() {
        assert_eq!(
            parse_bulk(
                br#"{"took":3,"errors":false,"items":[{"create":{"status":201}}]}"#,
                1
            ),
            BodyVerdict::Accepted
        );
        assert_eq!(
            parse_bulk(br#"{ "took" : 3, "errors" : false, "items" : [] }"#, 1),
            BodyVerdict::Accepted
        );
    }

    #[test]
    fn errors_true_is_read_item_by_item() {
        let body = br#"{"took":3,"errors":true,"items":[
            {"create":{"_index":"i","_id":"a","status":201,"result":"created"}},
            {"create":{"_index":"i","_id":"b","status":409,"error":{"type":"version_conflict_engine_exception","reason":"[b]: version conflict, document already exists"}}},
            {"create":{"_index":"i","_id":"c","status":429,"error":{"type":"es_rejected_execution_exception","reason":"rejected execution"}}},
            {"create":{"_index":"i","_id":"d","status":400,"error":{"type":"mapper_parsing_exception","reason":"failed to parse field [n]","caused_by":{"type":"number_format_exception","reason":"For input string: \"x\""}}}}
        ]}"#;
        let BodyVerdict::PerItem(items) = parse_bulk(body, 4) else {
            panic!()
        };
        assert_eq!(items[0], ItemAnswer::new(201, None));
        assert_eq!(items[1].status, 409);
        assert_eq!(items[2].status, 429);
        assert_eq!(
            items[3].error.as_deref(),
            Some("mapper_parsing_exception: failed to parse field [n] (caused by number_format_exception: For input string: \"x\")")
        );
    }

    #[test]
    fn a_200_without_a_bulk_answer_is_unreadable() {
        assert!(matches!(parse_bulk(b"OK", 1), BodyVerdict::Unreadable(_)));
        assert!(matches!(parse_bulk(b"{}", 1), BodyVerdict::Unreadable(_)));
    }

    #[test]
    fn urls_get_bulk_appended() {
        let u = |s: &str| join(&reqwest::Url::parse(s).unwrap(), "_bulk").to_string();
        assert_eq!(u("http://es:9200"), "http://es:9200/_bulk");
        assert_eq!(
            u("http://oo:5080/api/default/"),
            "http://oo:5080/api/default/_bulk"
        );
    }
}
