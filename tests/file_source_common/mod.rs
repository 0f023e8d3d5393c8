//! A small harness for the `file` source's tests: a temporary directory
//! with the files to tail, a real log and the checkpoint directory; the
//! source run in-process and stopped through its token; waiting for a
//! condition on the log with a deadline; and the log read back as envelopes.
//!
//! Included with `mod file_source_common;`; not every test uses every helper.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast::event::{Envelope, Record};
use holdfast::metrics::Metrics;
use holdfast::seglog::{FsyncPolicy, Log, LogOptions, WhenFull};
use holdfast::sources::file::{self, FileSourceOptions};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const SOURCE: &str = "app";

/// The Loghub samples shipped with the tests.
pub fn loghub_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loghub")
}

/// Every Loghub sample: (file name, bytes).
pub fn loghub() -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(loghub_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The lines the source should produce from `bytes`: split at `\n`, a
/// trailing `\r` dropped, empty lines skipped.
pub fn expected_lines(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect()
}

pub struct Harness {
    pub tmp: tempfile::TempDir,
    /// Where the tailed files live.
    pub files: PathBuf,
    pub log_dir: PathBuf,
    pub checkpoints: PathBuf,
    pub log: Log,
    pub metrics: Arc<Metrics>,
}

/// A running source.
pub struct Running {
    pub stop: CancellationToken,
    pub task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Stops the source and waits for it to return.
    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the source did not stop within 20 s")
            .expect("the source task panicked")
            .expect("the source returned an error");
    }
}

pub fn log_options() -> LogOptions {
    LogOptions {
        segment_bytes: 8 << 20,
        max_bytes: 1 << 30,
        fsync: FsyncPolicy::Always,
        when_full: WhenFull::Block,
        ..LogOptions::default()
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_log_options(log_options())
    }

    pub fn with_log_options(opts: LogOptions) -> Harness {
        // `HOLDFAST_TEST_LOG=debug cargo test ...` shows the source's logs.
        if let Ok(level) = std::env::var("HOLDFAST_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(format!("holdfast={level}"))
                .with_test_writer()
                .try_init();
        }
        let tmp = tempfile::tempdir().unwrap();
        let files = tmp.path().join("files");
        std::fs::create_dir_all(&files).unwrap();
        let log_dir = tmp.path().join("log");
        let log = Log::open(&log_dir, opts).unwrap();
        Harness {
            files,
            checkpoints: tmp.path().join("checkpoints").join(SOURCE),
            log_dir,
            metrics: Arc::new(Metrics::new(Some(log.clone()))),
            log,
            tmp,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.files.join(name)
    }

    /// Options following `pattern` in the files directory, with timings
    /// short enough for tests.
    pub fn options(&self, pattern: &str) -> FileSourceOptions {
        FileSourceOptions {
            start_at: file::StartAt::Beginning,
            scan_interval: Duration::from_millis(100),
            rotate_wait: Duration::from_secs(1),
            idle_close: Duration::from_secs(60),
            line_idle_timeout: Duration::from_millis(500),
            ..FileSourceOptions::new(
                vec![self.files.join(pattern).to_string_lossy().into_owned()],
                self.checkpoints.clone(),
            )
        }
    }

    pub fn start(&self, opts: FileSourceOptions) -> Running {
        let stop = CancellationToken::new();
        let task = tokio::spawn(file::run(
            SOURCE.to_string(),
            opts,
            self.log.clone(),
            self.metrics.clone(),
            stop.clone(),
        ));
        Running { stop, task }
    }

    /// Every event in the log, decoded.
    pub fn envelopes(&self) -> Vec<Envelope> {
        let mut r = self.log.reader(0);
        let mut out = Vec::new();
        loop {
            let events = r.read(100_000, 64 << 20).unwrap();
            if events.is_empty() {
                return out;
            }
            out.extend(events.iter().map(envelope));
        }
    }

    /// Every line body in the log, in log order.
    pub fn bodies(&self) -> Vec<String> {
        self.envelopes().iter().map(body).collect()
    }

    /// Waits until the log holds at least `n` events, with a deadline.
    pub async fn wait_events(&self, n: u64, within: Duration) {
        let deadline = Instant::now() + within;
        while self.log.next_seq() < n {
            assert!(
                Instant::now() < deadline,
                "the log holds {} events after {within:?}, expected {n}",
                self.log.next_seq()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until `cond` holds for the bodies in the log.
    pub async fn wait_bodies(
        &self,
        within: Duration,
        what: &str,
        cond: impl Fn(&[String]) -> bool,
    ) {
        let deadline = Instant::now() + within;
        loop {
            let b = self.bodies();
            if cond(&b) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not reached within {within:?}; the log holds {} lines",
                b.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until a metric reads at least `n`.
    pub async fn wait_metric(&self, name: &str, n: f64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let v = self.metric(name);
            if v >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} is {v} after {within:?}, expected {n}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The value of a metric of this source (0 if absent).
    pub fn metric(&self, name: &str) -> f64 {
        metric(&self.metrics, name)
    }
}

/// A metric's value with the `source="app"` label (0 if absent).
pub fn metric(m: &Metrics, name: &str) -> f64 {
    let text = m.encode().unwrap();
    let prefix = format!("{name}{{source=\"{SOURCE}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// An event from the log as its whole envelope, whichever format it was
/// stored in (format 2: its own fields and its batch's context).
pub fn envelope(e: &holdfast::seglog::Event) -> Envelope {
    thread_local! {
        // One per thread, so that a batch's context is decoded once, not
        // once per event (10,000 files make a context of megabytes).
        static DECODER: std::cell::RefCell<holdfast::event::Decoder> =
            std::cell::RefCell::new(holdfast::event::Decoder::new());
    }
    DECODER.with(|d| {
        d.borrow_mut()
            .decode(&e.data, &e.context, e.seq - e.batch_start)
            .unwrap_or_else(|err| panic!("event {} is not an event: {err}", e.seq))
            .to_envelope()
    })
}

pub fn body(e: &Envelope) -> String {
    match &e.record {
        Some(Record::Log(r)) => match r.body.as_ref().and_then(|b| b.value.as_ref()) {
            Some(Value::StringValue(s)) => s.clone(),
            other => panic!("body is not a string: {other:?}"),
        },
        other => panic!("not a log record: {other:?}"),
    }
}

/// A log record attribute.
pub fn attr(e: &Envelope, key: &str) -> Option<Value> {
    match &e.record {
        Some(Record::Log(r)) => r
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.clone()),
        _ => None,
    }
}

/// How often each body occurs.
pub fn counts(bodies: &[String]) -> HashMap<&str, usize> {
    let mut m = HashMap::new();
    for b in bodies {
        *m.entry(b.as_str()).or_default() += 1;
    }
    m
}

/// Asserts that `got` holds exactly the lines of `want`, each as often as
/// in `want` (Loghub samples repeat some lines): nothing lost, nothing twice.
pub fn assert_each_once(got: &[String], want: &[String]) {
    let (g, w) = (counts(got), counts(want));
    let extra: Vec<_> = g
        .iter()
        .filter(|(l, n)| **n > w.get(*l).copied().unwrap_or(0))
        .take(5)
        .collect();
    assert!(
        extra.is_empty(),
        "lines appear more often than written: {extra:?}"
    );
    let missing: Vec<_> = w
        .iter()
        .filter(|(l, n)| g.get(*l).copied().unwrap_or(0) < **n)
        .collect();
    assert!(
        missing.is_empty(),
        "{} lines missing, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert_eq!(got.len(), want.len());
}

/// Appends to a file (creating it).
pub fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// `n` numbered lines `<tag> <number>` starting at `from`, newline-terminated.
pub fn numbered(tag: &str, from: usize, n: usize) -> (Vec<u8>, Vec<String>) {
    let lines: Vec<String> = (from..from + n)
        .map(|i| format!("{tag} {i:06} some text to make the line longer"))
        .collect();
    let mut bytes = Vec::new();
    for l in &lines {
        bytes.extend_from_slice(l.as_bytes());
        bytes.push(b'\n');
    }
    (bytes, lines)
}
