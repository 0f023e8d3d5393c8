//! Two agents chained over OTLP/gRPC, each killed -9 at random moments
//! while numbered records flow: every record arrives, and the repeats are
//! bounded by what was in flight.
//!
//! * The **edge** (the real `holdfast`) tails `app.log`, to which a writer
//!   appends numbered lines (`line 0000042 …`), and sends them with an
//!   `otlp_grpc` sink (`concurrency` × `batch_max_events` in flight at most).
//! * The **gateway** (another `holdfast`) receives them with an `otlp`
//!   source's gRPC listener and writes them with a `file` sink.
//!
//! A seeded killer (the seed is printed; `HOLDFAST_SEED` replays it) picks
//! one of the two at random moments — a random point of each equal share of
//! the flow, counted in lines at the gateway — kills it with SIGKILL and
//! restarts it on the same data directory and port. At the end every line number is in
//! the gateway's output, and the repeats are explained:
//!
//! * a kill of the edge resends at most what its sink had in flight, plus
//!   the batches committed while the log's writer was storing the cursors
//!   if the kill fell then (`2 × concurrency × batch_max_events`, as
//!   tests/crash_repeats.rs checks for one sink);
//! * a kill of the gateway repeats at most the requests it had appended but
//!   not yet answered (`concurrency × batch_max_events`): the edge resends
//!   them; the gateway's file sink writes each of its log's events once.
//!
//! The default form (30,000 lines, 6 kills) takes well under a minute on 2
//! cores; `HOLDFAST_LONG=1` runs the full form, a million lines and 40 kills.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/file_sink_out.rs"]
mod file_sink_out;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon::{free_ports, wait_for, Agent};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CONCURRENCY: usize = 2;
const BATCH: usize = 500;

fn long() -> bool {
    std::env::var("HOLDFAST_LONG").is_ok_and(|v| v == "1")
}

fn append_to_config(a: &Agent, body: &str) {
    let text = std::fs::read_to_string(&a.config).unwrap() + body;
    std::fs::write(&a.config, text).unwrap();
}

/// The edge: `app.log` → log → `otlp_grpc` sink to `gateway`. Short
/// backoffs, so that a gateway back from a kill is found again at once.
fn edge(gateway: SocketAddr) -> Agent {
    let a = Agent::new("");
    let app = a.path("app.log");
    std::fs::write(&app, b"").unwrap();
    append_to_config(
        &a,
        &format!(
            "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\nscan_interval = \"200ms\"\n\n\
             [sinks.gw]\ntype = \"otlp_grpc\"\ninputs = [\"app\"]\nendpoint = \"http://{gateway}\"\n\
             batch_max_events = {BATCH}\nconcurrency = {CONCURRENCY}\nbatch_timeout = \"50ms\"\n\
             backoff_initial = \"50ms\"\nbackoff_max = \"500ms\"\n",
            app.display()
        ),
    );
    a
}

/// The gateway: an `otlp` source listening for gRPC only → log → `file` sink.
fn gateway(listen: SocketAddr) -> Agent {
    let a = Agent::new("");
    append_to_config(
        &a,
        &format!(
            "[sources.otlp]\ntype = \"otlp\"\n\n[sources.otlp.grpc]\nlisten = \"{listen}\"\n\n\
             [sinks.archive]\ntype = \"file\"\ninputs = [\"otlp\"]\npath = \"{}\"\nbatch_timeout = \"50ms\"\n",
            a.path("out").display()
        ),
    );
    a
}

/// Line number → how many times it is in the gateway's output, kept up to
/// date from the output's new lines.
struct Delivered {
    tail: file_sink_out::Tail,
    seen: BTreeMap<usize, usize>,
}

impl Delivered {
    fn new(out: &Path) -> Delivered {
        Delivered {
            tail: file_sink_out::Tail::new(out),
            seen: BTreeMap::new(),
        }
    }

    /// Reads what arrived since the last call; returns the distinct lines so far.
    fn update(&mut self) -> usize {
        for l in self.tail.new_lines() {
            let body = l["record"]["body"]["stringValue"]
                .as_str()
                .unwrap_or_else(|| panic!("a line without a string body: {l}"));
            let n: usize = body
                .strip_prefix("line ")
                .and_then(|b| b.get(..7))
                .and_then(|d| d.parse().ok())
                .unwrap_or_else(|| panic!("not one of ours: {body:?}"));
            *self.seen.entry(n).or_insert(0) += 1;
        }
        self.seen.len()
    }
}

/// Appends lines `0..n` in chunks, at most `per_s` lines a second, so the
/// records keep flowing while the killer works; sets `done` at the end.
fn writer(
    path: &Path,
    n: usize,
    per_s: usize,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let chunk = 100.min(n);
        let start = Instant::now();
        let mut i = 0;
        while i < n {
            let mut buf = Vec::with_capacity(chunk * 100);
            for j in i..(i + chunk).min(n) {
                writeln!(
                    buf,
                    "line {j:07} sshd[2451]: pam_unix(sshd:auth): authentication failure; rhost=10.0.0.{}",
                    j % 250
                )
                .unwrap();
            }
            f.write_all(&buf).unwrap();
            i = (i + chunk).min(n);
            // Pacing, not waiting on a condition: the writer's rate.
            let due = start + Duration::from_secs_f64(i as f64 / per_s as f64);
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        f.sync_all().unwrap();
        done.store(true, Ordering::SeqCst);
    })
}

#[test]
fn two_agents_chained_over_grpc_lose_nothing_across_kills() {
    let (lines, kills, per_s) = if long() {
        (1_000_000, 40, 20_000)
    } else {
        (30_000, 6, 5_000)
    };
    let seed: u64 = std::env::var("HOLDFAST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("HOLDFAST_SEED={seed} ({lines} lines, {kills} kills)");
    let mut rng = StdRng::seed_from_u64(seed);

    let [port] = free_ports::<1>();
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut gw = gateway(listen);
    let mut ed = edge(listen);
    gw.start();
    gw.wait_ready();
    ed.start();
    ed.wait_ready();

    let written = Arc::new(AtomicBool::new(false));
    let w = writer(&ed.path("app.log"), lines, per_s, written.clone());
    let mut delivered = Delivered::new(&gw.path("out"));
    let (mut edge_kills, mut gateway_kills) = (0, 0);
    for k in 0..kills {
        // A random moment in the k-th share of the flow (up to 90% of the
        // lines), so that the kills span the whole run whatever the speed
        // of the machine or the build.
        let share = lines * 9 / 10 / kills;
        let at = rng.random_range(k * share..(k + 1) * share);
        wait_for(
            &format!("{at} lines at the gateway before kill {k}"),
            Duration::from_secs(120),
            || (delivered.update() >= at).then_some(()),
        );
        let (name, agent) = if rng.random_bool(0.5) {
            edge_kills += 1;
            ("edge", &mut ed)
        } else {
            gateway_kills += 1;
            ("gateway", &mut gw)
        };
        agent.kill9();
        println!(
            "kill {k}: the {name}, with {} lines at the gateway",
            delivered.update()
        );
        agent.start();
        agent.wait_ready();
    }
    w.join().unwrap();
    assert!(written.load(Ordering::SeqCst));

    let deadline = Duration::from_secs(60 + (lines / 2_000) as u64);
    wait_for(
        &format!("all {lines} lines at the gateway"),
        deadline,
        || (delivered.update() >= lines).then_some(()),
    );
    assert!(ed.stop().success(), "edge:\n{}", ed.stderr());
    assert!(gw.stop().success(), "gateway:\n{}", gw.stderr());
    delivered.update();
    let seen = delivered.seen;

    let missing: Vec<usize> = (0..lines).filter(|i| !seen.contains_key(i)).collect();
    assert!(
        missing.is_empty(),
        "{} lines never arrived (first: {:?})",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(seen.len(), lines, "a line number out of range arrived");
    let twice = seen.values().filter(|&&n| n > 1).count();
    let surplus: usize = seen.values().map(|&n| n - 1).sum();
    let in_flight = CONCURRENCY * BATCH;
    let bound = edge_kills * 2 * in_flight + gateway_kills * in_flight;
    println!(
        "{lines} lines; {edge_kills} edge kills, {gateway_kills} gateway kills; \
         {twice} lines arrived more than once ({surplus} repeated arrivals), bound {bound}"
    );
    assert!(
        surplus <= bound,
        "{surplus} repeated arrivals after {edge_kills} edge and {gateway_kills} gateway kills; \
         at most {bound} were in flight (edge: 2 × {in_flight}, gateway: {in_flight} per kill)"
    );
}
