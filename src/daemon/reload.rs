//! `SIGHUP` (`systemctl reload holdfast`): read the config file again and
//! apply it without a restart.
//!
//! The new file is checked exactly as `holdfast check` checks it. If it is
//! invalid, the daemon keeps running the config it has, logs every problem
//! and counts the failure; nothing is stopped. If it is valid, the sources
//! and sinks it adds, removes or changes are started, stopped or restarted
//! ([`Components::apply`]); the others run on undisturbed. What only a
//! restart can change (`data_dir`, `[log]`, `[api]`, `[daemon]`,
//! `[logging]`) is kept as it is, with a warning naming each table that
//! changed.
//!
//! systemd is told `RELOADING=1` when the reload starts and `READY=1` when it
//! is over, whatever its outcome, so `systemctl reload` returns once the new
//! config is in force (or refused).

use std::fmt::Debug;

use tracing::{error, info, warn};

use super::components::Components;
use super::systemd;
use crate::config::{self, Settings};
use crate::metrics::Metrics;

/// How a reload ended, the `result` label of `holdfast_config_reloads_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The new config is in force (maybe with restart-only parts pending).
    Applied,
    /// The new config was refused; the old one still runs.
    Refused,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Applied => "ok",
            Outcome::Refused => "failed",
        }
    }
}

/// Makes both reload counters exist at 0 from start, so that an alert on
/// the first refused reload can fire.
pub(super) fn declare_metrics(metrics: &Metrics) {
    for o in [Outcome::Applied, Outcome::Refused] {
        metrics.count_reloads(o.label(), 0);
    }
}

/// Reads `current.config_file` again and applies it to `components`;
/// `current` then holds the sources and sinks now running.
pub(super) async fn reload(
    current: &mut Settings,
    components: &mut Components,
    metrics: &Metrics,
) -> Outcome {
    systemd::reloading(&format!("reloading {}", current.config_file.display()));
    info!(config = %current.config_file.display(), "SIGHUP: reloading the config");
    let path = current.config_file.clone();
    let loaded = tokio::task::spawn_blocking(move || config::load(&path)).await;
    let outcome = match loaded {
        Ok(Ok(new)) => {
            apply(current, new, components).await;
            Outcome::Applied
        }
        // One journal entry per problem, each with its timestamp and
        // level: a multi-line message would be split by the journal into
        // lines that belong to nothing.
        Ok(Err(e)) if !e.problems().is_empty() => {
            let problems = e.problems();
            error!(
                "reload refused, still running the previous config: {} problem(s) in {}",
                problems.len(),
                current.config_file.display()
            );
            for d in problems {
                let one_line = d
                    .to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                error!("reload refused: {one_line}");
            }
            Outcome::Refused
        }
        Ok(Err(e)) => {
            error!("reload refused, still running the previous config: {e}");
            Outcome::Refused
        }
        Err(e) => {
            error!(error = %e, "reload refused, still running the previous config: reading it failed");
            Outcome::Refused
        }
    };
    metrics.count_reloads(outcome.label(), 1);
    let status = match outcome {
        Outcome::Applied => format!(
            "running: {} source(s), {} sink(s); config reloaded",
            current.sources.len(),
            current.sinks.len()
        ),
        Outcome::Refused => format!(
            "running: {} source(s), {} sink(s); the last reload was refused (see the journal)",
            current.sources.len(),
            current.sinks.len()
        ),
    };
    systemd::ready(&status);
    outcome
}

async fn apply(current: &mut Settings, new: Settings, components: &mut Components) {
    for w in new.warnings() {
        warn!("{w}");
    }
    for table in restart_only_changes(current, &new) {
        warn!(
            "{table} changed in the config file: it takes effect at the next restart \
             (`systemctl restart holdfast`); the running value stays until then"
        );
    }
    let deadline = tokio::time::Instant::now() + current.daemon.shutdown_timeout;
    let changes = components.apply(&new, deadline).await;
    for name in &changes.sinks.removed {
        warn!(
            sink = %name,
            "sink removed: its cursor stays in the log (and keeps its unsent events from \
             deletion until the log is full), so adding it back resumes where it stopped; \
             `holdfast forget --sink {name}` drops it"
        );
    }
    info!("config reloaded: {changes}");
    current.sources = new.sources;
    current.sinks = new.sinks;
    current.warnings = new.warnings;
    current.origins = new.origins;
}

/// The tables of `new` that differ from `current` and that only a restart
/// applies.
fn restart_only_changes(current: &Settings, new: &Settings) -> Vec<&'static str> {
    fn differs(a: &impl Debug, b: &impl Debug) -> bool {
        format!("{a:?}") != format!("{b:?}")
    }
    [
        ("data_dir", differs(&current.data_dir, &new.data_dir)),
        ("[log]", differs(&current.log, &new.log)),
        ("[api]", differs(&current.api, &new.api)),
        ("[daemon]", differs(&current.daemon, &new.daemon)),
        ("[logging]", differs(&current.logging, &new.logging)),
    ]
    .into_iter()
    .filter_map(|(table, changed)| changed.then_some(table))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Settings {
        config::parse(text, "/etc/holdfast/holdfast.toml").unwrap()
    }

    #[test]
    fn only_restart_only_tables_are_named() {
        let a = parse("[sources.a]\ntype = \"otlp_http\"\n");
        let b = parse(
            "[log]\nmax_bytes = \"2GiB\"\n[api]\nlisten = \"127.0.0.1:9999\"\n\
             [sources.b]\ntype = \"otlp_http\"\n",
        );
        assert_eq!(restart_only_changes(&a, &b), ["[log]", "[api]"]);
        assert!(restart_only_changes(&a, &a).is_empty());
    }
}
