//! `holdfast quarantine list|show|replay|purge`: the arguments as clap
//! parses them and the dispatch to `holdfast::cli::quarantine`. Part of the
//! binary (`main.rs` includes it), not of the library.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use holdfast::cli::quarantine;

use super::{fail, Place};

#[derive(Subcommand, Debug)]
pub(crate) enum QuarantineAction {
    /// One line per quarantined event, then totals.
    List {
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        filter: QuarantineFilter,
        /// One JSON object per event, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// The chosen events in full: the record and the event decoded.
    Show {
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        filter: QuarantineFilter,
    },
    /// Send the chosen events of one sink again, with their original ids,
    /// once the cause is fixed. They go to the sink's replay inbox: a running
    /// sink sends them within seconds, a stopped one at its next start.
    Replay {
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        filter: QuarantineFilter,
    },
    /// Delete the chosen events for good.
    Purge {
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        filter: QuarantineFilter,
        /// Delete every quarantined event (when no filter is given).
        #[arg(long)]
        all: bool,
    },
}

/// Which quarantined events a command applies to; all given filters must match.
#[derive(Args, Debug)]
pub(crate) struct QuarantineFilter {
    /// Only this sink's events (required for replay).
    #[arg(long)]
    sink: Option<String>,
    /// A reason label (rejected, partially_rejected, retries_exhausted,
    /// too_large, invalid_event; prometheus_remote_write: too_old,
    /// out_of_order) or words from the reason.
    #[arg(long)]
    reason: Option<String>,
    /// Quarantined at or after this time: 2024-05-01T12:00:00Z, or a
    /// duration ago like 2h.
    #[arg(long)]
    since: Option<String>,
    /// Quarantined before this time (same forms as --since).
    #[arg(long)]
    until: Option<String>,
    /// One event, by id (32 hex digits).
    #[arg(long)]
    id: Option<String>,
}

impl QuarantineFilter {
    fn filter(&self) -> Result<quarantine::Filter, ExitCode> {
        let now = std::time::SystemTime::now();
        let time = |t: &Option<String>, flag: &str| match t {
            None => Ok(None),
            Some(t) => quarantine::parse_time(t, now).map(Some).map_err(|e| {
                eprintln!("error: --{flag}: {e}");
                ExitCode::from(2)
            }),
        };
        Ok(quarantine::Filter {
            sink: self.sink.clone(),
            reason: self.reason.clone(),
            window: quarantine::Window {
                since_ms: time(&self.since, "since")?,
                until_ms: time(&self.until, "until")?,
            },
            id: self.id.clone(),
        })
    }
}

/// `holdfast quarantine ...`: the same code the sinks use to write it.
pub(crate) fn quarantine_command(action: QuarantineAction) -> ExitCode {
    let (place, filter) = match &action {
        QuarantineAction::List { place, filter, .. }
        | QuarantineAction::Show { place, filter }
        | QuarantineAction::Replay { place, filter }
        | QuarantineAction::Purge { place, filter, .. } => (place, filter),
    };
    let root = match place.quarantine_dir() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let f = match filter.filter() {
        Ok(f) => f,
        Err(code) => return code,
    };
    // Usage mistakes exit 2, like the others.
    let usage = match &action {
        QuarantineAction::Replay { .. } if f.sink.is_none() => {
            Some("choose the sink to replay for with --sink")
        }
        QuarantineAction::Purge { all: false, .. } if f.is_empty() => Some(
            "purge needs a filter (--sink, --reason, --since, --until, --id), or --all to \
             delete every quarantined event",
        ),
        _ => None,
    };
    if let Some(message) = usage {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    let result = match action {
        QuarantineAction::List { json, .. } => quarantine::scan(&root, &f).map(|s| {
            if json {
                for e in &s.entries {
                    println!("{}", quarantine::record_json(e, false));
                }
            } else {
                print!("{}", quarantine::render_list(&s));
            }
        }),
        QuarantineAction::Show { .. } => quarantine::scan(&root, &f).map(|s| {
            for e in &s.entries {
                let v = quarantine::record_json(e, true);
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
            if s.entries.is_empty() {
                eprintln!("no quarantined event matches");
            }
        }),
        QuarantineAction::Replay { .. } => quarantine::replay(&root, &f).map(|n| {
            println!(
                "{n} event(s) moved to the replay inbox of sink {}: a running holdfast sends them \
                 within seconds, a stopped one at its next start",
                f.sink.as_deref().unwrap_or("")
            )
        }),
        QuarantineAction::Purge { all, .. } => {
            quarantine::purge(&root, &f, all).map(|n| println!("{n} quarantined event(s) deleted"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
