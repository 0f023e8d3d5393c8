//! Phase 7: an outage of the receiver at the start of a run.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::contender::{contenders, run_until, wait_all_lines, Finish, Outcome};
use crate::input::Corpus;
use crate::measure::load_average;
use crate::receiver::Receiver;
use crate::table::{thousands, Table};

/// The receiver answers 500 for this long from the spawn in the outage phase.
const OUTAGE: Duration = Duration::from_secs(10);

/// "Delivery resumes within about a second" after an outage.
const TARGET_RESUME_S: f64 = 1.5;

pub(crate) fn outage_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) {
    table.head(&format!(
        "outage: the receiver answers 500 for the first {} s of a {}-line run (file -> _bulk)",
        OUTAGE.as_secs(),
        thousands(c.lines as f64)
    ));
    table.note(format!("  load average before: {}", load_average()));
    for mut who in contenders(table, root, "outage", input, c, receiver, gzip) {
        eprintln!("phase outage: {} ...", who.name());
        receiver.reset_counting(false, c.lines);
        receiver.stats.refuse_status.store(500, Ordering::SeqCst);
        let t0 = who.start();
        run_until(who.as_mut(), t0 + OUTAGE);
        let refused = receiver.stats.refused.load(Ordering::Relaxed);
        receiver.stats.accepting.store(true, Ordering::SeqCst);
        let back = Instant::now();
        let Finish { last, longest_gap } = wait_all_lines(who.as_mut(), receiver, c.lines, back);
        who.stop();
        let o = Outcome::of(who.as_ref(), receiver, c.lines, 0);
        let name = who.name();
        let resumed = receiver
            .first_accept()
            .map(|t| t.saturating_duration_since(back));
        table.row(
            &format!("{name}: receiver back to the first accepted delivery"),
            resumed.map_or("never".into(), |d| format!("{:.2} s", d.as_secs_f64())),
            format!("<= {TARGET_RESUME_S} s"),
            Some(resumed.is_some_and(|d| d.as_secs_f64() <= TARGET_RESUME_S)),
        );
        table.row(
            &format!("{name}: wall time, spawn to the last line"),
            format!(
                "{:.1} s  ({:.1} s after the receiver came back; {refused} requests refused)",
                (last - t0).as_secs_f64(),
                last.saturating_duration_since(back).as_secs_f64()
            ),
            String::new(),
            None,
        );
        // Resuming means every request slot delivering again, not one.
        table.row(
            &format!("{name}: longest pause in new lines after the return"),
            format!("{:.2} s", longest_gap.as_secs_f64()),
            format!("<= {TARGET_RESUME_S} s"),
            Some(longest_gap.as_secs_f64() <= TARGET_RESUME_S),
        );
        table.row(
            &format!("{name}: lines lost / delivered twice"),
            format!(
                "{} / {}",
                thousands(o.lost() as f64),
                thousands(o.repeats() as f64)
            ),
            "0 / -".into(),
            Some(o.lost() == 0),
        );
    }
}
