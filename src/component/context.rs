//! What a started component runs with, and the task it is.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::api::Health;
use crate::metrics::Metrics;
use crate::seglog::Log;

/// A component's task: runs until its context's `stop` is cancelled.
pub type Run = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + 'static>>;

/// What every supervised component task runs with; cloned once per start
/// instead of field by field.
#[derive(Clone)]
pub struct ComponentContext {
    /// The table's name (`[sources.<name>]`, `[sinks.<name>]`).
    pub name: String,
    pub log: Log,
    pub metrics: Arc<Metrics>,
    /// Where a source reports why it cannot take input (`/readyz`).
    pub health: Arc<Health>,
    /// Cancelled when the component must finish and return.
    pub stop: CancellationToken,
}

impl ComponentContext {
    /// A context with its own (unshared) health, for a component run
    /// outside the daemon (tests, benchmarks).
    pub fn new(
        name: String,
        log: Log,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> ComponentContext {
        ComponentContext {
            name,
            log,
            metrics,
            health: Arc::new(Health::default()),
            stop,
        }
    }

    /// The task of a component whose `run` takes its name, options, the
    /// log, metrics and stop (no health).
    pub(crate) fn start<O, F>(
        &self,
        options: O,
        run: impl FnOnce(String, O, Log, Arc<Metrics>, CancellationToken) -> F,
    ) -> Run
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let c = self.clone();
        Box::pin(run(c.name, options, c.log, c.metrics, c.stop))
    }
}
