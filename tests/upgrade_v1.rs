//! Upgrade with a backlog (issue 12, part 4): a data directory written by
//! the log format of version 1, holding events no sink has finished, must
//! open under a newer holdfast and deliver every one of them exactly as
//! version 1 did, then go on with new events — also across a kill -9 during
//! the first new appends.
//!
//! The data directory is `tests/fixtures/log-v1/`, written once by the real
//! binary of the last version-1 code with [`write_v1_fixture`] (ignored; run
//! it with `HOLDFAST_WRITE_V1_FIXTURE=1 cargo test --test upgrade_v1 --
//! --ignored`), together with what that code printed and sent for it:
//! `expected-dump.jsonl` (`holdfast dump`) and `expected-<sink>.ndjson` (each
//! `_bulk` action and document, as sent). Its `README.md` says how it was
//! made. The tests copy it and never write into it.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/receivers.rs"]
mod receivers;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use daemon::{holdfast, wait_for, Agent};
use holdfast::sources::file::checkpoint;
use receivers::{Api, Receiver};

/// The sink that had delivered the first part of the backlog.
const SEARCH: &str = "search";
/// The sink whose receiver was down all along: nothing of it is finished.
const BACKUP: &str = "backup";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/log-v1")
}

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Where the agent's inputs and receivers are, for one run.
struct Ends {
    /// The tailed file.
    app_log: PathBuf,
    otlp: SocketAddr,
    search: SocketAddr,
    backup: SocketAddr,
}

/// The config after `data_dir`, `[api]` and `[daemon]` (which the harness
/// writes): the one the fixture was written with, `sink_extra` added to
/// both sinks. Small segments, so a few hundred events span several; the
/// `backup` sink reads only the OTLP source, so its cursor also passes
/// events it does not send.
fn config(e: &Ends, sink_extra: &str) -> String {
    format!(
        "[log]\nsegment_size = \"64KiB\"\nmax_bytes = \"8MiB\"\ncursor_sync_interval = \"100ms\"\n\n\
         [sources.app]\ntype = \"file\"\ninclude = [\"{app}\"]\nstart_at = \"beginning\"\n\
         scan_interval = \"200ms\"\nmax_line_bytes = \"1KiB\"\n\n\
         [sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\n\n\
         [sinks.{SEARCH}]\ntype = \"elasticsearch\"\ninputs = [\"app\", \"otlp\"]\n\
         endpoint = \"http://{search}\"\nbatch_timeout = \"50ms\"\nbackoff_max = \"1s\"\n{sink_extra}\n\n\
         [sinks.{BACKUP}]\ntype = \"elasticsearch\"\ninputs = [\"otlp\"]\n\
         endpoint = \"http://{backup}\"\nindex = \"backup-{{source}}-{{signal}}\"\n\
         batch_timeout = \"50ms\"\nbackoff_max = \"1s\"\n{sink_extra}\n",
        app = e.app_log.display(),
        otlp = e.otlp,
        search = e.search,
        backup = e.backup,
    )
}

fn free_addr() -> SocketAddr {
    format!("127.0.0.1:{}", daemon::free_port())
        .parse()
        .unwrap()
}

/// POSTs `body` to the OTLP listener; the status, or None if the
/// connection failed or closed without an answer (the agent was killed).
fn post(addr: SocketAddr, path: &str, content_type: &str, body: &[u8]) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .ok()?;
    s.write_all(body).ok()?;
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace().nth(1)?.parse().ok()
}

/// Posts a captured request of `tests/fixtures/otlp/` and asserts the 200.
fn post_capture(otlp: SocketAddr, name: &str) {
    let path = match name {
        n if n.contains("log") || n.contains("events") => "/v1/logs",
        n if n.contains("trace") => "/v1/traces",
        _ => "/v1/metrics",
    };
    let content_type = if name.ends_with(".json") {
        "application/json"
    } else {
        "application/x-protobuf"
    };
    let body = std::fs::read(repo_file("tests/fixtures/otlp").join(name)).unwrap();
    assert_eq!(
        post(otlp, path, content_type, &body),
        Some(200),
        "posting {name}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The fixture's file source checkpoint names the tailed file by path,
/// device, inode and birth time, which a copy cannot keep: point it at the
/// copy, as if the file had stayed where it was across the upgrade. Its key
/// (and so the ids of its lines) is the checkpoint's own.
fn relocate_checkpoint(data_dir: &Path, app_log: &Path) {
    let path = data_dir.join("checkpoints/app").join(checkpoint::FILE);
    let mut ck = checkpoint::decode(&std::fs::read(&path).unwrap(), "app").unwrap();
    let m = std::fs::metadata(app_log).unwrap();
    let btime = m
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64);
    assert_eq!(ck.records.len(), 1, "one tailed file: {ck:?}");
    for r in &mut ck.records {
        assert_eq!(r.detached_unix_ms, None, "{r:?}");
        r.path = app_log.display().to_string();
        r.dev = m.dev();
        r.ino = m.ino();
        r.btime = btime;
    }
    std::fs::write(&path, checkpoint::encode(&ck)).unwrap();
}

fn inspect_json(data_dir: &Path) -> serde_json::Value {
    let out = holdfast(&[
        "inspect",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn committed(v: &serde_json::Value, consumer: &str) -> u64 {
    v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == consumer)
        .and_then(|c| c["committed"].as_u64())
        .unwrap_or_else(|| panic!("no consumer {consumer}: {v}"))
}

fn dump(data_dir: &Path, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["dump", "--data-dir", data_dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = holdfast(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn source_events(a: &Agent, source: &str) -> u64 {
    a.metric(&format!(
        "holdfast_source_events_total{{source=\"{source}\"}}"
    ))
    .unwrap_or(0.0) as u64
}

// ---------------------------------------------------------------- the fixture

/// Loghub samples the tailed file is made of (CRLF ends, but Proxifier's LF).
const LOGHUB: [&str; 16] = [
    "Android",
    "Apache",
    "BGL",
    "HDFS",
    "HPC",
    "Hadoop",
    "HealthApp",
    "Linux",
    "Mac",
    "OpenSSH",
    "OpenStack",
    "Proxifier",
    "Spark",
    "Thunderbird",
    "Windows",
    "Zookeeper",
];
/// Lines of the tailed file before the `search` sink's receiver goes down,
/// and in all (events: one each, but the empty line).
const PHASE1_LINES: usize = 240;
const ALL_LINES: usize = 330;
/// Special lines, by their number.
const LONG_LINE: usize = 57;
const NOT_UTF8_LINE: usize = 123;
const EMPTY_LINE: usize = 181;

/// The lines of the tailed file, each with its line end, as found in Loghub
/// but for the special lines above.
fn fixture_lines() -> Vec<Vec<u8>> {
    let samples: Vec<Vec<Vec<u8>>> = LOGHUB
        .iter()
        .map(|n| {
            let bytes =
                std::fs::read(repo_file(&format!("tests/fixtures/loghub/{n}_2k.log"))).unwrap();
            bytes
                .split_inclusive(|&b| b == b'\n')
                .filter(|l| l.ends_with(b"\n"))
                .map(<[u8]>::to_vec)
                .collect()
        })
        .collect();
    (0..ALL_LINES)
        .map(|i| {
            let from = &samples[i % LOGHUB.len()];
            let line = from[(i / LOGHUB.len()) * 37 % from.len()].clone();
            match i {
                // Longer than `max_line_bytes` (1 KiB): one event, cut.
                LONG_LINE => {
                    let mut long = Vec::new();
                    for k in 0..24 {
                        let l = &samples[k % LOGHUB.len()][k];
                        long.extend_from_slice(l.trim_ascii_end());
                        long.extend_from_slice(b" | ");
                    }
                    long.extend_from_slice(b"\r\n");
                    long
                }
                // Latin-1 and a stray byte: replaced by U+FFFD, marked.
                NOT_UTF8_LINE => {
                    let mut l = line.trim_ascii_end().to_vec();
                    l.extend_from_slice(b" user=J\xf6rg \xff\xfe end\r\n");
                    l
                }
                EMPTY_LINE => b"\r\n".to_vec(),
                _ => line,
            }
        })
        .collect()
}

fn append(path: &Path, lines: &[Vec<u8>]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for l in lines {
        f.write_all(l).unwrap();
    }
    f.sync_all().unwrap();
}

/// Writes `tests/fixtures/log-v1/` with the real binary of this code. Run
/// only on the commit whose log format the fixture is for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the committed fixture; HOLDFAST_WRITE_V1_FIXTURE=1 cargo test --test upgrade_v1 -- --ignored"]
async fn write_v1_fixture() {
    if std::env::var("HOLDFAST_WRITE_V1_FIXTURE").as_deref() != Ok("1") {
        eprintln!("HOLDFAST_WRITE_V1_FIXTURE=1 is not set: not writing the fixture");
        return;
    }
    let lines = fixture_lines();
    let search = Receiver::start(Api::Elasticsearch).await;
    let backup = Receiver::start(Api::Elasticsearch).await;
    // The backup sink's receiver is down from the start.
    backup.refuse();
    let mut a = Agent::new("");
    std::fs::create_dir_all(a.path("input")).unwrap();
    let ends = Ends {
        app_log: a.path("input/app.log"),
        otlp: free_addr(),
        search: search.addr,
        backup: backup.addr,
    };
    let text = std::fs::read_to_string(&a.config).unwrap() + &config(&ends, "");
    std::fs::write(&a.config, text).unwrap();
    let file_events = |n: usize| lines[..n].iter().filter(|l| l.trim_ascii() != b"").count() as u64;

    // Phase 1: the search sink delivers all of it.
    a.start();
    a.wait_ready();
    post_capture(ends.otlp, "logs.pb");
    append(&ends.app_log, &lines[..PHASE1_LINES / 2]);
    post_capture(ends.otlp, "traces.json");
    append(&ends.app_log, &lines[PHASE1_LINES / 2..PHASE1_LINES]);
    post_capture(ends.otlp, "metrics.pb");
    wait_for("phase 1 lines appended", Duration::from_secs(30), || {
        (source_events(&a, "app") == file_events(PHASE1_LINES)).then_some(())
    });
    let phase1 = source_events(&a, "app") + source_events(&a, "otlp");
    let data = a.data_dir();
    wait_for(
        "phase 1 delivered and committed",
        Duration::from_secs(30),
        || {
            (search.state().stored.len() as u64 == phase1
                && committed(&inspect_json(&data), SEARCH) == phase1)
                .then_some(())
        },
    );
    search.refuse();

    // Phase 2: nobody delivers.
    post_capture(ends.otlp, "traces.pb");
    append(&ends.app_log, &lines[PHASE1_LINES..]);
    for name in [
        "logs.json",
        "metrics.json",
        "examples/logs.json",
        "examples/events.json",
        "examples/trace.json",
        "examples/metrics.json",
    ] {
        post_capture(ends.otlp, name);
    }
    wait_for("all lines appended", Duration::from_secs(30), || {
        (source_events(&a, "app") == file_events(ALL_LINES)).then_some(())
    });
    let total = source_events(&a, "app") + source_events(&a, "otlp");
    assert!(a.stop().success(), "{}", a.stderr());

    let v = inspect_json(&data);
    println!("{}", serde_json::to_string_pretty(&v).unwrap());
    assert_eq!(v["next_seq"], total, "{v}");
    assert!(v["segments"].as_u64().unwrap() >= 3, "{v}");
    assert_eq!(committed(&v, SEARCH), phase1, "{v}");
    assert!(
        !data
            .join("checkpoints/app")
            .join("checkpoint.recent")
            .exists(),
        "a clean stop leaves the durable checkpoint only"
    );

    let out = fixture_dir();
    let _ = std::fs::remove_dir_all(&out);
    copy_dir(&data, &out.join("data"));
    copy_dir(&a.path("input"), &out.join("input"));
    let generic = config(
        &Ends {
            app_log: "@INPUT@/app.log".into(),
            otlp: "127.0.0.1:4318".parse().unwrap(),
            search: "127.0.0.1:9200".parse().unwrap(),
            backup: "127.0.0.1:9201".parse().unwrap(),
        },
        "",
    );
    std::fs::write(out.join("holdfast.toml"), generic).unwrap();
    std::fs::write(
        out.join("expected-dump.jsonl"),
        dump(&out.join("data"), &[]),
    )
    .unwrap();

    // What this code sends for the backlog: a copy delivered to receivers
    // that are up, one request at a time, so documents arrive in log order.
    let search = Receiver::start(Api::Elasticsearch).await;
    let backup = Receiver::start(Api::Elasticsearch).await;
    let mut b = upgraded_agent(&search, &backup, "concurrency = 1\n");
    b.start();
    b.wait_ready();
    let expected_search = total - phase1;
    let expected_backup = source_events_in_dump(&out.join("expected-dump.jsonl"), "otlp");
    wait_for("the backlog delivered", Duration::from_secs(30), || {
        (search.state().stored.len() as u64 == expected_search
            && backup.state().stored.len() as u64 == expected_backup)
            .then_some(())
    });
    assert!(b.stop().success(), "{}", b.stderr());
    assert_eq!(
        inspect_json(&b.data_dir())["next_seq"],
        total,
        "the relocated checkpoint makes the source continue, not read again"
    );
    for (name, r) in [(SEARCH, &search), (BACKUP, &backup)] {
        let st = r.state();
        assert!(st.arrivals.values().all(|&n| n == 1), "{name}: a repeat");
        let mut text = String::new();
        for id in st.batches.iter().flatten() {
            text += &st.raw[id][0];
            text.push('\n');
        }
        std::fs::write(out.join(format!("expected-{name}.ndjson")), text).unwrap();
    }
}

/// Events of `source` in a dump.
fn source_events_in_dump(path: &Path, source: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["source"].as_str() == Some(source)
        })
        .count() as u64
}

/// An agent on a copy of the fixture, its sinks sending to `search` and
/// `backup`, its file source continuing in a copy of the tailed file.
fn upgraded_agent(search: &Receiver, backup: &Receiver, sink_extra: &str) -> Agent {
    let a = Agent::new("");
    let ends = Ends {
        app_log: a.path("input/app.log"),
        otlp: free_addr(),
        search: search.addr,
        backup: backup.addr,
    };
    let text = std::fs::read_to_string(&a.config).unwrap() + &config(&ends, sink_extra);
    std::fs::write(&a.config, text).unwrap();
    copy_dir(&fixture_dir().join("data"), &a.data_dir());
    copy_dir(&fixture_dir().join("input"), &a.path("input"));
    relocate_checkpoint(&a.data_dir(), &ends.app_log);
    a
}
