//! The `families!` macro: one declaration per metric family (its handle,
//! name, help as its doc comment and, if it is not the default, how its
//! metrics are built) generates the struct field, its construction and its registration,
//! so the four can no longer drift apart.
//!
//! A field without a name is a group of families (a struct declared the
//! same way, maybe behind an `Arc`) and is registered by registering its own
//! families. Fields are registered in the order they are declared, which is
//! the order `/metrics` lists them.

use std::sync::Arc;

use prometheus_client::registry::{Metric, Registry, Unit};

/// A struct of metric families that knows how to register them.
pub trait Families {
    /// Every family empty, registered nowhere yet.
    fn unregistered() -> Self;
    /// Registers every family (and every group's families) in `registry`.
    fn register(&self, registry: &mut Registry);
    /// A sample in every family, so that each one is encoded.
    #[cfg(test)]
    fn touch_every_family(&self);
}

/// Groups are shared with the components that update them.
impl<T: Families> Families for Arc<T> {
    fn unregistered() -> Self {
        Arc::new(T::unregistered())
    }

    fn register(&self, registry: &mut Registry) {
        (**self).register(registry);
    }

    #[cfg(test)]
    fn touch_every_family(&self) {
        (**self).touch_every_family();
    }
}

/// Declares a struct of metric families. Each field is one of
///
/// ```text
/// /// Help text, served as the family's `# HELP`.
/// pub handle: Family<Labels, Counter> = "holdfast_name";
/// /// Help text.
/// pub handle: Family<Labels, Histogram> = "holdfast_name_seconds"
///     with Family::new_with_constructor(|| ...);
/// pub handle: Family<Labels, Counter> = "holdfast_name", "Help text";
/// pub group: Arc<OtherFamilies>;
/// ```
///
/// The name is the one served (a counter's samples add `_total`); a name
/// ending in `_bytes` or `_seconds` is registered with that unit. The doc
/// comment is the help, unless a help text follows the name.
///
/// Fields in `[ ... ]` after the struct's name are plain private fields,
/// built by `Default` and not registered.
macro_rules! families {
    (
        $(#[$meta:meta])*
        pub struct $group:ident $([ $($plain:ident: $plain_ty:ty),* $(,)? ])? {
            $(
                $(#[doc = $doc:literal])*
                pub $field:ident: $fty:ty
                    $(= $name:literal $(, $help:literal)? $(with $ctor:expr)?)?;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug)]
        pub struct $group {
            $($($plain: $plain_ty,)*)?
            $(
                $(#[doc = $doc])*
                pub $field: $fty,
            )*
        }

        impl $crate::metrics::Families for $group {
            fn unregistered() -> Self {
                $group {
                    $($($plain: Default::default(),)*)?
                    $($field: $crate::metrics::families!(@new [$($($ctor)?)?] [$($name)?]),)*
                }
            }

            fn register(&self, registry: &mut ::prometheus_client::registry::Registry) {
                $($crate::metrics::families!(
                    @register registry, self.$field,
                    [$($name, [$($help)?])?] [$($doc)*]
                );)*
            }

            #[cfg(test)]
            fn touch_every_family(&self) {
                $($crate::metrics::families!(@touch self.$field, [$($name)?]);)*
            }
        }
    };

    (@touch $f:expr, []) => { $crate::metrics::Families::touch_every_family(&$f) };
    (@touch $f:expr, [$name:literal]) => {
        drop($f.get_or_create(&Default::default()))
    };

    (@new [$ctor:expr] [$($name:literal)?]) => { $ctor };
    (@new [] [$name:literal]) => { ::prometheus_client::metrics::family::Family::default() };
    (@new [] []) => { $crate::metrics::Families::unregistered() };

    (@register $registry:ident, $f:expr, [] [$($doc:literal)*]) => {
        $crate::metrics::Families::register(&$f, $registry)
    };
    (@register $registry:ident, $f:expr, [$name:literal, [$help:literal]] [$($doc:literal)*]) => {
        $crate::metrics::register_family($registry, $name, $help, $f.clone())
    };
    (@register $registry:ident, $f:expr, [$name:literal, []] [$($doc:literal)*]) => {
        $crate::metrics::register_family($registry, $name, concat!($($doc),*), $f.clone())
    };
}

pub(crate) use families;

/// Registers `metric` as `name`, with the unit its name ends in. `help`
/// may be a doc comment's text: each of its lines starts with a space and
/// the registry adds the final full stop.
pub fn register_family(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
    let help = help.trim().trim_end_matches('.');
    let unit = [("_bytes", Unit::Bytes), ("_seconds", Unit::Seconds)]
        .into_iter()
        .find_map(|(suffix, unit)| Some((name.strip_suffix(suffix)?, unit)));
    match unit {
        Some((base, unit)) => registry.register_with_unit(base, help, unit, metric),
        None => registry.register(name, help, metric),
    }
}
