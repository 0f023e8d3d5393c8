//! The `json` step's cost against nesting (issue 26): one 800 KB line,
//! flat or nested, parsed and encoded as the file source stores it.
//!
//! ```text
//! cargo bench --bench json_step
//! ```
//!
//! Every row holds the same members (short keys, 60-byte strings and
//! integers), about 800 KB of JSON in all. `flat` has them all at the top;
//! `nested N` spreads them evenly over N levels, each level one object
//! member (`"n"`) deeper than the last. Each row is timed over repeated
//! runs of the step and `record::encode` (the bytes the file source
//! appends), and reported as seconds per line and against `flat`. Target:
//! nested at most 3× flat. `nested 45` is past the step's `max_depth` (32,
//! the most a protobuf decoder reads back), so it measures how cheaply such
//! a line is refused: kept whole and marked unparsed.

use std::time::{Duration, Instant};

use holdfast::event::EventId;
use holdfast::process::parse::{json, Format, Parser};
use holdfast::process::{record, Chain, Event, Kind, Labels, Step, ATTR_UNPARSED};

const LINE_BYTES: usize = 800_000;
const TARGET_RATIO: f64 = 3.0;

/// About `LINE_BYTES` of JSON: the members spread over `depth` levels.
fn line(depth: usize) -> String {
    let member = |i: usize| {
        if i.is_multiple_of(2) {
            format!(r#""k{i}":"{}""#, "x".repeat(60))
        } else {
            format!(r#""k{i}":{i}"#)
        }
    };
    let per_member = member(0).len() / 2 + member(1).len() / 2 + 1;
    let members = LINE_BYTES / per_member;
    let per_level = members.div_ceil(depth);
    let mut out = String::with_capacity(LINE_BYTES + 8 * depth);
    for level in 0..depth {
        out.push('{');
        let first = level * per_level;
        let last = members.min(first + per_level);
        let body: Vec<String> = (first..last).map(member).collect();
        out.push_str(&body.join(","));
        if level + 1 < depth {
            out.push_str(r#","n":"#);
        }
    }
    out.push_str(&"}".repeat(depth));
    out
}

fn chain() -> Chain {
    Chain {
        labels: Labels::default(),
        steps: vec![Step {
            name: "json".into(),
            kind: Kind::Parse(Parser {
                format: Format::Json {
                    max_depth: json::MAX_DEPTH,
                },
                field: None,
                body_key: None,
            }),
        }],
    }
}

/// Seconds per line (the best of a few rounds, so a neighbour's build
/// shows less) and whether the line was parsed.
fn time(chain: &Chain, line: &str) -> (f64, bool) {
    let mut best = f64::INFINITY;
    let mut parsed = false;
    let mut counts = vec![0; chain.steps.len()];
    let mut out = Vec::with_capacity(2 * line.len());
    for _ in 0..5 {
        let start = Instant::now();
        let mut runs = 0u32;
        while runs < 3 || start.elapsed() < Duration::from_millis(500) {
            let mut ev = Event::new(line, EventId([0; 16]));
            chain.run(&mut ev, &mut counts);
            out.clear();
            record::encode(&ev, &mut out);
            parsed = ev.attr(ATTR_UNPARSED).is_none();
            runs += 1;
        }
        best = best.min(start.elapsed().as_secs_f64() / f64::from(runs));
    }
    (best, parsed)
}

fn main() {
    let chain = chain();
    let flat = line(1);
    let (base, _) = time(&chain, &flat);
    println!(
        "{:<12} {:>9} {:>12} {:>9}  outcome",
        "shape", "bytes", "s/line", "× flat"
    );
    println!(
        "{:<12} {:>9} {:>12.6} {:>9.2}  parsed",
        "flat",
        flat.len(),
        base,
        1.0
    );
    for depth in [8, 32, 45] {
        let l = line(depth);
        let (t, parsed) = time(&chain, &l);
        let ratio = t / base;
        let verdict = if !parsed {
            "unparsed (past max_depth)"
        } else if ratio <= TARGET_RATIO {
            "parsed, met (≤ 3× flat)"
        } else {
            "parsed, MISSED (≤ 3× flat)"
        };
        println!(
            "{:<12} {:>9} {:>12.6} {:>9.2}  {verdict}",
            format!("nested {depth}"),
            l.len(),
            t,
            ratio
        );
    }
}
