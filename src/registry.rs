/*!
The one list of component types: for each `type` a source or sink table may
name, the component's options type, which checks its table, describes itself
for `holdfast check` and starts the component. The config, `describe`,
`check` and the daemon all read this list; nothing else names a component.

Each component implements `Source` or `Sink` in its own folder (its
`config.rs` holds the raw TOML structs and the check); adding one is that
folder plus one line in the `components!` lists below. `src/config` only imports
this module, never a component.
*/

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::api::Health;
use crate::config::check::{Checker, NamedTable};
use crate::config::environment::Env;
use crate::config::{SinkEnv, SourceEnv};
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

/// A source type: implemented by the options its check produces.
pub(crate) trait Source: fmt::Debug + Send + Sync {
    /// Checks the `[sources.<name>]` table `t` (its `type` already read).
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SourceEnv<'_>) -> Option<Self>
    where
        Self: Sized;
    /// The lines under the source's name in `holdfast check`.
    fn describe(&self, out: &mut String) -> fmt::Result;
    /// Starts the source.
    fn run(&self, ctx: &ComponentContext) -> Run;
    /// The checks that need the machine (`Settings::check_environment`).
    fn check_environment(&self, name: &str, env: &mut Env<'_>);
    /// The address it listens on, if any (no two listeners share a port).
    fn listen(&self) -> Option<SocketAddr> {
        None
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

/// A sink type: implemented by the options its check produces.
pub(crate) trait Sink: fmt::Debug + Send + Sync {
    /// Checks the `[sinks.<name>]` table `t` (its `type` already read),
    /// `inputs` included.
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SinkEnv<'_>) -> Option<Self>
    where
        Self: Sized;
    /// The source names it sends.
    fn inputs(&self) -> &[String];
    /// The lines under the sink's name in `holdfast check`.
    fn describe(&self, out: &mut String) -> fmt::Result;
    /// Starts the sink.
    fn run(&self, ctx: &ComponentContext) -> Run;
    /// The checks that need the machine (`Settings::check_environment`).
    fn check_environment(&self, name: &str, env: &mut Env<'_>);
    /// The local directory it writes and prunes, if it has one.
    fn output_dir(&self) -> Option<&Path> {
        None
    }
}

/// Writes the kind enum, its `type` names and the dispatch from one list.
macro_rules! components {
    (
        $(#[$meta:meta])*
        enum $kind:ident: $component:ident, $env:ident, $types:ident {
            $($(#[$vmeta:meta])* $name:literal => $variant:ident($options:ty),)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub enum $kind {
            $($(#[$vmeta])* $variant($options),)*
        }

        /// The `type` values, in the order messages list them.
        pub const $types: &[&str] = &[$($name),*];

        impl $kind {
            /// The `type` value.
            pub fn type_name(&self) -> &'static str {
                match self {
                    $($kind::$variant(_) => $name,)*
                }
            }

            /// Starts the component.
            pub fn run(&self, ctx: &ComponentContext) -> Run {
                self.component().run(ctx)
            }

            pub(crate) fn component(&self) -> &dyn $component {
                match self {
                    $($kind::$variant(o) => o,)*
                }
            }

            /// Checks table `t` by its type (`named_tables` let through
            /// only known types).
            pub(crate) fn check<'a>(
                cx: &mut Checker<'a>,
                t: &NamedTable<'a>,
                env: &$env<'_>,
            ) -> Option<$kind> {
                match t.kind.as_str() {
                    $($name => <$options as $component>::check(cx, t, env).map($kind::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

components! {
    /// The kinds of source, by `type`.
    enum SourceKind: Source, SourceEnv, SOURCE_TYPES {
        /// `type = "file"`: tail log files.
        "file" => File(crate::sources::file::FileSourceOptions),
        /// `type = "otlp_http"`: an OTLP/HTTP receiver.
        "otlp_http" => OtlpHttp(crate::sources::otlp_http::OtlpHttpSourceSettings),
        /// `type = "journald"`: read the systemd journal.
        "journald" => Journald(crate::sources::journald::JournaldOptions),
        /// `type = "syslog"`: RFC 5424/3164 over TCP (TLS) or UDP.
        "syslog" => Syslog(crate::sources::syslog::SyslogSourceSettings),
    }
}

components! {
    /// The kinds of sink, by `type`.
    enum SinkKind: Sink, SinkEnv, SINK_TYPES {
        /// `type = "file"`: NDJSON files on local disk.
        "file" => File(crate::sinks::file::FileSinkOptions),
        /// `type = "otlp_http"`: OTLP/HTTP export.
        "otlp_http" => OtlpHttp(crate::sinks::otlp_http::OtlpHttpSinkOptions),
        /// `type = "elasticsearch"`: the `_bulk` API.
        "elasticsearch" => Elasticsearch(crate::sinks::elasticsearch::ElasticsearchOptions),
        /// `type = "openobserve"`: OpenObserve's `_json` ingestion.
        "openobserve" => OpenObserve(crate::sinks::openobserve::OpenObserveOptions),
        /// `type = "nats"`: NATS JetStream, an ack per event.
        "nats" => Nats(crate::sinks::nats::NatsOptions),
    }
}
