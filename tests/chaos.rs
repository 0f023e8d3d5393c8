//! Chaos reconciliation: the whole agent, under kills, flapping receivers
//! and a full log, loses nothing it acknowledged, and every repeat it sends
//! is explained.
//!
//! The real `holdfast` runs with two sources and two sinks:
//!
//! * a `file` source tailing `app.log*` while a writer appends Loghub lines,
//!   each ending in its own number (`#F00001234`), and the real `logrotate`
//!   rotates the file (`create` mode) every few hundred lines;
//! * an `otlp_http` source receiving protobuf log batches from a client that
//!   records which requests were answered 200; each record carries its own
//!   `test.id` (`O000042-007`);
//! * an `elasticsearch` sink and an `otlp_http` sink, each taking both
//!   sources, to test receivers (tests/common/receivers.rs) that record every
//!   delivery of every id and in which run of the agent (epoch) it came;
//! * a `nats` sink (`jetstream`) taking both sources, to a real `nats-server`
//!   (tests/common/nats.rs) whose stream it creates with a 30-minute
//!   duplicate window: the stream must hold every event exactly once, since
//!   every resend carries the same `Nats-Msg-Id`.
//!
//! Phases:
//!
//! 1. **chaos**: holdfast is SIGKILLed and restarted at random moments; in
//!    between, the receivers flap: they go down (connections refused, open
//!    connections dropped), answer 500 or 503 with `Retry-After`, stall past
//!    the sink's `request_timeout`, store a batch and drop the connection
//!    before answering, and fail single items (Elasticsearch per-item 429 and
//!    400 mapping errors by content; OTLP `partial_success`); the NATS server
//!    is killed with -9 and restarted.
//! 2. **catch-up**: the receivers behave until every sink has finished
//!    everything.
//! 3. **fill**: both sinks fail and the log fills to its byte budget while
//!    kills go on: under `block` both receivers are down and the sources push
//!    back (OTLP answers 503, the file source pauses); under `drop_oldest`
//!    the search receiver is down, the collector answers every request
//!    503 and the NATS server is down, and the oldest segments are evicted — with events read ahead,
//!    retrying, and on the wire.
//! 4. **drain**: the receivers come back, the writers stop, and the agent
//!    finishes; then SIGTERM.
//!
//! Reconciliation, per sink, by id: every line written and every record of
//! a request answered 200 is delivered, or in the sink's quarantine, or
//! (under `drop_oldest`) counted as evicted or in doubt. Under `drop_oldest`
//! the accounting is exact per log event: an `archive` file sink records
//! which marker each sequence number holds, and for each sink, with
//! *passed* = every event of the log (its cursor ends at the log's end),
//! passed − (delivered + quarantined + counted lost) lies in [0, in doubt],
//! and is 0 when nothing is in doubt. Every event delivered more
//! than once was delivered with the same id (Elasticsearch `_id`), and the
//! repeat is explained: the agent was killed between the deliveries, or the
//! receiver lost or delayed its answer. The table (sent, delivered,
//! duplicates, quarantined, evicted, lost) is printed; lost must be 0.
//!
//! `HOLDFAST_CHAOS_KILLS=200` (or any number) runs the long form.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/nats.rs"]
mod nats;
#[path = "common/receivers.rs"]
mod receivers;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use daemon::{free_port, holdfast, wait_for, Agent};
use holdfast::event::{Envelope, Record};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use receivers::{Api, Fault, Judge, Receiver};

const SINKS: [&str; 3] = ["search", "collector", "jetstream"];
/// The `jetstream` sink's stream.
const STREAM: &str = "CHAOS";
/// The sinks' `request_timeout`; a stall is longer.
/// Long enough that only a scripted stall passes it, even on a loaded
/// machine: a timeout the receiver did not cause would be an unexplained
/// duplicate.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// A receiver that took this long to answer may have answered too late (the
/// sink's clock started before the receiver saw the request): a repeat of
/// that request is explained.
const LATE: Duration = Duration::from_secs(1);

fn kills() -> usize {
    std::env::var("HOLDFAST_CHAOS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

// ------------------------------------------------------------------ markers

/// The number a marker carries, for the receivers' verdicts by content.
fn marker_number(m: &str) -> u64 {
    if let Some(n) = m.strip_prefix('F') {
        n.parse().unwrap_or(0)
    } else if let Some((r, i)) = m.strip_prefix('O').and_then(|s| s.split_once('-')) {
        r.parse::<u64>().unwrap_or(0) * 1000 + i.parse::<u64>().unwrap_or(0)
    } else {
        0
    }
}

/// The marker in a line of text (`... #F00001234`).
fn text_marker(s: &str) -> Option<String> {
    let i = s.rfind("#F")?;
    Some(s[i + 1..].trim_end().to_string())
}

/// The marker of an event as the log holds it.
fn envelope_marker(env: &Envelope) -> Option<String> {
    let Some(Record::Log(l)) = &env.record else {
        return None;
    };
    for kv in &l.attributes {
        if kv.key == "test.id" {
            if let Some(any_value::Value::StringValue(s)) =
                kv.value.as_ref().and_then(|v| v.value.as_ref())
            {
                return Some(s.clone());
            }
        }
    }
    match l.body.as_ref().and_then(|b| b.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => text_marker(s),
        _ => None,
    }
}

/// The marker of an Elasticsearch document.
fn doc_marker(doc: &serde_json::Value) -> Option<String> {
    if let Some(t) = doc["attributes"]["test.id"].as_str() {
        return Some(t.to_string());
    }
    doc["message"].as_str().and_then(text_marker)
}

/// The marker of an OTLP receiver's id (the record's `test.id`, or a file
/// line's text).
fn otlp_marker(id: &str) -> Option<String> {
    if id.starts_with('O') {
        Some(id.to_string())
    } else {
        text_marker(id)
    }
}

// ------------------------------------------------------------------ inputs

fn loghub_lines() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loghub");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    names.sort();
    let mut lines = Vec::new();
    for p in names {
        let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
        lines.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty() && !l.contains('\0'))
                .map(|l| l.trim_end().to_string()),
        );
    }
    lines
}

/// Shared between the test and its writer threads.
struct Inputs {
    stop: AtomicBool,
    /// Writers wait while this is set (so that sinks can catch up).
    paused: AtomicBool,
    /// Lines a second the file writer aims at.
    rate: AtomicU64,
    /// Lines written (their numbers are 0..lines).
    lines: AtomicU64,
    /// Records of requests answered 200.
    acked: Mutex<Vec<String>>,
    /// Requests by answer (`0` for no answer).
    answers: Mutex<BTreeMap<u16, u64>>,
    rotations: AtomicU64,
}

/// Appends numbered Loghub lines to `app.log` in batches, and runs
/// logrotate every `rotate_every` batches (in this thread, so a batch never
/// meets a half-done rotation).
fn file_writer(inputs: Arc<Inputs>, dir: PathBuf, lines: Arc<Vec<String>>) {
    let conf = dir.join("logrotate.conf");
    let state = dir.join("logrotate.state");
    std::fs::write(
        &conf,
        format!(
            "{}/app.log {{\n  rotate 10000\n  create\n  nocompress\n  missingok\n}}\n",
            dir.display()
        ),
    )
    .unwrap();
    let mut rng = rand::rng();
    let mut batches = 0u64;
    while !inputs.stop.load(Ordering::SeqCst) {
        if inputs.paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let n0 = inputs.lines.load(Ordering::SeqCst);
        let count = rng.random_range(20..120u64);
        let mut text = String::new();
        for n in n0..n0 + count {
            let l = &lines[n as usize % lines.len()];
            text.push_str(&format!("{l} #F{n:08}\n"));
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(dir.join("app.log"))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
        drop(f);
        inputs.lines.store(n0 + count, Ordering::SeqCst);
        batches += 1;
        if batches.is_multiple_of(15) {
            let out = Command::new("logrotate")
                .arg("-s")
                .arg(&state)
                .arg("-f")
                .arg(&conf)
                .output()
                .expect("running logrotate (Debian package `logrotate`)");
            assert!(
                out.status.success(),
                "logrotate: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            inputs.rotations.fetch_add(1, Ordering::SeqCst);
        }
        // Pacing, not synchronization.
        std::thread::sleep(Duration::from_millis(
            count * 1000 / inputs.rate.load(Ordering::SeqCst),
        ));
    }
}

/// One POST, `Connection: close`; the status, or `None` without an answer.
fn post(addr: SocketAddr, body: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(15))).ok()?;
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace().nth(1)?.parse().ok()
}

/// Posts batches of 1–40 log records; records which were answered 200.
fn otlp_client(inputs: Arc<Inputs>, addr: SocketAddr, lines: Arc<Vec<String>>) {
    let mut rng = rand::rng();
    let mut req = 0u64;
    while !inputs.stop.load(Ordering::SeqCst) {
        if inputs.paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        req += 1;
        let k = rng.random_range(1..=40u64);
        let ids: Vec<String> = (0..k).map(|i| format!("O{req:06}-{i:03}")).collect();
        let records = ids
            .iter()
            .enumerate()
            .map(|(i, id)| LogRecord {
                time_unix_nano: 1_700_000_000_000_000_000 + req * 1000 + i as u64,
                severity_text: "INFO".into(),
                severity_number: 9,
                body: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(
                        lines[(req as usize * 7 + i) % lines.len()].clone(),
                    )),
                }),
                attributes: vec![KeyValue {
                    key: "test.id".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(id.clone())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        let body = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue("chaos-client".into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_logs: vec![ScopeLogs {
                    log_records: records,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec();
        let status = post(addr, &body);
        *inputs
            .answers
            .lock()
            .unwrap()
            .entry(status.unwrap_or(0))
            .or_default() += 1;
        if status == Some(200) {
            inputs.acked.lock().unwrap().extend(ids);
        }
        // Pacing: about 10 requests a second, ~200 records.
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ------------------------------------------------------------------ reconciliation

/// What one sink's receiver and quarantine hold, by marker.
#[derive(Default)]
struct Held {
    /// Marker → deliveries (stored, or an Elasticsearch 409).
    deliveries: HashMap<String, usize>,
    /// Markers whose repeats are explained (a restart between deliveries,
    /// or a lost or late answer).
    explained: HashSet<String>,
    /// Markers delivered under more than one id (must be none).
    renamed: Vec<String>,
    /// Marker → epochs of its deliveries.
    epochs: HashMap<String, Vec<u32>>,
    quarantined: HashSet<String>,
}

fn held(sink: &str, r: &Receiver, data: &Path) -> Held {
    let mut h = Held::default();
    let st = r.state();
    // The key a receiver uses for an event → its marker.
    let mut markers: HashMap<&str, String> = HashMap::new();
    match r.api {
        Api::Elasticsearch => {
            let mut ids_of: HashMap<String, HashSet<&str>> = HashMap::new();
            for (id, doc) in &st.docs {
                let m = doc_marker(doc).unwrap_or_else(|| panic!("no marker in {doc}"));
                ids_of.entry(m.clone()).or_default().insert(id);
                markers.insert(id, m);
            }
            h.renamed = ids_of
                .into_iter()
                .filter(|(_, ids)| ids.len() > 1)
                .map(|(m, _)| m)
                .collect();
        }
        _ => {
            for id in st.delivered_epochs.keys() {
                markers.insert(id, otlp_marker(id).unwrap_or_else(|| id.clone()));
            }
        }
    }
    for (id, epochs) in &st.delivered_epochs {
        let Some(m) = markers.get(id.as_str()) else {
            continue;
        };
        *h.deliveries.entry(m.clone()).or_default() += epochs.len();
        h.epochs.entry(m.clone()).or_default().extend(epochs);
        let distinct: HashSet<u32> = epochs.iter().copied().collect();
        if st.explained.contains(id) || distinct.len() == epochs.len() {
            h.explained.insert(m.clone());
        }
    }
    drop(st);
    h.quarantined = quarantined(&data.join("quarantine").join(sink));
    h
}

/// The marker of a `jetstream` message: one OTLP log request, one record.
fn nats_marker(payload: &[u8]) -> Option<String> {
    let req = ExportLogsServiceRequest::decode(payload).ok()?;
    let l = req
        .resource_logs
        .first()?
        .scope_logs
        .first()?
        .log_records
        .first()?;
    let env = Envelope {
        record: Some(Record::Log(l.clone())),
        ..Default::default()
    };
    envelope_marker(&env)
}

/// What the stream holds, read so far: sequence → (Nats-Msg-Id, marker).
#[derive(Default)]
struct StreamSeen {
    last: u64,
    messages: BTreeMap<u64, (String, String)>,
}

fn quarantined(dir: &Path) -> HashSet<String> {
    let mut out = HashSet::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "ndjson") {
            continue;
        }
        for line in std::fs::read_to_string(&p).unwrap_or_default().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v["event"].as_str().unwrap())
                .unwrap();
            let env = Envelope::decode_event(&bytes).unwrap();
            out.insert(envelope_marker(&env).expect("quarantined event has a marker"));
        }
    }
    out
}

/// The marker in an archived line (the `file` sink's JSON of an event).
fn archived_marker(line: &str) -> Option<String> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re =
        RE.get_or_init(|| regex::Regex::new(r#"#(F[0-9]{8})|"(O[0-9]{6}-[0-9]{3})""#).unwrap());
    let c = re.captures(line)?;
    c.get(1).or(c.get(2)).map(|m| m.as_str().to_string())
}

/// What the `archive` file sink wrote: sequence number → marker.
fn archive(data: &Path) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    let dir = data.join("out").join("archive");
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        for line in std::fs::read_to_string(&p).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let seq = v["seq"].as_u64().unwrap();
            let m = archived_marker(line).unwrap_or_else(|| panic!("no marker in {line}"));
            out.insert(seq, m);
        }
    }
    out
}

/// The sequence numbers in a sink's quarantine, by marker.
fn quarantined_seqs(dir: &Path) -> HashMap<String, HashSet<u64>> {
    let mut out: HashMap<String, HashSet<u64>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "ndjson") {
            continue;
        }
        for line in std::fs::read_to_string(&p).unwrap_or_default().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v["event"].as_str().unwrap())
                .unwrap();
            let env = Envelope::decode_event(&bytes).unwrap();
            let m = envelope_marker(&env).expect("quarantined event has a marker");
            if let Some(seq) = v["seq"].as_u64() {
                out.entry(m).or_default().insert(seq);
            }
        }
    }
    out
}

/// Everything the sources acknowledged.
fn sent(inputs: &Inputs) -> HashSet<String> {
    let mut s: HashSet<String> = (0..inputs.lines.load(Ordering::SeqCst))
        .map(|n| format!("F{n:08}"))
        .collect();
    s.extend(inputs.acked.lock().unwrap().iter().cloned());
    s
}

fn missing<'a>(sent: &'a HashSet<String>, h: &Held) -> Vec<&'a String> {
    sent.iter()
        .filter(|m| !h.deliveries.contains_key(*m) && !h.quarantined.contains(*m))
        .collect()
}

/// The sink's eviction counters (persisted with the cursors), from the
/// running agent.
fn evicted(a: &Agent, sink: &str) -> u64 {
    ["size", "age", "corrupt"]
        .iter()
        .map(|r| {
            a.metric(&format!(
                "holdfast_log_evicted_events_total{{sink=\"{sink}\",reason=\"{r}\"}}"
            ))
            .unwrap_or(0.0) as u64
        })
        .sum()
}

fn lag(a: &Agent, sink: &str) -> Option<u64> {
    a.metric(&format!("holdfast_consumer_lag_events{{sink=\"{sink}\"}}"))
        .map(|v| v as u64)
}

// ------------------------------------------------------------------ the run

struct Run {
    agent: Agent,
    es: Receiver,
    otlp: Receiver,
    nats: nats::Nats,
    stream: Mutex<StreamSeen>,
    inputs: Arc<Inputs>,
    otlp_addr: SocketAddr,
    epoch: u32,
    journal: PathBuf,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Each sink's eviction counters and in-doubt count, read from the
    /// stopped agent's log, and the log's end.
    evicted: HashMap<&'static str, u64>,
    in_doubt: HashMap<&'static str, u64>,
    next_seq: u64,
}

struct Row {
    sink: &'static str,
    missing: usize,
    first_missing: Vec<String>,
    evicted: u64,
    lost: usize,
    unexplained: Vec<String>,
    unexplained_epochs: Vec<Vec<u32>>,
    renamed: Vec<String>,
}

impl Run {
    async fn start(when_full: &str) -> Run {
        let es = Receiver::start(Api::Elasticsearch).await;
        // 400 (mapping error: quarantined) for about 1 event in 97; a 429 the
        // first time for about 1 in 31.
        let first_429 = Arc::new(Mutex::new(HashSet::<String>::new()));
        es.state().judge = Some(Judge(Arc::new(move |doc| {
            let m = doc_marker(doc)?;
            let n = marker_number(&m);
            if n % 97 == 13 {
                Some(400)
            } else if n % 31 == 7 && first_429.lock().unwrap().insert(m) {
                Some(429)
            } else {
                None
            }
        })));
        let otlp = Receiver::start(Api::Otlp).await;
        es.state().late_after = Some(LATE);
        otlp.state().late_after = Some(LATE);
        let otlp_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let nats = nats::Nats::single("");
        let agent = Agent::new("");
        let logs = agent.path("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let body = format!(
            r#"
[log]
segment_size = "512KiB"
max_bytes = "8MiB"
fsync = "always"
when_full = "{when_full}"
append_timeout = "300ms"
cursor_sync_interval = "200ms"

[sources.app]
type = "file"
include = ["{logs}/app.log*"]
start_at = "beginning"
scan_interval = "200ms"
rotate_wait = "5s"

[sources.otlp]
type = "otlp_http"
listen = "{otlp_addr}"

[sinks.search]
type = "elasticsearch"
inputs = ["app", "otlp"]
endpoint = "http://{es}"
batch_max_events = 500
batch_timeout = "100ms"
concurrency = 2
request_timeout = "{timeout}ms"
backoff_initial = "50ms"
backoff_max = "400ms"
compression = "none"

[sinks.collector]
type = "otlp_http"
inputs = ["app", "otlp"]
endpoint = "http://{otlp}"
batch_max_events = 500
batch_timeout = "100ms"
concurrency = 2
request_timeout = "{timeout}ms"
backoff_initial = "50ms"
backoff_max = "400ms"

[sinks.jetstream]
type = "nats"
inputs = ["app", "otlp"]
servers = {nats_servers}
stream = "{STREAM}"
batch_max_events = 500
batch_timeout = "100ms"
concurrency = 2
request_timeout = "{timeout}ms"
backoff_initial = "50ms"
backoff_max = "400ms"

[sinks.jetstream.create_stream]
subjects = ["telemetry.>"]
duplicate_window = "30m"
"#,
            logs = logs.display(),
            es = es.addr,
            otlp = otlp.addr,
            nats_servers = nats.toml_servers(),
            timeout = REQUEST_TIMEOUT.as_millis(),
        );
        let mut text = std::fs::read_to_string(&agent.config).unwrap() + &body;
        if when_full == "drop_oldest" || std::env::var_os("HOLDFAST_CHAOS_ARCHIVE").is_some() {
            // Every event the log held, with its sequence number: the
            // ground truth of the drop_oldest accounting (and a diagnosis).
            text += "\n[sinks.archive]\ntype = \"file\"\ninputs = [\"app\", \"otlp\"]\nmax_bytes = \"4GiB\"\n";
        }
        std::fs::write(&agent.config, text).unwrap();
        let journal = agent.path("journal.log");
        let mut run = Run {
            agent,
            es,
            otlp,
            nats,
            stream: Mutex::default(),
            inputs: Arc::new(Inputs {
                stop: AtomicBool::new(false),
                paused: AtomicBool::new(false),
                rate: AtomicU64::new(1000),
                lines: AtomicU64::new(0),
                acked: Mutex::new(Vec::new()),
                answers: Mutex::new(BTreeMap::new()),
                rotations: AtomicU64::new(0),
            }),
            otlp_addr,
            epoch: 0,
            journal,
            threads: Vec::new(),
            evicted: HashMap::new(),
            in_doubt: HashMap::new(),
            next_seq: 0,
        };
        run.launch();
        let lines = Arc::new(loghub_lines());
        let (i, l) = (run.inputs.clone(), lines.clone());
        run.threads
            .push(std::thread::spawn(move || file_writer(i, logs, l)));
        let (i, a) = (run.inputs.clone(), run.otlp_addr);
        run.threads
            .push(std::thread::spawn(move || otlp_client(i, a, lines)));
        run
    }

    /// Starts holdfast (again) and waits until it is ready.
    fn launch(&mut self) {
        self.agent.notifications.clear();
        self.agent.start();
        self.agent.wait_ready();
    }

    /// Keeps what the dead process said, then starts the next one.
    async fn kill_and_restart(&mut self) {
        self.agent.kill9();
        // Connections the dead process made just before the kill may not be
        // accepted yet: they must keep its epoch.
        self.es.settle().await;
        self.otlp.settle().await;
        self.epoch += 1;
        self.es.state().epoch = self.epoch;
        self.otlp.state().epoch = self.epoch;
        let mut j = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.journal)
            .unwrap();
        writeln!(
            j,
            "==== run {} (killed)\n{}",
            self.epoch,
            self.agent.stderr()
        )
        .unwrap();
        self.launch();
    }

    /// One random fault on a receiver.
    async fn flap(&mut self, rng: &mut StdRng) {
        if rng.random_bool(0.15) {
            // The NATS server dies and comes back (same store).
            self.nats.servers[0].kill9();
            std::thread::sleep(Duration::from_millis(rng.random_range(100..800)));
            self.nats.servers[0].start();
            return;
        }
        let r = if rng.random_bool(0.5) {
            &self.es
        } else {
            &self.otlp
        };
        match rng.random_range(0..7) {
            0 => r.script([Fault::status(500), Fault::status(500)]),
            1 => r.script([Fault::Status {
                status: 503,
                retry_after: Some("1".into()),
            }]),
            2 => r.script([Fault::Slow(REQUEST_TIMEOUT + Duration::from_millis(500))]),
            3 => r.script([Fault::LoseAnswer]),
            4 if r.api == Api::Otlp => r
                .state()
                .partial
                .push_back((1, "1 log record rejected: too old".into())),
            _ => {
                r.refuse();
                std::thread::sleep(Duration::from_millis(rng.random_range(100..800)));
                r.accept().await;
            }
        }
    }

    /// Waits until `done` holds for both sinks, reporting the table on
    /// timeout.
    fn wait_reconciled(&self, what: &str, done: impl Fn(&str, &Held, &HashSet<String>) -> bool) {
        // The deadline grows with the volume: the long form sends hundreds
        // of thousands of events to receivers built for checking, not speed.
        let within =
            Duration::from_secs(180) + Duration::from_millis(sent(&self.inputs).len() as u64);
        let end = Instant::now() + within;
        loop {
            // The full reconciliation holds the receivers' state (and so
            // their answers) for a while: run it only once the sinks say
            // they have nothing left, so that it cannot stall a request
            // past the sink's timeout and cause the repeats it checks.
            let idle = SINKS.iter().all(|s| lag(&self.agent, s) == Some(0));
            if idle {
                let sent = sent(&self.inputs);
                let ok = SINKS.iter().all(|s| {
                    let h = self.held(s, &self.agent.data_dir());
                    done(s, &h, &sent)
                });
                if ok {
                    return;
                }
            }
            if Instant::now() > end {
                self.table();
                panic!(
                    "{what}: not reached within {within:?}; journal:\n{}",
                    tail(&std::fs::read_to_string(&self.journal).unwrap_or_default())
                        + &tail(&self.agent.stderr())
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// What `sink`'s receiver (or stream) and quarantine hold.
    fn held(&self, sink: &str, data: &Path) -> Held {
        if sink != "jetstream" {
            return held(sink, self.receiver(sink), data);
        }
        self.read_stream();
        let seen = self.stream.lock().unwrap();
        let mut h = Held::default();
        let mut ids_of: HashMap<&str, HashSet<&str>> = HashMap::new();
        for (id, marker) in seen.messages.values() {
            *h.deliveries.entry(marker.clone()).or_default() += 1;
            ids_of.entry(marker).or_default().insert(id);
        }
        // Every resend carries its event's id, which the server drops
        // within the duplicate window: no repeat in the stream is explained.
        h.renamed = ids_of
            .into_iter()
            .filter(|(_, ids)| ids.len() > 1)
            .map(|(m, _)| m.to_string())
            .collect();
        h.quarantined = quarantined(&data.join("quarantine").join(sink));
        h
    }

    /// Reads the stream's new messages, if the server answers now.
    fn read_stream(&self) {
        let urls = self.nats.urls();
        let after = self.stream.lock().unwrap().last;
        let read = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let connect = async_nats::ConnectOptions::new().connect(urls);
                let client = tokio::time::timeout(Duration::from_secs(5), connect)
                    .await
                    .ok()?
                    .ok()?;
                let mut js = async_nats::jetstream::new(client);
                js.set_timeout(Duration::from_secs(5));
                nats::read_after(&js, STREAM, after).await
            })
        })
        .join()
        .unwrap();
        let Some(messages) = read else { return };
        let mut seen = self.stream.lock().unwrap();
        for (seq, id, payload) in messages {
            let marker = nats_marker(&payload).expect("a jetstream message has a marker");
            seen.last = seen.last.max(seq);
            seen.messages.insert(seq, (id, marker));
        }
    }

    fn receiver(&self, sink: &str) -> &Receiver {
        if sink == "search" {
            &self.es
        } else {
            &self.otlp
        }
    }

    fn stop_inputs(&mut self) {
        self.inputs.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }

    /// Prints the reconciliation table; returns (sink, lost) rows.
    fn table(&self) -> Vec<Row> {
        let sent = sent(&self.inputs);
        let mut rows = Vec::new();
        println!(
            "{:<10} {:>8} {:>10} {:>11} {:>12} {:>8} {:>9} {:>6} {:>12}",
            "sink",
            "sent",
            "delivered",
            "duplicates",
            "quarantined",
            "evicted",
            "in doubt",
            "lost",
            "unexplained"
        );
        for s in SINKS {
            let h = self.held(s, &self.agent.data_dir());
            let delivered = sent
                .iter()
                .filter(|m| h.deliveries.contains_key(*m))
                .count();
            let dups: usize = h.deliveries.values().map(|n| n - 1).sum();
            let unexplained: Vec<&String> = h
                .deliveries
                .iter()
                .filter(|(m, n)| **n > 1 && !h.explained.contains(*m))
                .map(|(m, _)| m)
                .collect();
            let quarantined = sent
                .iter()
                .filter(|m| !h.deliveries.contains_key(*m) && h.quarantined.contains(*m))
                .count();
            let miss = missing(&sent, &h);
            let ev = self.evicted.get(s).copied().unwrap_or(0);
            let doubt = self.in_doubt.get(s).copied().unwrap_or(0);
            // An event in doubt may be missing without being counted lost.
            let lost = miss.len().saturating_sub((ev + doubt) as usize);
            println!(
                "{:<10} {:>8} {:>10} {:>11} {:>12} {:>8} {:>9} {:>6} {:>12}",
                s,
                sent.len(),
                delivered,
                dups,
                quarantined,
                ev,
                doubt,
                lost,
                unexplained.len()
            );
            rows.push(Row {
                sink: s,
                missing: miss.len(),
                first_missing: miss.iter().take(5).map(|m| m.to_string()).collect(),
                evicted: ev,
                lost,
                unexplained: unexplained.iter().map(|m| m.to_string()).collect(),
                unexplained_epochs: unexplained
                    .iter()
                    .map(|m| h.epochs.get(*m).cloned().unwrap_or_default())
                    .collect(),
                renamed: h.renamed.clone(),
            });
        }
        println!(
            "lines {} in {} rotations; OTLP answers {:?}; {} kills; late answers: search {}, collector {}",
            self.inputs.lines.load(Ordering::SeqCst),
            self.inputs.rotations.load(Ordering::SeqCst),
            self.inputs.answers.lock().unwrap(),
            self.epoch,
            self.es.state().late,
            self.otlp.state().late,
        );
        rows
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // Stop the writers before the test directory goes.
        self.inputs.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Run {
    /// SIGTERM, a clean exit, then the eviction counters from the log.
    fn finish(&mut self) {
        let status = self.agent.stop();
        assert!(status.success(), "holdfast stopped with {status}");
        let out = holdfast(&["inspect", "--config", self.agent.config_arg(), "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        self.next_seq = v["next_seq"].as_u64().unwrap();
        for c in v["consumers"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            let Some(sink) = SINKS.iter().chain(&["archive"]).find(|s| **s == name) else {
                continue;
            };
            self.in_doubt
                .insert(sink, c["in_doubt"].as_u64().unwrap_or(0));
            let lost: u64 = c["lost"]
                .as_object()
                .map(|m| m.values().filter_map(|n| n.as_u64()).sum())
                .unwrap_or(0);
            self.evicted.insert(sink, lost);
        }
    }

    /// Kills and restarts holdfast `kills` times at random moments, with
    /// receiver faults in between.
    async fn chaos(&mut self, rng: &mut StdRng, kills: usize) {
        for _ in 0..kills {
            let until = Instant::now() + Duration::from_millis(rng.random_range(300..1500));
            while Instant::now() < until {
                if rng.random_bool(0.5) {
                    self.flap(rng).await;
                }
                std::thread::sleep(Duration::from_millis(rng.random_range(50..300)));
            }
            self.kill_and_restart().await;
        }
    }

    fn answers(&self, status: u16) -> u64 {
        self.inputs
            .answers
            .lock()
            .unwrap()
            .get(&status)
            .copied()
            .unwrap_or(0)
    }

    fn check(&self, rows: &[Row]) {
        if rows.iter().all(|r| !r.unexplained.is_empty()) {
            let a: HashSet<&String> = rows[0].unexplained.iter().collect();
            let both = rows[1].unexplained.iter().filter(|m| a.contains(m)).count();
            println!(
                "unexplained duplicates in both sinks: {both} of {} and {}",
                rows[0].unexplained.len(),
                rows[1].unexplained.len()
            );
            for (r, other) in [(&rows[0], &rows[1]), (&rows[1], &rows[0])] {
                let o: HashSet<&String> = other.unexplained.iter().collect();
                let only: Vec<(&String, &Vec<u32>)> = r
                    .unexplained
                    .iter()
                    .zip(&r.unexplained_epochs)
                    .filter(|(m, _)| !o.contains(m))
                    .take(10)
                    .collect();
                println!("only in {}: {only:?}", r.sink);
            }
        }
        for r in rows {
            assert!(
                r.renamed.is_empty(),
                "{}: events delivered under two ids: {:?}",
                r.sink,
                r.renamed
            );
            let journal =
                std::fs::read_to_string(&self.journal).unwrap_or_default() + &self.agent.stderr();
            let mut retried: BTreeMap<&str, usize> = BTreeMap::new();
            for l in journal.lines().filter(|l| l.contains(r.sink)) {
                for k in [
                    "timed out",
                    "connection closed before",
                    "Connection refused",
                    "item_429",
                    "http_5xx",
                    "connection reset",
                ] {
                    if l.contains(k) {
                        *retried.entry(k).or_default() += 1;
                    }
                }
            }
            if !r.unexplained.is_empty() {
                let keep =
                    std::env::temp_dir().join(format!("holdfast-chaos-{}", std::process::id()));
                std::fs::create_dir_all(&keep).unwrap();
                std::fs::write(keep.join(format!("journal-{}.log", r.sink)), &journal).unwrap();
                let _ = Command::new("cp")
                    .arg("-a")
                    .arg(self.agent.data_dir())
                    .arg(keep.join("data"))
                    .status();
                panic!(
                    "{}: duplicates with no kill or lost answer between them: {:?} (epochs {:?}); retries by cause: {:?}; journal kept in {}",
                    r.sink,
                    &r.unexplained[..5.min(r.unexplained.len())],
                    &r.unexplained_epochs[..5.min(r.unexplained.len())],
                    retried,
                    keep.display()
                );
            }
            assert_eq!(
                r.lost,
                0,
                "{}: acknowledged events lost (first: {:?}); journal:\n{}",
                r.sink,
                r.first_missing,
                tail(&std::fs::read_to_string(&self.journal).unwrap_or_default())
            );
        }
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n") + "\n"
}

fn rng() -> StdRng {
    let seed: u64 = rand::random();
    println!("chaos seed {seed}");
    StdRng::seed_from_u64(seed)
}

/// `when_full = "block"`: kills go on while the log is full; nothing
/// acknowledged may be missing, and nothing is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_block_every_acknowledged_event_arrives() {
    let mut rng = rng();
    let kills = kills();
    let mut run = Run::start("block").await;
    run.chaos(&mut rng, kills - kills / 4).await;

    // Fill: both receivers down until the log is full and OTLP clients are
    // told to come back later.
    run.es.refuse();
    run.otlp.refuse();
    run.inputs.rate.store(5_000, Ordering::SeqCst);
    let before = run.answers(503);
    wait_for(
        "OTLP answered 503 (the log is full)",
        Duration::from_secs(120),
        || (run.answers(503) > before).then_some(()),
    );
    for _ in 0..kills / 4 {
        std::thread::sleep(Duration::from_millis(rng.random_range(200..1000)));
        run.kill_and_restart().await;
    }
    run.es.accept().await;
    run.otlp.accept().await;
    run.stop_inputs();

    run.wait_reconciled(
        "every acknowledged event delivered or quarantined",
        |_, h, sent| missing(sent, h).is_empty(),
    );
    run.finish();
    let rows = run.table();
    for r in &rows {
        assert_eq!(r.evicted, 0, "{}: events evicted under block", r.sink);
        assert_eq!(r.missing, 0);
    }
    run.check(&rows);
}

/// `when_full = "drop_oldest"`: the log evicts while both sinks fail and
/// kills go on; per sink, every event of the log is delivered, quarantined
/// or counted lost, up to the events in doubt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_drop_oldest_every_event_is_delivered_quarantined_or_counted() {
    let mut rng = rng();
    let kills = kills();
    let mut run = Run::start("drop_oldest").await;
    run.chaos(&mut rng, kills - kills / 4).await;

    // Catch up, and wait until the cursors on disk say so. An event a
    // killed process delivered but had not yet confirmed on disk is sent
    // again after the restart, or, if it is evicted first, counted although
    // the receiver has it (docs/guarantees.md): the fill starts from
    // confirmed ground so that the check below is exact.
    run.inputs.paused.store(true, Ordering::SeqCst);
    run.wait_reconciled("caught up after the kills", |s, _, _| {
        lag(&run.agent, s) == Some(0)
    });
    wait_for("the cursors on disk", Duration::from_secs(30), || {
        run.cursors_on_disk_at_the_end().then_some(())
    });
    let evicted_before: HashMap<&str, u64> =
        SINKS.iter().map(|s| (*s, evicted(&run.agent, s))).collect();
    println!("evicted before the fill: {evicted_before:?}");

    // Fill past the budget while both sinks fail and kills go on: the
    // oldest segments go with events read ahead, retrying and on the wire.
    run.es.refuse();
    run.nats.servers[0].kill9();
    run.otlp
        .state()
        .faults
        .extend(std::iter::repeat_n(Fault::status(503), 100_000));
    run.inputs.rate.store(5_000, Ordering::SeqCst);
    run.inputs.paused.store(false, Ordering::SeqCst);
    let end = Instant::now() + Duration::from_secs(120);
    let mut fill_kills = 0;
    loop {
        std::thread::sleep(Duration::from_millis(rng.random_range(100..500)));
        let evicting = SINKS
            .iter()
            .all(|s| evicted(&run.agent, s) > evicted_before[s] + 1000);
        if evicting && fill_kills >= kills / 4 {
            break;
        }
        assert!(
            Instant::now() < end,
            "the fill did not evict for both sinks within 120 s"
        );
        if fill_kills < kills / 4 || rng.random_bool(0.3) {
            run.kill_and_restart().await;
            fill_kills += 1;
        }
    }
    run.otlp.state().faults.clear();
    run.es.accept().await;
    run.nats.servers[0].start();
    run.stop_inputs();

    run.wait_reconciled("drained", |s, _, _| {
        lag(&run.agent, s) == Some(0) && lag(&run.agent, "archive") == Some(0)
    });
    run.finish();
    let rows = run.table();
    for r in &rows {
        assert!(
            run.evicted[r.sink] > evicted_before[r.sink],
            "{}: the fill evicted nothing",
            r.sink
        );
    }
    let exact = evicted_before.values().all(|&n| n == 0);
    run.check_accounting(exact);
    run.check(&rows);
}

impl Run {
    /// Whether every sink's cursor on disk is at the log's end.
    fn cursors_on_disk_at_the_end(&self) -> bool {
        let out = holdfast(&["inspect", "--config", self.agent.config_arg(), "--json"]);
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
            return false;
        };
        let end = v["next_seq"].as_u64();
        v["consumers"].as_array().is_some_and(|cs| {
            cs.iter()
                .filter(|c| SINKS.iter().any(|s| c["name"] == *s))
                .all(|c| c["committed"].as_u64() == end)
        })
    }

    /// Per sink: passed − (delivered + quarantined + lost) in [0, in doubt],
    /// by log event. A marker the log holds more than once (a line appended
    /// again after a kill) makes how many of its copies were delivered a
    /// range; with each marker once, the range is a point and the check
    /// exact. `exact` is false when events were evicted before the fill,
    /// during the kills (only in long runs whose sinks fell behind): an
    /// event delivered but not confirmed on disk at a kill and evicted after
    /// the restart is counted although delivered, so then only the upper
    /// bound holds.
    fn check_accounting(&self, exact: bool) {
        let data = self.agent.data_dir();
        let archive = archive(&data);
        assert_eq!(
            (
                self.evicted.get("archive").copied().unwrap_or(0),
                self.in_doubt.get("archive").copied().unwrap_or(0)
            ),
            (0, 0),
            "the archive sink lost events: it cannot be the ground truth"
        );
        assert_eq!(
            archive.len() as u64,
            self.next_seq,
            "the archive holds every event of the log"
        );
        let mut copies: HashMap<&str, u64> = HashMap::new();
        for m in archive.values() {
            *copies.entry(m).or_default() += 1;
        }
        let repeated = copies.values().filter(|&&c| c > 1).count();
        for sink in SINKS {
            let h = self.held(sink, &data);
            let q = quarantined_seqs(&data.join("quarantine").join(sink));
            let (mut lo, mut hi) = (0u64, 0u64);
            for (m, &c) in &copies {
                let qm = q.get(*m).map_or(0, |s| s.len() as u64);
                let dm = h.deliveries.get(*m).copied().unwrap_or(0) as u64;
                lo += c.min(qm.max(u64::from(dm > 0)));
                hi += c.min(qm + dm);
            }
            let passed = self.next_seq;
            let lost = self.evicted[sink];
            let doubt = self.in_doubt[sink];
            println!(
                "{sink}: passed {passed}, finished {lo}..={hi}, lost {lost}, in doubt {doubt} ({repeated} markers in the log more than once)"
            );
            assert!(
                passed as i64 - (hi + lost) as i64 <= doubt as i64,
                "{sink}: events passed neither finished nor counted beyond the {doubt} in doubt: passed {passed}, finished at most {hi}, lost {lost}"
            );
            if exact {
                assert!(
                    passed >= lo + lost,
                    "{sink}: events counted lost although finished: passed {passed}, finished at least {lo}, lost {lost}"
                );
                if doubt == 0 && lo == hi {
                    assert_eq!(passed, hi + lost, "{sink}: inexact accounting");
                }
            }
        }
    }
}
