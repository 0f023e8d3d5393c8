//! Phases 5-7 (kill -9 mid-run, a crash loop, an outage) run each agent
//! under test, holdfast and syslog-ng, both delivering numbered lines to
//! the `_bulk` receiver: what they share.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::config::{es_sink, file_source, log_section};
use crate::holdfast_under_test::HoldfastUnderTest;
use crate::input::Corpus;
use crate::receiver::Receiver;
use crate::syslog_ng_under_test::{Buffer, SyslogNgUnderTest};
use crate::table::{thousands, Table};
use crate::PHASE_DEADLINE;

/// A run whose receiver saw no new line for this long is over, with what is
/// missing counted lost (a complete run ends as soon as every line is in).
/// Longer than the sinks' default `backoff_max` (60 s): a request backing
/// off is late, not lost.
const QUIET: Duration = Duration::from_secs(75);

/// One agent under test, started again and again on the same state.
pub(crate) trait Contender {
    fn name(&self) -> &'static str;
    /// Spawns a fresh process on the contender's state (config, data,
    /// positions), and says when.
    fn start(&mut self) -> Instant;
    /// kill -9, and waits for the process to be gone.
    fn kill9(&mut self);
    /// SIGTERM, and waits for the process to exit.
    fn stop(&mut self);
    /// Panics, with its last words, if the process has exited.
    fn check_alive(&mut self);
    /// Events appended to its own durable log over all its runs (after
    /// `stop`), if it has one.
    fn appends(&self) -> Option<u64>;
}

/// Keeps the contender's process checked until `until`: for kills on a
/// schedule, which is what the crash loop measures.
pub(crate) fn run_until(c: &mut dyn Contender, until: Instant) {
    while Instant::now() < until {
        c.check_alive();
        std::thread::sleep(
            until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(1)),
        );
    }
}

/// Waits until the receiver has `docs` documents with a line number.
pub(crate) fn wait_docs(c: &mut dyn Contender, receiver: &Receiver, docs: u64) {
    let end = Instant::now() + PHASE_DEADLINE;
    while receiver.tally().0 < docs {
        c.check_alive();
        assert!(
            Instant::now() < end,
            "timed out waiting for {docs} documents from {}",
            c.name()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How a wait for every line ended.
pub(crate) struct Finish {
    /// When the last new line was seen.
    pub(crate) last: Instant,
    /// The longest time without a new line, from `from` on.
    pub(crate) longest_gap: Duration,
}

/// Waits until every line is in, or no new line came for `QUIET` (after
/// `from`).
pub(crate) fn wait_all_lines(
    c: &mut dyn Contender,
    receiver: &Receiver,
    lines: u64,
    from: Instant,
) -> Finish {
    let end = Instant::now() + PHASE_DEADLINE;
    let (mut seen, mut last_new) = (receiver.tally().1, from);
    let mut longest_gap = Duration::ZERO;
    let mut last_note = Instant::now();
    loop {
        let distinct = receiver.tally().1;
        if distinct > seen {
            let now = Instant::now();
            longest_gap = longest_gap.max(now - last_new);
            (seen, last_new) = (distinct, now);
        }
        if distinct >= lines {
            return Finish {
                last: last_new,
                longest_gap,
            };
        }
        if last_new.elapsed() > QUIET {
            eprintln!(
                "  {}: no new line for {QUIET:?}, {} of {lines} in: the rest counts as lost",
                c.name(),
                distinct
            );
            return Finish {
                last: last_new,
                longest_gap: longest_gap.max(last_new.elapsed()),
            };
        }
        c.check_alive();
        assert!(
            Instant::now() < end,
            "timed out waiting for the lines from {}",
            c.name()
        );
        if last_note.elapsed() > Duration::from_secs(10) {
            eprintln!("  ... {}: {distinct} of {lines} lines in", c.name());
            last_note = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What the receiver counted over one run (all of a contender's instances).
pub(crate) struct Outcome {
    pub(crate) lines: u64,
    pub(crate) docs: u64,
    pub(crate) distinct: u64,
    pub(crate) appends: Option<u64>,
    pub(crate) kills: u32,
}

impl Outcome {
    pub(crate) fn of(c: &dyn Contender, receiver: &Receiver, lines: u64, kills: u32) -> Outcome {
        let (docs, distinct) = receiver.tally();
        Outcome {
            lines,
            docs,
            distinct,
            appends: c.appends(),
            kills,
        }
    }

    pub(crate) fn repeats(&self) -> u64 {
        self.docs - self.distinct
    }

    pub(crate) fn lost(&self) -> u64 {
        self.lines - self.distinct
    }

    pub(crate) fn appends_per_line(&self) -> String {
        self.appends.map_or("n/a (no log of its own)".into(), |a| {
            format!(
                "{:.3}  ({} appends)",
                a as f64 / self.lines as f64,
                thousands(a as f64)
            )
        })
    }
}

/// The contenders of these phases: holdfast (file -> log -> elasticsearch,
/// the bench's usual config) and syslog-ng when it can post `_bulk`.
pub(crate) fn contenders(
    table: &mut Table,
    root: &Path,
    tag: &str,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) -> Vec<Box<dyn Contender>> {
    let body =
        log_section(c.bytes * 4 + (1 << 30)) + &file_source(input) + &es_sink(receiver.addr, gzip);
    let mut out: Vec<Box<dyn Contender>> = vec![Box::new(HoldfastUnderTest::new(
        root.join(format!("{tag}-holdfast")),
        body,
    ))];
    match SyslogNgUnderTest::new(
        root.join(format!("{tag}-syslog-ng")),
        input,
        receiver.addr,
        Buffer::Memory,
    ) {
        Ok(s) => out.push(Box::new(s)),
        Err(why) => table.note(format!("  syslog-ng skipped: {why}")),
    }
    out
}

/// Rows a contender's runs share: repeats, losses, appends.
pub(crate) fn outcome_rows(table: &mut Table, name: &str, runs: &[Outcome], repeat_target: &str) {
    let list = |f: &dyn Fn(&Outcome) -> String| runs.iter().map(f).collect::<Vec<_>>().join(", ");
    let kills: u32 = runs.iter().map(|r| r.kills).sum();
    let repeats: u64 = runs.iter().map(Outcome::repeats).sum();
    table.row(
        &format!("{name}: events delivered twice per kill"),
        format!(
            "{}  (runs: {})",
            thousands(repeats as f64 / kills.max(1) as f64),
            list(&|r| thousands(r.repeats() as f64 / r.kills.max(1) as f64))
        ),
        repeat_target.into(),
        None,
    );
    let lost: u64 = runs.iter().map(Outcome::lost).sum();
    table.row(
        &format!("{name}: lines lost"),
        format!(
            "{}  (runs: {})",
            thousands(lost as f64),
            list(&|r| thousands(r.lost() as f64))
        ),
        "0".into(),
        Some(lost == 0),
    );
    table.row(
        &format!("{name}: documents sent per input line"),
        list(&|r| format!("{:.3}", r.docs as f64 / r.lines as f64)),
        String::new(),
        None,
    );
    table.row(
        &format!("{name}: log appends per input line"),
        list(&|r| r.appends_per_line()),
        String::new(),
        None,
    );
}
