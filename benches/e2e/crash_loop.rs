//! Phase 6: a crash loop, then a clean run to the end.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::contender::{contenders, run_until, wait_all_lines, Outcome};
use crate::input::Corpus;
use crate::measure::load_average;
use crate::receiver::Receiver;
use crate::table::{thousands, Table};

/// Crash loop: each instance is killed this long after its spawn.
const LOOP_KILLS_MS: [u64; 10] = [250, 330, 410, 490, 570, 650, 730, 810, 890, 970];

/// The bound on appends per input line in the crash loop.
const TARGET_LOOP_APPENDS: f64 = 1.1;

pub(crate) fn crash_loop_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) {
    table.head(&format!(
        "crash loop: {} kill -9s, each {}-{} ms after its spawn, then a clean run to the end; {} numbered lines",
        LOOP_KILLS_MS.len(),
        LOOP_KILLS_MS[0],
        LOOP_KILLS_MS[LOOP_KILLS_MS.len() - 1],
        thousands(c.lines as f64)
    ));
    table.note(format!("  load average before: {}", load_average()));
    for mut who in contenders(table, root, "loop", input, c, receiver, gzip) {
        eprintln!("phase crash loop: {} ...", who.name());
        receiver.reset_counting(true, c.lines);
        let t0 = Instant::now();
        for ms in LOOP_KILLS_MS {
            let spawned = who.start();
            run_until(who.as_mut(), spawned + Duration::from_millis(ms));
            who.kill9();
        }
        let during = receiver.tally();
        who.start();
        let last = wait_all_lines(who.as_mut(), receiver, c.lines, Instant::now()).last;
        who.stop();
        let o = Outcome::of(who.as_ref(), receiver, c.lines, LOOP_KILLS_MS.len() as u32);
        let name = who.name();
        table.row(
            &format!("{name}: events delivered twice (all kills)"),
            format!(
                "{}  ({} per kill; {} documents, {} distinct lines, before the clean run)",
                thousands(o.repeats() as f64),
                thousands(o.repeats() as f64 / o.kills as f64),
                thousands(during.0 as f64),
                thousands(during.1 as f64)
            ),
            String::new(),
            None,
        );
        table.row(
            &format!("{name}: lines lost"),
            thousands(o.lost() as f64),
            "0".into(),
            Some(o.lost() == 0),
        );
        table.row(
            &format!("{name}: documents sent per input line"),
            format!("{:.3}", o.docs as f64 / o.lines as f64),
            String::new(),
            None,
        );
        let target = o
            .appends
            .map(|a| a as f64 / o.lines as f64 <= TARGET_LOOP_APPENDS);
        table.row(
            &format!("{name}: log appends per input line"),
            o.appends_per_line(),
            if o.appends.is_some() {
                format!("<= {TARGET_LOOP_APPENDS}")
            } else {
                String::new()
            },
            target,
        );
        table.row(
            &format!("{name}: wall time, first spawn to the last line"),
            format!("{:.1} s", (last - t0).as_secs_f64()),
            String::new(),
            None,
        );
    }
}
