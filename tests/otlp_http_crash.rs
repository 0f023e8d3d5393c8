//! SIGKILL during a burst: every request the source answered 200 is in the
//! log after the restart, whole, and no request is ever in the log in part.
//!
//! The source runs in a child process (this test binary again, running only
//! `child_entry`, switched on by `HOLDFAST_OTLP_CRASH_CHILD`) with
//! `fsync = "always"`. The parent fires requests from several concurrent
//! keep-alive connections, each request with its own tag on every record and
//! a random number of records, and notes which were answered 200. After a
//! random number of 200s it SIGKILLs the child mid-burst, reopens the log
//! and checks every tag. Then the next cycle starts a child on the same log.

mod otlp_http_common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast::api::{Health, Phase};
use holdfast::event::Record;
use holdfast::metrics::Metrics;
use holdfast::seglog::{FsyncPolicy, Log, LogOptions, StartAt};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, InstrumentationScope};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use otlp_http_common::*;
use prost::Message;
use rand::Rng;

const CHILD_ENV: &str = "HOLDFAST_OTLP_CRASH_CHILD";
const CYCLES: usize = 5;
const CLIENTS: usize = 8;

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: 1 << 20,
        max_bytes: 1 << 30,
        fsync: FsyncPolicy::Always,
        ..LogOptions::default()
    }
}

/// Runs only in the child process; a no-op as a normal test.
#[test]
fn child_entry() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let log = Log::open(&dir, options()).expect("child: open");
        let health = Arc::new(Health::default());
        health.set(Phase::Ready);
        let addr = free_addr();
        let task = tokio::spawn(holdfast::sources::otlp_http::run(
            SOURCE.into(),
            settings(addr),
            log.clone(),
            Arc::new(Metrics::new(None)),
            health,
            Default::default(),
        ));
        // Say where we listen once we do.
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(!task.is_finished(), "child: the source stopped");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("LISTENING {addr}");
        // Serve until killed.
        let r = task.await;
        panic!("child: the source returned: {r:?}");
    });
}

/// A request whose `n` records all carry `req` = `tag`.
fn request_body(tag: &str, n: usize) -> Vec<u8> {
    let rec = |i: usize| LogRecord {
        time_unix_nano: 1_700_000_000_000_000_000 + i as u64,
        severity_number: 9,
        body: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
            value: Some(Value::StringValue(format!(
                "record {i} of {tag} {}",
                "x".repeat(i % 50)
            ))),
        }),
        attributes: vec![
            kv("req", Value::StringValue(tag.into())),
            kv("i", Value::IntValue(i as i64)),
        ],
        ..Default::default()
    };
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv("service.name", Value::StringValue("crash".into()))],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "burst".into(),
                    ..Default::default()
                }),
                log_records: (0..n).map(rec).collect(),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
    .encode_to_vec()
}

/// Tag → (records found, indexes found).
fn stored(dir: &Path) -> HashMap<String, Vec<i64>> {
    let log = Log::open(dir, options()).unwrap();
    let mut by = HashMap::<String, Vec<i64>>::new();
    for (_, e) in events_from(&log, 0) {
        let Some(Record::Log(r)) = &e.record else {
            panic!("not a log record")
        };
        let tag = string_attr(&r.attributes, "req").expect("tagged");
        let Some(Value::IntValue(i)) = attr(&r.attributes, "i") else {
            panic!("indexed")
        };
        by.entry(tag).or_default().push(*i);
    }
    log.close_blocking().unwrap();
    by
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_answered_200_survives_sigkill_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().to_path_buf();
    {
        // A consumer that never commits: nothing is deleted between cycles.
        let log = Log::open(&path, options()).unwrap();
        log.consumer(AUDIT, StartAt::Oldest).unwrap();
        log.close_blocking().unwrap();
    }
    // Tag → record count, for every request ever sent.
    let mut sent: HashMap<String, usize> = HashMap::new();
    let mut acked_all: HashSet<String> = HashSet::new();
    for cycle in 0..CYCLES {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let addr = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            loop {
                let line = lines.next().expect("child: no LISTENING line").unwrap();
                // libtest may print "test child_entry ... " on the same line.
                if let Some(i) = line.find("LISTENING ") {
                    return line[i + 10..]
                        .trim()
                        .parse::<std::net::SocketAddr>()
                        .unwrap();
                }
            }
        })
        .await
        .unwrap();

        let kill_after = rand::rng().random_range(30..300);
        let acked = Arc::new(Mutex::new(HashSet::<String>::new()));
        let plan = Arc::new(Mutex::new(Vec::<(String, usize)>::new()));
        let mut clients = Vec::new();
        for w in 0..CLIENTS {
            let acked = acked.clone();
            let plan = plan.clone();
            clients.push(tokio::spawn(async move {
                let mut c = Client::connect(addr).await;
                for k in 0.. {
                    let tag = format!("c{cycle}-w{w}-{k}");
                    let n = rand::rng().random_range(1..60);
                    plan.lock().unwrap().push((tag.clone(), n));
                    let req = request(
                        "POST",
                        "/v1/logs",
                        &[("content-type", PROTOBUF)],
                        request_body(&tag, n).into(),
                    );
                    match c.send(req).await {
                        Ok(r) if r.status == 200 => {
                            acked.lock().unwrap().insert(tag);
                        }
                        Ok(r) => panic!("{tag}: status {} ({})", r.status, r.message()),
                        // The child was killed.
                        Err(_) => return,
                    }
                }
            }));
        }
        while acked.lock().unwrap().len() < kill_after {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(0..20))).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        for c in clients {
            c.await.unwrap();
        }
        sent.extend(plan.lock().unwrap().drain(..));
        acked_all.extend(acked.lock().unwrap().drain());

        let p = path.clone();
        let found = tokio::task::spawn_blocking(move || stored(&p))
            .await
            .unwrap();
        for tag in &acked_all {
            assert!(
                found.contains_key(tag),
                "cycle {cycle}: request {tag} was answered 200 but is not in the log"
            );
        }
        for (tag, idx) in &found {
            let mut idx = idx.clone();
            idx.sort_unstable();
            let want: Vec<i64> = (0..sent[tag] as i64).collect();
            assert_eq!(
                idx, want,
                "cycle {cycle}: request {tag} is in the log in part, or twice"
            );
        }
        eprintln!(
            "cycle {cycle}: {} requests sent, {} answered 200, {} in the log",
            sent.len(),
            acked_all.len(),
            found.len()
        );
    }
}
