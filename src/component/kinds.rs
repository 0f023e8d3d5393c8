/*!
The macro that turns a side's list of component types into its kind enum:
the `type` names, and the dispatch of check, describe, metrics (each
type's own families, and the series a component creates at 0) and run to
each type's `Source` or `Sink` implementation. The lists themselves are in
`src/sources/mod.rs` and `src/sinks/mod.rs`, beside the folders they name:
adding a component is its folder and one entry there.
*/

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
            pub fn run(&self, ctx: &$crate::component::ComponentContext) -> $crate::component::Run {
                self.component().run(ctx)
            }

            /// Registers every type's own metric families, in list order.
            pub fn register_families(metrics: &$crate::metrics::Metrics) {
                $(<$options as $crate::component::$component>::register_families(metrics);)*
            }

            /// Creates at 0 every series the component `name` can move:
            /// those of every component of its side, then its type's own.
            pub fn declare_metrics(&self, name: &str, metrics: &$crate::metrics::Metrics) {
                metrics.$declare(name);
                self.component().declare_metrics(name, metrics);
            }

            pub(crate) fn component(&self) -> &dyn $crate::component::$component {
                match self {
                    $($kind::$variant(o) => o,)*
                }
            }

            /// Checks table `t` by its type (`named_tables` let through
            /// only known types).
            pub(crate) fn check<'a>(
                cx: &mut $crate::checking::Checker<'a>,
                t: &$crate::checking::NamedTable<'a>,
                env: &$crate::component::$env<'_>,
            ) -> Option<$kind> {
                match t.kind.as_str() {
                    $($name => <$options as $crate::component::$component>::check(cx, t, env).map($kind::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

pub(crate) use components;
