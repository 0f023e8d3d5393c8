//! The contract of a source type.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use super::{ComponentContext, Run};
use crate::checking::{Checker, Env, NamedTable};
use crate::metrics::Metrics;
use crate::process::Chain;
use crate::seglog::LogOptions;

/// A source type: implemented by the options its check produces.
pub(crate) trait Source: fmt::Debug + Send + Sync {
    /// Checks the `[sources.<name>]` table `t` (its `type` already read).
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SourceEnv<'_>) -> Option<Self>
    where
        Self: Sized;
    /// The lines under the source's name in `holdfast check`.
    fn describe(&self, out: &mut String) -> fmt::Result;
    /// Creates at 0 the series of its type's own families for the source
    /// `name` (every source's are created before: `Metrics::declare_source`),
    /// so that an alert on `increase()` sees its first event.
    fn declare_metrics(&self, name: &str, metrics: &Metrics);
    /// Registers its type's own group of metric families (declared in its
    /// folder with `families!`, reached with `Metrics::group`), once for
    /// the type, configured or not: the daemon calls it for every kind in
    /// list order, so `/metrics` lists the families in the same order on
    /// every start. A type with none keeps this default.
    fn register_families(_metrics: &Metrics)
    where
        Self: Sized,
    {
    }
    /// Starts the source.
    fn run(&self, ctx: &ComponentContext) -> Run;
    /// The checks that need the machine (`Settings::check_environment`).
    fn check_environment(&self, name: &str, env: &mut Env<'_>);
    /// Its processing chain, for `holdfast check --sample`; `None` when its
    /// type runs none.
    fn processing(&self) -> Option<Processing<'_>> {
        None
    }
    /// The addresses it listens on, each with its key under the source's
    /// table (`listen`, `grpc.listen`): no two listeners share a port.
    fn listens(&self) -> Vec<(&'static str, SocketAddr)> {
        Vec::new()
    }
    /// The glob patterns of files it reads (never holdfast's own output).
    fn tails(&self) -> &[String] {
        &[]
    }
    /// The retention hold the log must open with for this source, if any.
    fn hold(&self, _name: &str) -> Option<String> {
        None
    }
}

/// A source type's processing chain as configured.
#[derive(Debug, Clone, Copy)]
pub struct Processing<'a> {
    /// `[sources.<name>.process]`, if the table has one.
    pub chain: Option<&'a Arc<Chain>>,
    /// What the chain runs on, in the plural (`"lines"`): what one sample
    /// line stands for.
    pub unit: &'static str,
}

/// What a source's check may need besides its own table.
pub(crate) struct SourceEnv<'a> {
    /// The checked `[log]` table (an event must fit in a segment).
    pub log: &'a LogOptions,
    /// The checked `data_dir` (sources keep their state under it).
    pub data_dir: &'a Path,
}
