//! The real OpenTelemetry Python SDK's gRPC exporter
//! (`opentelemetry-exporter-otlp-proto-grpc`) as the client of the real
//! `holdfast` binary: an `otlp` source with only its gRPC listener, a `file`
//! sink behind it.
//!
//! * `tests/python/otlp_send.py grpc` sends logs, spans and metrics
//!   (uncompressed and gzipped, with the bearer token as `authorization`
//!   metadata); every record arrives at the file sink, with its resource,
//!   scope and body.
//! * `tests/python/otlp_grpc_stream.py` streams numbered records of the
//!   three signals, one export each, and says which exports were answered
//!   OK; holdfast is killed -9 at seeded random moments in the middle and
//!   restarted on the same data directory and port; the SDK's retries carry
//!   it over. Every record the SDK was told OK for is in the file sink's
//!   output at the end.
//!
//! The SDK lives in the proto venv made by `tests/python/setup-venvs.sh`
//! (`target/venv-otlp-proto`), or wherever `HOLDFAST_PYTHON_PROTO` points.
//! Without it the tests are skipped with a note, except under CI (`CI`
//! set), where a missing venv is a failure (`tests/common/require.rs`).
//! `HOLDFAST_SEED` replays a run of the kill test (its seed is printed).

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/file_sink_out.rs"]
mod file_sink_out;
#[path = "common/require.rs"]
mod require;

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daemon::{free_port, wait_for, Agent};
use file_sink_out::{lines, string_attr};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

fn python() -> Option<PathBuf> {
    let var = "HOLDFAST_PYTHON_PROTO";
    let path = match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv-otlp-proto/bin/python"),
    };
    if path.exists() {
        return Some(path);
    }
    require::missing(
        "the OpenTelemetry SDK gRPC exporter tests",
        &format!(
            "no Python with the OpenTelemetry SDK at {} (or set {var} to a venv's python)",
            path.display()
        ),
        "run tests/python/setup-venvs.sh (.ci/run does, after installing python3 and python3-venv)",
    );
    None
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
}

/// A command for the SDK with only our OTEL_ variables: the endpoint, a
/// timeout long enough for the exporter's retries to outlast a restart.
fn sdk_command(python: &Path, grpc: SocketAddr, gzip: bool) -> Command {
    let mut cmd = Command::new(python);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{grpc}"))
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "60")
        .stdin(Stdio::null());
    // The pinned gRPC exporter knows only "gzip" (it refuses "none", which
    // the specification allows): no compression is the variable unset.
    if gzip {
        cmd.env("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip");
    }
    cmd
}

/// An agent with an `otlp` source listening for gRPC only (a `grpc` table
/// and no `http` table) on `grpc`, and a `file` sink into `out/`.
fn gateway(grpc: SocketAddr, token: Option<&str>) -> Agent {
    let a = Agent::new("");
    let auth = match token {
        Some(t) => {
            let path = a.path("otlp.token");
            std::fs::write(&path, format!("{t}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            format!("bearer_token_file = \"{}\"\n", path.display())
        }
        None => String::new(),
    };
    let body = format!(
        "[sources.otlp]\ntype = \"otlp\"\n{auth}\n[sources.otlp.grpc]\nlisten = \"{grpc}\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"otlp\"]\npath = \"{}\"\nbatch_timeout = \"50ms\"\n",
        a.path("out").display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    a
}

fn grpc_addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().unwrap()
}

/// The file sink's lines of one `otlp_send.py` run (its `run.tag`), by signal.
fn run_lines(out: &Path, tag: &str) -> HashMap<String, Vec<Value>> {
    let mut by = HashMap::<String, Vec<Value>>::new();
    for l in lines(out) {
        if string_attr(&l["resource"], "run.tag").as_deref() == Some(tag) {
            let signal = l["signal"].as_str().unwrap().to_string();
            by.entry(signal).or_default().push(l);
        }
    }
    by
}

fn names(lines: &[Value], field: &str) -> BTreeSet<String> {
    lines
        .iter()
        .map(|l| l["record"][field].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_python_sdk_with_the_grpc_exporter() {
    let Some(py) = python() else { return };
    let grpc = grpc_addr();
    let mut a = gateway(grpc, Some("sdk-token"));
    a.start();
    a.wait_ready();
    let out = a.path("out");
    for gzip in [false, true] {
        let tag = format!("grpc-{}", if gzip { "gzip" } else { "none" });
        let mut cmd = sdk_command(&py, grpc, gzip);
        // gRPC metadata keys are lower case; the value URL-encoded.
        cmd.env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Bearer%20sdk-token",
        )
        .arg(script("otlp_send.py"))
        .args(["grpc", &tag]);
        let run = cmd.output().expect("running python");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            run.status.success(),
            "{tag}: the SDK failed:\n{stderr}\nholdfast:\n{}",
            a.stderr()
        );
        let sent: Value = serde_json::from_slice(&run.stdout)
            .unwrap_or_else(|e| panic!("{tag}: bad output ({e}): {stderr}"));
        assert_eq!(
            sent["compression"],
            if gzip { "gzip" } else { "none" },
            "{tag}"
        );

        // 3 log records, 2 spans, 6 metric points (requests × 2 routes,
        // queue.depth, latency, payload.size, temperature).
        let by = wait_for(
            &format!("{tag}: every record in the file sink"),
            Duration::from_secs(30),
            || {
                let by = run_lines(&out, &tag);
                let n = |s: &str| by.get(s).map_or(0, Vec::len);
                (n("logs") >= 3 && n("traces") >= 2 && n("metrics") >= 6).then_some(by)
            },
        );
        assert_eq!(by["logs"].len(), 3, "{tag}: log records, each once");
        assert_eq!(by["traces"].len(), 2, "{tag}: spans, each once");
        assert_eq!(by["metrics"].len(), 6, "{tag}: metric points, each once");
        for l in by.values().flatten() {
            assert_eq!(l["source"], "otlp", "{tag}");
            assert_eq!(l["id"].as_str().unwrap().len(), 32, "{tag}: an event id");
            assert_eq!(
                string_attr(&l["resource"], "service.name").as_deref(),
                Some("holdfast-test"),
                "{tag}"
            );
        }
        let bodies: BTreeSet<String> = by["logs"]
            .iter()
            .filter_map(|l| l["record"]["body"]["stringValue"].as_str())
            .map(str::to_string)
            .collect();
        assert!(
            bodies.contains(sent["logs"][0]["body"].as_str().unwrap()),
            "{tag}: {bodies:?}"
        );
        assert_eq!(
            names(&by["traces"], "name"),
            ["GET /items", "SELECT items"]
                .map(String::from)
                .into_iter()
                .collect(),
            "{tag}"
        );
        assert_eq!(
            names(&by["metrics"], "name"),
            [
                "latency",
                "payload.size",
                "queue.depth",
                "requests",
                "temperature"
            ]
            .map(String::from)
            .into_iter()
            .collect(),
            "{tag}"
        );
        for l in &by["logs"] {
            assert_eq!(l["scope"]["name"], "holdfast.test.logger", "{tag}");
        }
    }
    assert!(a.stop().success(), "{}", a.stderr());
}

/// The SDK's process, killed if the test fails before it finished (it would
/// otherwise retry its exports for minutes after the test is gone).
struct Sdk(std::process::Child);

impl Drop for Sdk {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the stream script said so far.
#[derive(Default)]
struct Said {
    ok: Vec<String>,
    failed: Vec<String>,
    done: bool,
}

const ROUNDS: usize = 400;
const KILLS: usize = 2;

#[test]
fn nothing_the_sdk_was_told_ok_for_is_lost_across_kill_9() {
    let Some(py) = python() else { return };
    let seed: u64 = std::env::var("HOLDFAST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("HOLDFAST_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    let grpc = grpc_addr();
    let mut a = gateway(grpc, None);
    a.start();
    a.wait_ready();

    let mut child = Sdk(sdk_command(&py, grpc, true)
        .arg(script("otlp_grpc_stream.py"))
        .args(["crash", &ROUNDS.to_string()])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(a.path("sdk.log")).unwrap())
        .spawn()
        .expect("running python"));
    let said = Arc::new(Mutex::new(Said::default()));
    let reader = {
        let said = said.clone();
        let stdout = child.0.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.expect("reading the SDK's stdout");
                let mut s = said.lock().unwrap();
                match line.split_once(' ') {
                    Some(("OK", id)) => s.ok.push(id.to_string()),
                    Some(("FAIL", id)) => s.failed.push(id.to_string()),
                    Some(("DONE", _)) => s.done = true,
                    _ => panic!("the SDK said {line:?}"),
                }
            }
        })
    };

    // Each kill after a random share of the records was acknowledged.
    let total = 3 * ROUNDS;
    for k in 0..KILLS {
        let at = (k + 1) * total / (KILLS + 2) + rng.random_range(0..total / 8);
        wait_for(
            &format!("{at} records acknowledged before kill {k}"),
            Duration::from_secs(120),
            || (said.lock().unwrap().ok.len() >= at).then_some(()),
        );
        a.kill9();
        println!(
            "kill {k} after {} acknowledged records",
            said.lock().unwrap().ok.len()
        );
        a.start();
        a.wait_ready();
    }
    let status = wait_for("the SDK to finish", Duration::from_secs(180), || {
        child.0.try_wait().unwrap()
    });
    reader.join().unwrap();
    let sdk_log = std::fs::read_to_string(a.path("sdk.log")).unwrap_or_default();
    assert!(status.success(), "the SDK failed:\n{sdk_log}");
    let said = std::mem::take(&mut *said.lock().unwrap());
    assert!(said.done, "the SDK did not finish its rounds:\n{sdk_log}");

    let out = a.path("out");
    let delivered = wait_for(
        "every acknowledged record in the file sink",
        Duration::from_secs(60),
        || {
            let mut count = HashMap::<String, usize>::new();
            for l in lines(&out) {
                if let Some(id) = string_attr(&l["record"], "test.id") {
                    *count.entry(id).or_default() += 1;
                }
            }
            said.ok
                .iter()
                .all(|id| count.contains_key(id))
                .then_some(count)
        },
    );
    assert!(a.stop().success(), "{}", a.stderr());
    let repeats: usize = delivered.values().map(|n| n - 1).sum();
    println!(
        "{total} records sent, {} acknowledged, {} given up by the SDK, {} in the file sink, {repeats} repeats",
        said.ok.len(),
        said.failed.len(),
        delivered.len()
    );
    // The exporter's retries outlast a restart, so it should give up on
    // nothing; were it to, those records are unacknowledged and may be
    // missing, but the test must still have seen most of them acknowledged.
    assert!(
        said.ok.len() >= total * 9 / 10,
        "only {} of {total} records acknowledged:\n{sdk_log}",
        said.ok.len()
    );
}
