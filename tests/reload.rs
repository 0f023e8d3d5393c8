//! SIGHUP reloads the config through the real binary, under load: two
//! files written all along, tailed by two sources, shipped to test
//! Elasticsearch receivers. One run goes through every kind of reload:
//!
//! 1. a sink is added: it starts from the log's oldest event and gets every
//!    line of its input;
//! 2. a sink's endpoint changes: the sink is restarted against the new
//!    receiver and resumes at its cursor (old and new receiver together
//!    hold every line, none in both beyond what was in flight);
//! 3. a source is removed: what it read is delivered, as a gap-free prefix
//!    of its file, each line once; the other source, changed, is restarted
//!    and goes on from its checkpoint (no line of it lost or read twice);
//! 4. an invalid file: refused with the problem logged, counted, and the
//!    running config goes on delivering;
//! 5. a sink removed: its cursor stays in the log until `holdfast forget`,
//!    which the next reload carries out.
//!
//! systemd sees RELOADING=1 and then READY=1 for each.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/receivers.rs"]
mod receivers;

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use daemon::{holdfast, wait_for, Agent};
use receivers::{Api, Receiver};

const BATCH: usize = 100;
const CONCURRENCY: usize = 2;
/// What one sink may have sent and not had answered when it is stopped.
const IN_FLIGHT: usize = BATCH * CONCURRENCY;

/// Appends numbered lines to one file, 20 every 10 ms, until stopped.
struct Writer {
    written: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    fn start(path: &Path, tag: &'static str) -> Writer {
        let written = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        let (w, s) = (written.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let n = w.load(Ordering::SeqCst);
                let mut burst = String::new();
                for i in n..n + 20 {
                    burst.push_str(&format!("{tag} {i:07} kernel: eth0 link up, 1000 Mbps\n"));
                }
                f.write_all(burst.as_bytes()).unwrap();
                w.store(n + 20, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Writer {
            written,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops writing; returns how many lines the file holds.
    fn finish(&mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.written.load(Ordering::SeqCst)
    }
}

/// Line number → arrivals, for the lines of `tag` a receiver stored.
fn lines(r: &Receiver, tag: &str) -> BTreeMap<usize, u32> {
    let st = r.state();
    let mut out = BTreeMap::new();
    for (id, doc) in &st.docs {
        let message = doc["message"].as_str().unwrap_or_default();
        if let Some(n) = message.strip_prefix(tag).and_then(|m| m.get(1..8)) {
            out.insert(n.parse().unwrap(), st.arrivals[id]);
        }
    }
    out
}

struct Setup {
    base: String,
    a_log: PathBuf,
    b_log: PathBuf,
}

impl Setup {
    fn source(&self, name: &str, path: &Path) -> String {
        Self::source_scanning(name, path, "200ms")
    }

    fn source_scanning(name: &str, path: &Path, scan_interval: &str) -> String {
        format!(
            "[sources.{name}]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\nscan_interval = \"{scan_interval}\"\n\n",
            path.display()
        )
    }

    fn sink(name: &str, inputs: &str, r: &Receiver) -> String {
        format!(
            "[sinks.{name}]\ntype = \"elasticsearch\"\ninputs = [{inputs}]\nendpoints = [\"http://{}\"]\n\
             batch_max_events = {BATCH}\nconcurrency = {CONCURRENCY}\nbatch_timeout = \"50ms\"\n\n",
            r.addr
        )
    }

    fn write(&self, a: &Agent, body: &str) {
        std::fs::write(&a.config, format!("{}\n{body}", self.base)).unwrap();
    }
}

/// The cursors the log has, as `holdfast inspect` shows them.
fn cursors(a: &Agent) -> Vec<String> {
    let v = a.inspect_json();
    (v["consumers"].as_array().unwrap().iter())
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// Sends SIGHUP and waits for the reload to be counted with `result`.
fn reload(a: &mut Agent, result: &str, count: f64) {
    let before = a.notifications.len();
    a.signal("HUP");
    let sample = format!("holdfast_config_reloads_total{{result=\"{result}\"}}");
    wait_for(
        &format!("reload {result} number {count}"),
        Duration::from_secs(60),
        || (a.metric(&sample) >= Some(count)).then_some(()),
    );
    wait_for("RELOADING=1, then READY=1", Duration::from_secs(10), || {
        a.poll_notifications();
        let since: Vec<&str> = a.notifications[before..]
            .iter()
            .flat_map(|n| n.lines())
            .collect();
        let reloading = since.iter().position(|l| *l == "RELOADING=1")?;
        since[reloading..].contains(&"READY=1").then_some(())
    });
    assert!(a.try_exit().is_none(), "holdfast exited: {}", a.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_lose_nothing_and_repeat_at_most_the_in_flight() {
    let (r1, r2, r3) = (
        Receiver::start(Api::Elasticsearch).await,
        Receiver::start(Api::Elasticsearch).await,
        Receiver::start(Api::Elasticsearch).await,
    );
    let mut a = Agent::new("");
    let s = Setup {
        base: std::fs::read_to_string(&a.config).unwrap(),
        a_log: a.path("a.log"),
        b_log: a.path("b.log"),
    };
    let sources = s.source("a", &s.a_log) + &s.source("b", &s.b_log);
    s.write(
        &a,
        &(sources.clone() + &Setup::sink("main", "\"a\", \"b\"", &r1)),
    );
    let mut wa = Writer::start(&s.a_log, "a");
    let mut wb = Writer::start(&s.b_log, "b");
    a.start();
    a.wait_ready();
    wait_for(
        "lines at the first receiver",
        Duration::from_secs(60),
        || (lines(&r1, "b").len() > 500).then_some(()),
    );

    // 1. A sink added.
    let added = Setup::sink("copy", "\"a\"", &r2);
    let main_r1 = Setup::sink("main", "\"a\", \"b\"", &r1);
    s.write(&a, &(sources.clone() + &main_r1 + &added));
    reload(&mut a, "ok", 1.0);
    wait_for("lines at the added sink", Duration::from_secs(60), || {
        (!lines(&r2, "a").is_empty()).then_some(())
    });

    // 2. An endpoint changed.
    let main_r3 = Setup::sink("main", "\"a\", \"b\"", &r3);
    s.write(&a, &(sources.clone() + &main_r3 + &added));
    reload(&mut a, "ok", 2.0);
    wait_for("lines at the new endpoint", Duration::from_secs(60), || {
        (!lines(&r3, "a").is_empty()).then_some(())
    });

    // 3. A source removed (and from the inputs naming it), and the other
    // one changed: restarted, it goes on from its checkpoint.
    let only_a = Setup::source_scanning("a", &s.a_log, "300ms");
    let main_a = Setup::sink("main", "\"a\"", &r3);
    s.write(&a, &(only_a.clone() + &main_a + &added));
    reload(&mut a, "ok", 3.0);
    // b.log grows on, unread.
    std::thread::sleep(Duration::from_millis(300));
    let b_written = wb.finish();

    // 4. An invalid file: refused, and the running config goes on.
    s.write(
        &a,
        &(only_a.clone() + &main_a + &added + "[sinks.copy.bogus]\n"),
    );
    a.signal("HUP");
    wait_for(
        "the refused reload counted",
        Duration::from_secs(60),
        || {
            (a.metric("holdfast_config_reloads_total{result=\"failed\"}") >= Some(1.0))
                .then_some(())
        },
    );
    assert!(
        a.stderr()
            .contains("reload refused, still running the previous config"),
        "{}",
        a.stderr()
    );
    let before = lines(&r3, "a").len();
    wait_for(
        "delivery after the refused reload",
        Duration::from_secs(60),
        || (lines(&r3, "a").len() > before + 200).then_some(()),
    );

    let a_written = wa.finish();
    wait_for(
        "every line of a at both sinks",
        Duration::from_secs(120),
        || {
            let main: HashSet<usize> = (lines(&r1, "a").into_keys())
                .chain(lines(&r3, "a").into_keys())
                .collect();
            (main.len() >= a_written && lines(&r2, "a").len() >= a_written).then_some(())
        },
    );

    // 5. A sink removed: its cursor stays until `holdfast forget`, carried
    // out at the next reload.
    s.write(&a, &(only_a.clone() + &main_a));
    reload(&mut a, "ok", 4.0);
    assert!(
        cursors(&a).contains(&"copy".to_string()),
        "{:?}",
        cursors(&a)
    );
    let out = holdfast(&["forget", "--config", a.config_arg(), "--sink", "copy"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = holdfast(&["forget", "--config", a.config_arg(), "--sink", "nosuch"]);
    assert!(!refused.status.success());
    reload(&mut a, "ok", 5.0);
    wait_for("the cursor forgotten", Duration::from_secs(10), || {
        (!cursors(&a).contains(&"copy".to_string())).then_some(())
    });
    assert!(cursors(&a).contains(&"main".to_string()));
    assert!(a.stop().success(), "{}", a.stderr());

    // Every line of a: at the added sink once each, at the main sink on one
    // of its two endpoints (both only within the in-flight window).
    let (a1, a3, copy) = (lines(&r1, "a"), lines(&r3, "a"), lines(&r2, "a"));
    assert_eq!(copy.len(), a_written, "a line is missing at the added sink");
    // The added sink was never restarted: a line twice there would be one
    // the restarted source read again.
    let again = copy.values().filter(|&&n| n > 1).count();
    assert_eq!(again, 0, "lines of the restarted source delivered twice");
    let both = a1.keys().filter(|n| a3.contains_key(n)).count();
    let main: HashSet<usize> = a1.keys().chain(a3.keys()).copied().collect();
    assert_eq!(main.len(), a_written, "a line is missing at the main sink");
    assert!(both <= IN_FLIGHT, "{both} lines at both endpoints");
    for (r, name) in [(&r1, "first"), (&r2, "added"), (&r3, "new endpoint")] {
        let twice = r.state().arrivals.values().filter(|&&n| n > 1).count();
        assert!(
            twice <= IN_FLIGHT,
            "{twice} ids twice at the {name} receiver"
        );
    }

    // b: what the removed source read is delivered, a prefix of the file,
    // and its later lines are not.
    let b: BTreeMap<usize, u32> = lines(&r1, "b").into_iter().chain(lines(&r3, "b")).collect();
    let read = b.len();
    assert!(
        read > 500 && read < b_written,
        "{read} of {b_written} b lines"
    );
    assert_eq!(
        b.keys().copied().collect::<Vec<_>>(),
        (0..read).collect::<Vec<_>>()
    );
    println!(
        "reloads under load: a {a_written} lines (at both endpoints of the changed sink: {both}), \
         b {read} of {b_written} read before its source was removed"
    );
}
