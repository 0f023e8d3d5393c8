//! The `families!` macro: one declaration per metric family (its handle,
//! name, unit, help and, if it is not the default, how its metrics are
//! built) generates the struct field, its construction and its registration,
//! so the four can no longer drift apart.
//!
//! A field without a name is a group of families (a struct declared the
//! same way, maybe behind an `Arc`) and is registered by registering its own
//! families. Fields are registered in the order they are declared, which is
//! the order `/metrics` lists them.

use std::sync::Arc;

use prometheus_client::registry::Registry;

/// A struct of metric families that knows how to register them.
pub trait Families {
    /// Every family empty, registered nowhere yet.
    fn unregistered() -> Self;
    /// Registers every family (and every group's families) in `registry`.
    fn register(&self, registry: &mut Registry);
}

/// Groups are shared with the components that update them.
impl<T: Families> Families for Arc<T> {
    fn unregistered() -> Self {
        Arc::new(T::unregistered())
    }

    fn register(&self, registry: &mut Registry) {
        (**self).register(registry);
    }
}

/// Declares a struct of metric families. Each field is one of
///
/// ```text
/// /// doc
/// pub handle: Family<Labels, Counter> = "holdfast_name", "Help text";
/// pub handle: Family<Labels, Counter> = "holdfast_name", Bytes, "Help text";
/// pub handle: Family<Labels, Histogram> = "holdfast_name", Seconds, "Help"
///     with Family::new_with_constructor(|| ...);
/// pub group: Arc<OtherFamilies>;
/// ```
///
/// Fields in `[ ... ]` after the struct's name are plain private fields,
/// built by `Default` and not registered.
macro_rules! families {
    (
        $(#[$meta:meta])*
        pub struct $group:ident $([ $($plain:ident: $plain_ty:ty),* $(,)? ])? {
            $(
                $(#[$fmeta:meta])*
                pub $field:ident: $fty:ty
                    $(= $name:literal, $($unit:ident,)? $help:literal $(with $ctor:expr)?)?;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug)]
        pub struct $group {
            $($($plain: $plain_ty,)*)?
            $(
                $(#[$fmeta])*
                pub $field: $fty,
            )*
        }

        impl $crate::metrics::families::Families for $group {
            fn unregistered() -> Self {
                $group {
                    $($($plain: Default::default(),)*)?
                    $($field: families!(@new [$($($ctor)?)?] [$($name)?]),)*
                }
            }

            fn register(&self, registry: &mut ::prometheus_client::registry::Registry) {
                $(families!(@register registry, self.$field, [$($name, [$($unit)?], $help)?]);)*
            }
        }

        #[cfg(test)]
        impl $group {
            /// A sample in every family, so that each one is encoded.
            pub(crate) fn touch_every_family(&self) {
                $(families!(@touch self.$field, [$($name)?]);)*
            }
        }
    };

    (@touch $f:expr, []) => { $f.touch_every_family() };
    (@touch $f:expr, [$name:literal]) => {
        drop($f.get_or_create(&Default::default()))
    };

    (@new [$ctor:expr] [$($name:literal)?]) => { $ctor };
    (@new [] [$name:literal]) => { ::prometheus_client::metrics::family::Family::default() };
    (@new [] []) => { $crate::metrics::families::Families::unregistered() };

    (@register $registry:ident, $f:expr, []) => {
        $crate::metrics::families::Families::register(&$f, $registry)
    };
    (@register $registry:ident, $f:expr, [$name:literal, [], $help:literal]) => {
        $registry.register($name, $help, $f.clone())
    };
    (@register $registry:ident, $f:expr, [$name:literal, [$unit:ident], $help:literal]) => {
        $registry.register_with_unit(
            $name,
            $help,
            ::prometheus_client::registry::Unit::$unit,
            $f.clone(),
        )
    };
}

pub(crate) use families;
