//! `holdfast dump --follow` beside the running daemon: new events arrive as
//! they are appended, filtered by `--source`, from a sink's cursor with
//! `--sink`, across a segment roll, and SIGINT / SIGTERM end it cleanly.

#[path = "common/daemon.rs"]
mod daemon;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daemon::{wait_for, Agent, BIN};

/// A running `dump --follow` and the lines it printed so far.
struct Tail {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Tail {
    fn start(a: &Agent, extra: &[&str]) -> Tail {
        let mut child = Command::new(BIN)
            .args(["dump", "--follow", "--config", a.config_arg()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting dump --follow");
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                l.lock().unwrap().push(line);
            }
        });
        Tail { child, lines }
    }

    /// How many printed lines hold the JSON string `text`.
    fn count(&self, text: &str) -> usize {
        let quoted = format!("\"{text}\"");
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(&quoted))
            .count()
    }

    /// How many times each JSON string starting with `prefix` was printed.
    fn strings(&self, prefix: &str) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for l in self.lines.lock().unwrap().iter() {
            for t in l.split('"').filter(|t| t.starts_with(prefix)) {
                *m.entry(t.to_string()).or_insert(0) += 1;
            }
        }
        m
    }

    fn wait_for_text(&self, text: &str) {
        wait_for(
            &format!("dump --follow to print {text:?}"),
            Duration::from_secs(30),
            || (self.count(text) > 0).then_some(()),
        );
    }

    /// Sends `sig` and waits for a clean exit.
    fn stop(mut self, sig: &str) {
        let ok = Command::new("kill")
            .args(["-s", sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let status = wait_for("dump --follow to exit", Duration::from_secs(10), || {
            self.child.try_wait().unwrap()
        });
        assert!(status.success(), "dump --follow ended by {sig}: {status}");
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn append(path: &std::path::Path, lines: &[String]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

fn segments(a: &Agent) -> usize {
    std::fs::read_dir(a.data_dir().join("log"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "seg"))
        .count()
}

#[test]
fn follow_prints_new_events_across_a_roll() {
    let mut a = Agent::new("");
    let (app, other) = (a.path("app.log"), a.path("other.log"));
    let dead = format!("127.0.0.1:{}", daemon::free_port());
    let body = format!(
        "[log]\nsegment_size = \"256KiB\"\nmax_bytes = \"64MiB\"\n\n\
         [sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\nscan_interval = \"100ms\"\nmax_line_bytes = \"4KiB\"\n\n\
         [sources.other]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\nscan_interval = \"100ms\"\nmax_line_bytes = \"4KiB\"\n\n\
         [sinks.search]\ntype = \"elasticsearch\"\ninputs = [\"app\"]\nendpoints = [\"http://{dead}\"]\n",
        app.display(),
        other.display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    append(&app, &["before-0".into(), "before-1".into()]);
    a.start();
    a.wait_ready();
    wait_for(
        "the first lines in the log",
        Duration::from_secs(20),
        || (a.metric("holdfast_log_next_sequence")? >= 2.0).then_some(()),
    );

    wait_for("the sink's cursor on disk", Duration::from_secs(20), || {
        let out = daemon::holdfast(&["inspect", "--json", "--config", a.config_arg()]);
        String::from_utf8_lossy(&out.stdout)
            .contains("\"search\"")
            .then_some(())
    });

    // From the end of the log: only what is appended after it started,
    // which a line written until one shows up proves.
    let tail = Tail::start(&a, &["--source", "app"]);
    // From the (dead) sink's cursor: its backlog, then the rest.
    let behind = Tail::start(&a, &["--sink", "search"]);
    behind.wait_for_text("before-1");
    let mut pings = 0;
    wait_for(
        "dump --follow to print a ping",
        Duration::from_secs(30),
        || {
            append(&app, &[format!("ping-{pings}")]);
            pings += 1;
            std::thread::sleep(Duration::from_millis(100));
            (!tail.lines.lock().unwrap().is_empty()).then_some(())
        },
    );
    assert_eq!(tail.count("before-0"), 0, "starts at the end of the log");

    let after: Vec<String> = (0..20).map(|i| format!("after-{i}")).collect();
    append(&app, &after);
    append(&other, &["elsewhere".to_string()]);
    tail.wait_for_text("after-19");
    behind.wait_for_text("elsewhere");

    // Lines that do not compress, to fill the 256 KiB segment and roll.
    let before_roll = segments(&a);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let roll: Vec<String> = (0..12_000)
        .map(|i| {
            let noise: String = (0..40)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    format!("{:02x}", x as u8)
                })
                .collect();
            format!("roll-{i}-{noise}")
        })
        .collect();
    append(&app, &roll);
    append(&app, &["final".to_string()]);
    tail.wait_for_text("final");
    assert!(
        segments(&a) > before_roll,
        "the log rolled to a new segment ({before_roll} before)"
    );
    let (printed_after, printed_roll) = (tail.strings("after-"), tail.strings("roll-"));
    for l in &after {
        assert_eq!(printed_after.get(l), Some(&1), "{l} printed once");
    }
    for l in &roll {
        assert_eq!(printed_roll.get(l), Some(&1), "{l} printed once");
    }
    assert_eq!(tail.count("elsewhere"), 0, "--source filters");
    behind.wait_for_text("final");
    assert_eq!(behind.count("before-0"), 1);

    // A limit ends a follow by itself.
    let mut limited = Tail::start(&a, &["--from", "0", "--limit", "3"]);
    let status = wait_for(
        "dump --follow --limit 3 to exit",
        Duration::from_secs(20),
        || limited.child.try_wait().unwrap(),
    );
    assert!(status.success());
    wait_for("its 3 lines", Duration::from_secs(5), || {
        (limited.lines.lock().unwrap().len() == 3).then_some(())
    });

    tail.stop("INT");
    behind.stop("TERM");
    a.stop();
}
