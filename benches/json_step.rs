//! The `json` step's cost against nesting (issue 26): one 800 KB line,
//! flat or nested, parsed and encoded as the file source stores it.
//!
//! ```text
//! cargo bench --bench json_step
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench json_step --profile dev  # one run per row, debug build
//! ```
//!
//! Every row holds the same 45 arrays of six-digit integers, about 800 KB
//! of JSON in all. `flat` has them all at the top; `nested N` spreads them
//! evenly over N levels, each level one object member (`"n"`) deeper than
//! the last. Each row is timed over repeated
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
const ARRAYS: usize = 45;
const TARGET_RATIO: f64 = 3.0;

/// About `LINE_BYTES` of JSON: `ARRAYS` arrays of small integers (many
/// small values, as a metrics or sensor dump has), spread over `depth`
/// levels, each level one object member (`"n"`) deeper than the last.
fn line(depth: usize) -> String {
    let per_array = LINE_BYTES / ARRAYS / 7;
    let array: Vec<String> = (0..per_array).map(|i| (100_000 + i).to_string()).collect();
    let array = format!("[{}]", array.join(","));
    let per_level = ARRAYS.div_ceil(depth);
    let mut out = String::with_capacity(LINE_BYTES + 8 * depth);
    for level in 0..depth {
        out.push('{');
        let first = level * per_level;
        let last = ARRAYS.min(first + per_level);
        let members: Vec<String> = (first..last)
            .map(|j| format!(r#""d{j}":{array}"#))
            .collect();
        out.push_str(&members.join(","));
        if level + 1 < depth {
            if last > first {
                out.push(',');
            }
            out.push_str(r#""n":"#);
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
    let quick = std::env::var_os("HOLDFAST_BENCH_QUICK").is_some();
    let (rounds, min_runs) = if quick { (1, 1) } else { (5, 3) };
    for _ in 0..rounds {
        let start = Instant::now();
        let mut runs = 0u32;
        while runs < min_runs || (!quick && start.elapsed() < Duration::from_millis(500)) {
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
