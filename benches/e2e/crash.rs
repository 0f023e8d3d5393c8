//! Phase 5: kill -9 once mid-run, then a restart to the end.

use std::path::Path;
use std::time::Instant;

use crate::contender::{contenders, outcome_rows, wait_all_lines, wait_docs, Outcome};
use crate::input::Corpus;
use crate::measure::load_average;
use crate::receiver::Receiver;
use crate::table::{thousands, Table};

/// The crash phase kills each contender once this share of the lines has
/// been delivered.
const KILL_AT: f64 = 0.4;

pub(crate) fn crash_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
    runs: u32,
) {
    table.head(&format!(
        "crash: kill -9 once at {:.0}% delivered, then a restart to the end; {} numbered lines, file -> _bulk; {runs} run(s) each",
        KILL_AT * 100.0,
        thousands(c.lines as f64)
    ));
    table.note(format!("  load average before: {}", load_average()));
    let mut names = Vec::new();
    let mut results: Vec<Vec<Outcome>> = Vec::new();
    for run in 0..runs {
        for (i, mut who) in contenders(table, root, "crash", input, c, receiver, gzip)
            .into_iter()
            .enumerate()
        {
            eprintln!("phase crash, run {}: {} ...", run + 1, who.name());
            receiver.reset_counting(true, c.lines);
            let t0 = who.start();
            wait_docs(who.as_mut(), receiver, (c.lines as f64 * KILL_AT) as u64);
            who.kill9();
            let at_kill = receiver.tally().0;
            who.start();
            let last = wait_all_lines(who.as_mut(), receiver, c.lines, Instant::now()).last;
            who.stop();
            let o = Outcome::of(who.as_ref(), receiver, c.lines, 1);
            eprintln!(
                "  {}: killed at {} documents, {:.1} s to the last line; {} repeats, {} lost",
                who.name(),
                at_kill,
                (last - t0).as_secs_f64(),
                o.repeats(),
                o.lost()
            );
            if results.len() <= i {
                names.push(who.name());
                results.push(Vec::new());
            }
            results[i].push(o);
        }
    }
    for (name, runs) in names.iter().zip(&results) {
        let target = if *name == "holdfast" {
            "in flight: 2 x 1,000 + 1 save group"
        } else {
            ""
        };
        outcome_rows(table, name, runs, target);
    }
}
