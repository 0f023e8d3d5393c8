//! The sources and sinks the daemon runs, each a supervised task with its
//! own stop token, so that one can be stopped, started or restarted while
//! the others go on: at start-up, on a config reload, and at the drain.
//!
//! Stopping a source lets it append what it holds and write its checkpoint;
//! stopping a sink lets it finish its in-flight requests and commit its
//! cursor. So a component restarted with new settings resumes where the old
//! one stopped: nothing is lost, and what is sent twice is at most what was
//! in flight when its answer was cut off by the deadline.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::supervisor;
use crate::api::Health;
use crate::component::ComponentContext;
use crate::config::{Settings, SinkSettings, SourceSettings};
use crate::metrics::Metrics;
use crate::seglog::Log;

/// What a supervised component is, for its task name and its health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Watched: a source that cannot take input is listed in /readyz.
    Source,
    Sink,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Sink => "sink",
        }
    }
}

/// One running component.
struct Running {
    /// Its settings as it was started with them (their `Debug` text, which
    /// shows every option), to tell whether a new config changes it.
    settings: String,
    /// A source's retention hold on the log, released when it is removed.
    hold: Option<String>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// What a config asks of the running components of one role: by name,
/// which to stop for good, restart with new settings, or start.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Diff {
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub added: Vec<String>,
}

impl Diff {
    /// Compares the running components' settings with the wanted ones.
    fn between(running: &BTreeMap<String, Running>, wanted: &BTreeMap<String, String>) -> Diff {
        let mut diff = Diff::default();
        for (name, r) in running {
            match wanted.get(name) {
                None => diff.removed.push(name.clone()),
                Some(s) if *s != r.settings => diff.changed.push(name.clone()),
                Some(_) => {}
            }
        }
        diff.added = (wanted.keys())
            .filter(|name| !running.contains_key(*name))
            .cloned()
            .collect();
        diff
    }

    fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.changed.is_empty() && self.added.is_empty()
    }

    /// Those to stop: removed or changed.
    fn stopping(&self) -> impl Iterator<Item = &String> {
        self.removed.iter().chain(&self.changed)
    }

    /// Those to start: changed or added.
    fn starting(&self) -> impl Iterator<Item = &String> {
        self.changed.iter().chain(&self.added)
    }
}

/// What a reload changed, for the log line that reports it.
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub sources: Diff,
    pub sinks: Diff,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.sinks.is_empty()
    }
}

impl fmt::Display for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("no source or sink changed");
        }
        let mut parts = Vec::new();
        for (role, d) in [("source", &self.sources), ("sink", &self.sinks)] {
            for (what, names) in [
                ("added", &d.added),
                ("restarted with new settings", &d.changed),
                ("removed", &d.removed),
            ] {
                if !names.is_empty() {
                    parts.push(format!("{role}(s) {what}: {}", names.join(", ")));
                }
            }
        }
        f.write_str(&parts.join("; "))
    }
}

/// The running sources and sinks and what they share.
pub(super) struct Components {
    log: Log,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    sources: BTreeMap<String, Running>,
    sinks: BTreeMap<String, Running>,
}

impl Components {
    pub fn new(log: Log, metrics: Arc<Metrics>, health: Arc<Health>) -> Components {
        Components {
            log,
            metrics,
            health,
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
        }
    }

    /// Starts every sink, then every source (so that nothing is appended
    /// before the sinks' cursors are registered).
    pub fn start_all(&mut self, settings: &Settings) {
        for s in settings.sinks.values() {
            self.start_sink(s);
        }
        for s in settings.sources.values() {
            self.start_source(s);
        }
    }

    /// Brings the running components to `settings`: stops the removed and
    /// changed sources (they append what they hold), then the removed and
    /// changed sinks (they finish what is in flight and commit), then starts
    /// the changed and added sinks, then sources. Components the new config
    /// leaves as they were are not touched. Waits for each stop until
    /// `deadline`; a component still busy then is abandoned (its work is
    /// redelivered by its successor).
    pub async fn apply(&mut self, settings: &Settings, deadline: Instant) -> Changes {
        let changes = Changes {
            sources: Diff::between(&self.sources, &fingerprints(&settings.sources)),
            sinks: Diff::between(&self.sinks, &fingerprints(&settings.sinks)),
        };
        let sources: Vec<_> = (changes.sources.stopping())
            .filter_map(|name| self.sources.remove(name).map(|r| (name.clone(), r)))
            .collect();
        let holds: Vec<_> = (sources.iter())
            .filter(|(name, _)| changes.sources.removed.contains(name))
            .filter_map(|(_, r)| r.hold.clone())
            .collect();
        stop_all(Role::Source, sources, deadline).await;
        // A removed source no longer needs the log to keep what its crash
        // recovery would read.
        for name in holds {
            if let Ok(hold) = self.log.hold(&name) {
                hold.remove();
            }
        }
        let sinks: Vec<_> = (changes.sinks.stopping())
            .filter_map(|name| self.sinks.remove(name).map(|r| (name.clone(), r)))
            .collect();
        stop_all(Role::Sink, sinks, deadline).await;
        for name in changes.sinks.starting() {
            self.start_sink(&settings.sinks[name]);
        }
        for name in changes.sources.starting() {
            self.start_source(&settings.sources[name]);
        }
        changes
    }

    /// The drain: every source stopped (they append what they hold), then
    /// every sink (they deliver and commit), each until `deadline`.
    pub async fn stop(&mut self, deadline: Instant) {
        stop_all(Role::Source, std::mem::take(&mut self.sources), deadline).await;
        stop_all(Role::Sink, std::mem::take(&mut self.sinks), deadline).await;
    }

    fn start_sink(&mut self, s: &SinkSettings) {
        s.kind.declare_metrics(&s.name, &self.metrics);
        let running = self.spawn(Role::Sink, &s.name, format!("{s:?}"), None, {
            let kind = s.kind.clone();
            move |ctx| kind.run(ctx)
        });
        self.sinks.insert(s.name.clone(), running);
    }

    fn start_source(&mut self, s: &SourceSettings) {
        s.kind.declare_metrics(&s.name, &self.metrics);
        let hold = s.kind.component().hold(&s.name);
        let running = self.spawn(Role::Source, &s.name, format!("{s:?}"), hold, {
            let kind = s.kind.clone();
            move |ctx| kind.run(ctx)
        });
        self.sources.insert(s.name.clone(), running);
    }

    fn spawn(
        &self,
        role: Role,
        name: &str,
        settings: String,
        hold: Option<String>,
        run: impl Fn(&ComponentContext) -> crate::component::Run + Send + 'static,
    ) -> Running {
        let stop = CancellationToken::new();
        let ctx = ComponentContext {
            name: name.to_string(),
            log: self.log.clone(),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            stop: stop.clone(),
        };
        let task = supervisor::spawn_component(
            format!("{}:{name}", role.name()),
            ctx,
            role == Role::Source,
            run,
        );
        Running {
            settings,
            hold,
            stop,
            task,
        }
    }
}

/// Each component's settings as its `Debug` text, by name.
fn fingerprints<T: fmt::Debug>(settings: &BTreeMap<String, T>) -> BTreeMap<String, String> {
    (settings.iter())
        .map(|(name, s)| (name.clone(), format!("{s:?}")))
        .collect()
}

/// Stops `tasks` together and waits for them until `deadline`, then
/// abandons the rest (aborting them).
async fn stop_all(
    role: Role,
    tasks: impl IntoIterator<Item = (String, Running)>,
    deadline: Instant,
) {
    let tasks: Vec<_> = tasks.into_iter().collect();
    for (_, r) in &tasks {
        r.stop.cancel();
    }
    for (name, r) in tasks {
        let mut task = r.task;
        tokio::select! {
            _ = &mut task => info!(kind = role.name(), %name, "stopped"),
            _ = tokio::time::sleep_until(deadline) => {
                warn!(kind = role.name(), %name, "did not finish within shutdown_timeout; abandoning its in-flight work (it will be redelivered)");
                task.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(settings: &str) -> Running {
        Running {
            settings: settings.to_string(),
            hold: None,
            stop: CancellationToken::new(),
            task: tokio::spawn(async {}),
        }
    }

    #[tokio::test]
    async fn a_diff_names_what_to_remove_restart_and_start() {
        let now: BTreeMap<_, _> = [("a", "1"), ("b", "2"), ("c", "3")]
            .into_iter()
            .map(|(n, s)| (n.to_string(), running(s)))
            .collect();
        let wanted: BTreeMap<_, _> = [("b", "2"), ("c", "changed"), ("d", "4")]
            .into_iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect();
        let d = Diff::between(&now, &wanted);
        assert_eq!(d.removed, ["a"]);
        assert_eq!(d.changed, ["c"]);
        assert_eq!(d.added, ["d"]);
        assert_eq!(d.stopping().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(d.starting().collect::<Vec<_>>(), ["c", "d"]);
        let same = Diff::between(&now, &fingerprints(&now_settings(&now)));
        assert!(same.is_empty(), "{same:?}");
    }

    fn now_settings(now: &BTreeMap<String, Running>) -> BTreeMap<String, Unquoted> {
        (now.iter())
            .map(|(n, r)| (n.clone(), Unquoted(r.settings.clone())))
            .collect()
    }

    /// Debug-prints as the bare text, as the running table stores it.
    struct Unquoted(String);

    impl fmt::Debug for Unquoted {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    #[test]
    fn changes_read_as_a_sentence() {
        let c = Changes {
            sources: Diff {
                removed: vec!["old".into()],
                ..Diff::default()
            },
            sinks: Diff {
                changed: vec!["es".into()],
                added: vec!["archive".into(), "otlp".into()],
                ..Diff::default()
            },
        };
        assert_eq!(
            c.to_string(),
            "source(s) removed: old; sink(s) added: archive, otlp; sink(s) restarted with new settings: es"
        );
        assert_eq!(Changes::default().to_string(), "no source or sink changed");
    }
}
