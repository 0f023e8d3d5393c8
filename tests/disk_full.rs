//! A real full disk under the real daemon. The data directory is a 16 MiB
//! tmpfs (we run as root); `holdfast run` tails files and takes OTLP/HTTP,
//! and its Elasticsearch sink's receiver is down (503 to everything), so the
//! log only grows. Then another writer fills the file system:
//!
//! * OTLP posts get 503 with `Retry-After`, never a 200 for data that is not
//!   on disk;
//! * the file source pauses instead of failing: it does not get its lines in,
//!   is not restarted, and a file that appears meanwhile does not kill it;
//! * `/healthz` keeps answering.
//!
//! The filler is deleted: without a restart the paused lines and new posts
//! get in. The receiver comes up: every line and every record answered 200
//! arrives.
//!
//! If the machine refuses the mount, the test says so and stops (under CI,
//! where `.ci/run` runs as root, it fails: `tests/common/require.rs`); the
//! log's own handling of ENOSPC is then covered by `tests/seglog_enospc.rs`
//! and `tests/seglog_powercut.rs` (the daemon has no I/O hook).

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/receivers.rs"]
mod receivers;
#[path = "common/require.rs"]
mod require;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use daemon::{http_get, wait_for, Agent};
use receivers::{Api, Fault, Receiver};

/// A tmpfs mounted for the test, unmounted (lazily, in case the daemon still
/// holds files in it) when dropped.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs { path: path.into() })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Writes zeros into `path` until the file system refuses.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 << 10];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => panic!("write returned 0 before the disk was full"),
            Ok(n) => written += n as u64,
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
                return written;
            }
        }
    }
}

fn append_lines(path: &Path, tag: &str, from: usize, to: usize) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let mut text = String::new();
    for i in from..to {
        text.push_str(&format!(
            "{tag} {i:06} kernel: EXT4-fs warning (device sda1): ext4_dx_add_entry: directory index full\n"
        ));
    }
    f.write_all(text.as_bytes()).unwrap();
}

/// An OTLP/JSON logs request with `n` records tagged `post{p}-{i}`.
fn otlp_body(p: usize, n: usize) -> String {
    let records: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"timeUnixNano":"1700000000000000000","severityText":"WARN","body":{{"stringValue":"post{p:04}-{i:02} disk almost full on /dev/sda1"}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"resourceLogs":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"edge"}}}}]}},"scopeLogs":[{{"logRecords":[{}]}}]}}]}}"#,
        records.join(",")
    )
}

/// POSTs an OTLP/JSON body; (status, Retry-After).
fn post(addr: SocketAddr, body: &str) -> (u16, Option<String>) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /v1/logs HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let status = resp.split_whitespace().nth(1).unwrap().parse().unwrap();
    let retry_after = resp.lines().take_while(|l| !l.is_empty()).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("retry-after")
            .then(|| v.trim().to_string())
    });
    (status, retry_after)
}

/// The tags ("app 000012 ", "late 000003 ", "post0007-19 ") in a document.
fn markers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (prefix, digits) in [("app ", 6), ("late ", 6), ("post", 7)] {
        for (i, _) in text.match_indices(prefix) {
            let rest = &text[i + prefix.len()..];
            let tag: String = rest.chars().take(digits).collect();
            let ok = tag.len() == digits
                && tag.chars().all(|c| c.is_ascii_digit() || c == '-')
                && rest[digits..].starts_with(' ');
            if ok {
                out.push(format!("{prefix}{tag} "));
            }
        }
    }
    out
}

fn metric(a: &Agent, sample: &str) -> f64 {
    a.metric(sample).unwrap_or(0.0)
}

const RECORDS_PER_POST: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_pushes_back_and_the_agent_recovers_by_itself() {
    let es = Receiver::start(Api::Elasticsearch).await;
    // Down: every request is answered 503 until the faults are cleared.
    es.script(std::iter::repeat_n(Fault::status(503), 100_000));

    let mut a = Agent::new("");
    let mount = match Tmpfs::mount(&a.data_dir(), "16M") {
        Ok(m) => m,
        Err(e) => {
            require::missing(
                "a_full_disk_pushes_back_and_the_agent_recovers_by_itself",
                &format!(
                    "mounting a 16 MiB tmpfs was refused ({e}); ENOSPC is still covered \
                     through the I/O seam by tests/seglog_enospc.rs"
                ),
                "the test needs root (or CAP_SYS_ADMIN) to mount; .ci/run runs the tests as root",
            );
            return;
        }
    };
    println!(
        "running on a real 16 MiB tmpfs at {}",
        a.data_dir().display()
    );
    let logs = a.path("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let otlp: SocketAddr = format!("127.0.0.1:{}", daemon::free_port())
        .parse()
        .unwrap();
    let body = format!(
        "[log]\nsegment_size = \"1MiB\"\nmax_bytes = \"64MiB\"\n\n\
         [sources.app]\ntype = \"file\"\ninclude = [\"{logs}/app.log\"]\nstart_at = \"beginning\"\nscan_interval = \"200ms\"\n\n\
         [sources.late]\ntype = \"file\"\ninclude = [\"{logs}/late*.log\"]\nstart_at = \"beginning\"\nscan_interval = \"200ms\"\n\n\
         [sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\n\n\
         [sinks.search]\ntype = \"elasticsearch\"\ninputs = [\"app\", \"late\", \"otlp\"]\nendpoints = [\"http://{}\"]\n\
         batch_timeout = \"50ms\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"500ms\"\n",
        es.addr,
        logs = logs.display(),
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();

    // Before: everything gets in.
    let app = logs.join("app.log");
    append_lines(&app, "app", 0, 200);
    a.start();
    a.wait_ready();
    let mut acked_posts = Vec::new();
    for p in 0..5 {
        assert_eq!(post(otlp, &otlp_body(p, RECORDS_PER_POST)).0, 200);
        acked_posts.push(p);
    }
    let source_events = "holdfast_source_events_total{source=\"app\"}";
    wait_for("200 lines in the log", Duration::from_secs(30), || {
        (metric(&a, source_events) >= 200.0).then_some(())
    });

    let t = Instant::now();
    // Another writer fills the file system.
    let filler = a.data_dir().join("filler");
    let filled = fill(&filler);
    println!("filler took {filled} bytes");

    // OTLP: 503 with Retry-After once the last free bytes are gone; a 200
    // only for what is on disk (checked at the end, at the receiver).
    let mut p = acked_posts.len();
    let (status, retry_after) =
        wait_for("an OTLP post answered 503", Duration::from_secs(30), || {
            let (status, ra) = post(otlp, &otlp_body(p, RECORDS_PER_POST));
            match status {
                200 => acked_posts.push(p),
                503 => {}
                s => panic!("post {p} answered {s} while the disk is full"),
            }
            p += 1;
            (status == 503).then_some((status, ra))
        });
    assert_eq!(status, 503);
    let retry_after: u32 = retry_after
        .expect("503 without Retry-After")
        .parse()
        .unwrap();
    assert!(retry_after > 0);
    for _ in 0..3 {
        let (status, ra) = post(otlp, &otlp_body(p, RECORDS_PER_POST));
        assert!(status == 503 && ra.is_some(), "{status} while full");
        p += 1;
    }

    // A file source: far more lines than any slack left in a page. Its
    // appends are refused and it pauses.
    append_lines(&app, "app", 200, 2200);
    wait_for("the file source to pause", Duration::from_secs(30), || {
        a.stderr().contains("reading paused").then_some(())
    });
    // Another: a new file whose identity cannot be checkpointed.
    append_lines(&logs.join("late.log"), "late", 0, 100);
    wait_for(
        "the other file source to fail its checkpoint",
        Duration::from_secs(30),
        || {
            a.stderr()
                .contains("cannot write the checkpoint a new file needs")
                .then_some(())
        },
    );
    assert!(metric(&a, "holdfast_log_write_errors_total") > 0.0);
    let in_log = metric(&a, source_events);
    assert!(
        in_log < 2200.0,
        "the file source got {in_log} lines into a full disk"
    );
    assert_eq!(
        metric(&a, "holdfast_source_events_total{source=\"late\"}"),
        0.0
    );
    let (h, _) = http_get(a.api, "/healthz").expect("/healthz answers");
    assert_eq!(h, 200, "/healthz while the disk is full");
    assert!(a.try_exit().is_none(), "the daemon exited: {}", a.stderr());

    println!("{:?}: full, pushing back", t.elapsed());
    // Space returns: no restart, everything flows again.
    std::fs::remove_file(&filler).unwrap();
    let first_after = p;
    wait_for(
        "an OTLP post answered 200 again",
        Duration::from_secs(30),
        || {
            let (status, _) = post(otlp, &otlp_body(p, RECORDS_PER_POST));
            assert!(status == 200 || status == 503, "{status}");
            if status == 200 {
                acked_posts.push(p);
            }
            p += 1;
            (status == 200).then_some(())
        },
    );
    for _ in 0..5 {
        assert_eq!(post(otlp, &otlp_body(p, RECORDS_PER_POST)).0, 200);
        acked_posts.push(p);
        p += 1;
    }
    wait_for(
        "every line in the log after space returned",
        Duration::from_secs(60),
        || {
            (metric(&a, source_events) >= 2200.0
                && metric(&a, "holdfast_source_events_total{source=\"late\"}") >= 100.0)
                .then_some(())
        },
    );
    for source in ["app", "late", "otlp"] {
        let restarts = metric(
            &a,
            &format!("holdfast_task_restarts_total{{source=\"{source}\"}}"),
        );
        assert_eq!(restarts, 0.0, "{source} was restarted:\n{}", a.stderr());
    }
    let stderr = a.stderr();
    assert!(
        stderr.contains("reading paused") && stderr.contains("reading resumes"),
        "{stderr}"
    );

    println!(
        "{:?}: space back, every line and post in the log",
        t.elapsed()
    );
    // The receiver comes up: every acknowledged event arrives.
    es.state().faults.clear();
    let expected: Vec<String> = (0..2200)
        .map(|i| format!("app {i:06} "))
        .chain((0..100).map(|i| format!("late {i:06} ")))
        .chain(
            acked_posts
                .iter()
                .flat_map(|p| (0..RECORDS_PER_POST).map(move |i| format!("post{p:04}-{i:02} "))),
        )
        .collect();
    let mut seen_docs = HashSet::new();
    let mut arrived = HashSet::new();
    wait_for(
        "every acknowledged event at the receiver",
        Duration::from_secs(90),
        || {
            let st = es.state();
            for (id, doc) in &st.docs {
                if seen_docs.insert(id.clone()) {
                    arrived.extend(markers(&doc.to_string()));
                }
            }
            expected.iter().all(|m| arrived.contains(m)).then_some(())
        },
    );
    println!("{:?}: all delivered", t.elapsed());
    // Nothing durable was damaged on the way.
    assert_eq!(a.metric("holdfast_log_corrupt_frames_total"), Some(0.0));
    println!(
        "{} posts answered 200 ({} of them after space returned), {} lines, all delivered",
        acked_posts.len(),
        acked_posts.iter().filter(|&&p| p >= first_after).count(),
        2300
    );
    assert!(a.stop().success(), "{}", a.stderr());
    drop(mount);
}
