/*!
The one list of component types: for each `type` a source or sink table may
name, the component's options type, which checks its table, describes itself
for `holdfast check`, declares its metrics and starts the component. The
config, `describe`, `check` and the daemon all read this list; nothing else
names a component.

Each component implements the contract's `Source` or `Sink`
(`src/component/`) in its own folder (its `config.rs` holds the raw TOML
structs and the check); adding one is that folder plus one line in the
`components!` lists below. This list sits above the components (the layer
table in `docs/ARCHITECTURE.md`): `src/config` imports it, never a
component, and no component imports it.
*/

use crate::checking::{Checker, NamedTable};
use crate::component::{ComponentContext, Processing, Run, Sink, SinkEnv, Source, SourceEnv};
use crate::metrics::Metrics;

/// Writes the kind enum, its `type` names and the dispatch from one list.
macro_rules! components {
    (
        $(#[$meta:meta])*
        enum $kind:ident: $component:ident, $env:ident, $types:ident, $declare:ident {
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

            /// Creates at 0 every series the component `name` can move:
            /// those of every component of its side, then its type's own.
            pub fn declare_metrics(&self, name: &str, metrics: &Metrics) {
                metrics.$declare(name);
                self.component().declare_metrics(name, metrics);
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
    enum SourceKind: Source, SourceEnv, SOURCE_TYPES, declare_source {
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
    enum SinkKind: Sink, SinkEnv, SINK_TYPES, declare_sink {
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

impl SourceKind {
    /// The source's processing chain, for `holdfast check --sample`;
    /// `None` when its type runs none.
    pub fn processing(&self) -> Option<Processing<'_>> {
        self.component().processing()
    }
}
