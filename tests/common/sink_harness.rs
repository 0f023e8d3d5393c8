//! A harness for the network sink tests: a real log in a temporary
//! directory, events appended by the test (envelopes built here, so the
//! tests do not depend on the sources), a test receiver, the sink running
//! in-process, and the checks every test makes:
//!
//! * the cursor never passes an unfinished event — checked at every poll
//!   while waiting: each event below the committed position is stored at the
//!   receiver or in the quarantine;
//! * nothing is lost — every event ends up stored or quarantined;
//! * duplicates at the receiver are only ids whose answer was lost.
//!
//! Included with `#[path = "common/sink_harness.rs"] mod harness;` next to
//! `#[path = "common/receivers.rs"] mod receivers;`.
#![allow(dead_code)]

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast::cli::quarantine::{self, Filter};
use holdfast::event::{Envelope, EventId, Record};
use holdfast::metrics::{Metrics, SinkLabels, SinkReasonLabels};
use holdfast::seglog::{Batch, FsyncPolicy, Log, LogOptions};
use holdfast::sinks::document::Layout;
use holdfast::sinks::elasticsearch::ElasticsearchOptions;
use holdfast::sinks::openobserve::OpenObserveOptions;
use holdfast::sinks::quarantine::Record as QRecord;
use holdfast::sinks::SinkKind;
use holdfast::sinks::{
    Compression, DeliveryOptions, HttpOptions, OtlpEncoding, OtlpHttpSinkOptions, Template,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tokio_util::sync::CancellationToken;

use crate::receivers::{Api, Receiver};

pub const SINK: &str = "out";
pub const SOURCE: &str = "app";

pub fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// A log event numbered `n`, carrying its id as the `test.id` attribute.
pub fn log_event(n: u64, source: &str, host: &str) -> Envelope {
    let id = EventId::random();
    Envelope {
        id: id.0.to_vec(),
        source: source.into(),
        observed_time_unix_nano: 1_714_564_800_000_000_000 + n,
        resource: Some(Resource {
            attributes: vec![kv("host.name", host)],
            ..Default::default()
        }),
        scope: Some(InstrumentationScope {
            name: "holdfast.test".into(),
            ..Default::default()
        }),
        record: Some(Record::Log(LogRecord {
            time_unix_nano: 1_714_564_800_000_000_000 + n,
            severity_text: "INFO".into(),
            severity_number: 9,
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(format!("event {n}"))),
            }),
            attributes: vec![kv("test.id", &id.to_hex())],
            ..Default::default()
        })),
        ..Default::default()
    }
}

pub fn env_id(env: &Envelope) -> String {
    env.event_id().unwrap().to_hex()
}

/// Sink options for tests: small batches, fast timers.
pub fn test_options(quarantine_dir: PathBuf) -> DeliveryOptions {
    let mut o = DeliveryOptions::new(vec![SOURCE.into()], quarantine_dir);
    o.batch_max_events = 10;
    o.batch_timeout = Duration::from_millis(5);
    o.concurrency = 2;
    o.request_timeout = Duration::from_secs(5);
    o.backoff_initial = Duration::from_millis(5);
    o.backoff_max = Duration::from_millis(50);
    o.max_attempts = 3;
    o.replay_scan_interval = Duration::from_millis(20);
    o.config_hash = "testhash".into();
    o
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub log: Log,
    pub metrics: Arc<Metrics>,
    pub receiver: Receiver,
    pub options: DeliveryOptions,
    /// The HTTP transport's options: no compression unless a test asks.
    pub http: HttpOptions,
    /// Receiver-visible id of each appended event, by sequence number.
    pub ids: Vec<String>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// Events below this are already verified stored or quarantined.
    verified: u64,
    pub otlp_encoding: OtlpEncoding,
    pub index: Template,
}

impl Harness {
    pub async fn new(api: Api) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(
            dir.path().join("log"),
            LogOptions {
                fsync: FsyncPolicy::Never,
                segment_bytes: 1 << 20,
                max_bytes: 64 << 20,
                ..LogOptions::default()
            },
        )
        .unwrap();
        let options = test_options(dir.path().join("quarantine").join(SINK));
        Harness {
            receiver: Receiver::start(api).await,
            metrics: Arc::new(Metrics::new(Some(log.clone()))),
            log,
            dir,
            options,
            http: HttpOptions {
                compression: Compression::None,
                ..HttpOptions::default()
            },
            ids: Vec::new(),
            stop: CancellationToken::new(),
            task: None,
            verified: 0,
            otlp_encoding: OtlpEncoding::Protobuf,
            index: Template::parse("hf-{signal}-{date}").unwrap(),
        }
    }

    pub fn quarantine_root(&self) -> PathBuf {
        self.dir.path().join("quarantine")
    }

    /// Appends envelopes in one batch; returns their receiver-visible ids.
    pub async fn append_envelopes(&mut self, envs: &[Envelope]) -> Vec<String> {
        let mut b = Batch::new();
        for e in envs {
            b.push(&e.encode_to_vec());
        }
        let r = self.log.append(b).await.unwrap();
        assert_eq!(r.start, self.ids.len() as u64);
        // Events of other sources are not this sink's: no id to look for.
        let ids: Vec<String> = envs
            .iter()
            .map(|e| {
                if e.source == SOURCE {
                    env_id(e)
                } else {
                    String::new()
                }
            })
            .collect();
        self.ids.extend(ids.iter().cloned());
        ids
    }

    /// Appends `n` log events of the sink's source.
    pub async fn append(&mut self, n: u64) -> Vec<String> {
        let base = self.ids.len() as u64;
        let envs: Vec<Envelope> = (0..n)
            .map(|i| log_event(base + i, SOURCE, "dev1"))
            .collect();
        self.append_envelopes(&envs).await
    }

    pub fn kind(&self) -> SinkKind {
        let url = self.receiver.url();
        let common = self.options.clone();
        let http = self.http.clone();
        match self.receiver.api {
            Api::Elasticsearch => SinkKind::Elasticsearch(ElasticsearchOptions {
                common,
                http,
                endpoints: vec![url],
                index: self.index.clone(),
                document: Layout::Lean,
            }),
            Api::Otlp => {
                let u = |p: &str| url.join(p).unwrap();
                SinkKind::OtlpHttp(OtlpHttpSinkOptions {
                    common,
                    http,
                    logs_url: u("/v1/logs"),
                    traces_url: u("/v1/traces"),
                    metrics_url: u("/v1/metrics"),
                    encoding: self.otlp_encoding,
                })
            }
            Api::OpenObserve => SinkKind::OpenObserve(OpenObserveOptions {
                common,
                http,
                endpoint: url,
                org: "default".into(),
                stream: Template::parse("{signal}").unwrap(),
                document: Layout::Lean,
            }),
        }
    }

    /// Starts the sink (again, after `stop`).
    pub fn start(&mut self) {
        assert!(self.task.is_none(), "already running");
        self.stop = CancellationToken::new();
        let fut = self.kind().run(&holdfast::component::ComponentContext::new(
            SINK.into(),
            self.log.clone(),
            self.metrics.clone(),
            self.stop.clone(),
        ));
        self.task = Some(tokio::spawn(fut));
    }

    /// Stops the sink and waits for it, as the daemon's drain does.
    pub async fn stop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
        self.check_cursor();
    }

    pub fn committed(&self) -> u64 {
        self.log
            .stats()
            .consumers
            .iter()
            .find(|c| c.name == SINK)
            .map_or(0, |c| c.committed)
    }

    pub fn quarantined(&self) -> Vec<QRecord> {
        quarantine::scan(&self.quarantine_root(), &Filter::default())
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.into_record())
            .collect()
    }

    pub fn quarantined_ids(&self) -> HashSet<String> {
        self.quarantined().into_iter().map(|r| r.id).collect()
    }

    /// The cursor invariant: every event below the committed position is
    /// stored at the receiver or in the quarantine. Sound at any moment: a
    /// receiver stores before it answers, and the quarantine is written
    /// before the sink may commit past an event.
    pub fn check_cursor(&mut self) {
        let committed = self.committed();
        if committed <= self.verified {
            return;
        }
        let missing: Vec<u64> = {
            let st = self.receiver.state();
            (self.verified..committed)
                .filter(|&s| {
                    let id = &self.ids[s as usize];
                    !id.is_empty() && !st.stored.contains_key(id)
                })
                .collect()
        };
        if !missing.is_empty() {
            let q = self.quarantined_ids();
            for s in &missing {
                assert!(
                    q.contains(&self.ids[*s as usize]),
                    "the cursor ({committed}) passed event {s}, which is neither at the receiver nor in the quarantine"
                );
            }
        }
        self.verified = committed;
    }

    /// Polls `cond` until it holds, checking the cursor invariant at every
    /// poll; fails after `limit`.
    pub async fn wait_for(&mut self, what: &str, limit: Duration, cond: impl Fn(&Harness) -> bool) {
        let start = Instant::now();
        loop {
            self.check_cursor();
            if cond(self) {
                // The cursor may have moved since the check above (`cond`
                // often waits for exactly that): verify it now, while what
                // the check relies on still holds. Checked later, after a
                // replay has moved quarantined events to the inbox, a sound
                // cursor would look wrong.
                self.check_cursor();
                return;
            }
            if let Some(t) = &self.task {
                assert!(
                    !t.is_finished(),
                    "the sink stopped while waiting for {what}"
                );
            }
            if start.elapsed() >= limit {
                let (requests, statuses) = {
                    let st = self.receiver.state();
                    (st.requests, st.statuses.clone())
                };
                panic!(
                    "timed out after {limit:?} waiting for {what}; committed {} of {}; receiver: {requests} requests, statuses {statuses:?}",
                    self.committed(),
                    self.ids.len(),
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits until the cursor has passed every appended event.
    pub async fn wait_caught_up(&mut self) {
        let n = self.ids.len() as u64;
        self.wait_for(
            "the cursor to pass every event",
            Duration::from_secs(20),
            |h| h.committed() == n,
        )
        .await;
    }

    /// Nothing lost: every appended event is stored at the receiver or in
    /// the quarantine.
    pub fn assert_nothing_lost(&self) {
        let q = self.quarantined_ids();
        let st = self.receiver.state();
        for (seq, id) in self.ids.iter().enumerate() {
            if id.is_empty() {
                continue;
            }
            assert!(
                st.stored.contains_key(id) || q.contains(id),
                "event {seq} ({id}) is lost: neither at the receiver nor in the quarantine"
            );
        }
    }

    /// Every id stored more than once, or answered 409, travelled in a
    /// request whose answer was lost.
    pub fn assert_duplicates_explained(&self) {
        let st = self.receiver.state();
        for (id, n) in &st.stored {
            if *n > 1 {
                assert!(
                    st.explained.contains(id),
                    "{id} stored {n} times without a lost answer"
                );
            }
        }
        for id in &st.conflicts {
            assert!(
                st.explained.contains(id),
                "409 for {id} without a lost answer"
            );
        }
    }

    pub fn counter(&self, family: &str) -> u64 {
        let l = SinkLabels { sink: SINK.into() };
        let s = &self.metrics.sinks;
        match family {
            "sent" => s.events_sent.get_or_create(&l).get(),
            "duplicates" => s.duplicates.get_or_create(&l).get(),
            "auth_failures" => s.auth_failures.get_or_create(&l).get(),
            "warnings" => s.receiver_warnings.get_or_create(&l).get(),
            "partially_rejected" => s.partially_rejected.get_or_create(&l).get(),
            other => panic!("unknown counter {other}"),
        }
    }

    pub fn by_reason(&self, family: &str, reason: &str) -> u64 {
        let l = SinkReasonLabels {
            sink: SINK.into(),
            reason: reason.into(),
        };
        let s = &self.metrics.sinks;
        match family {
            "retries" => s.retries.get_or_create(&l).get(),
            "rejected" => s.rejected.get_or_create(&l).get(),
            "quarantined" => s.quarantined.get_or_create(&l).get(),
            other => panic!("unknown counter {other}"),
        }
    }
}
