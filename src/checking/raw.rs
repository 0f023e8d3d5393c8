//! The raw stage's building blocks, shared by the settings' own tables
//! (`src/config/raw.rs`) and every component's `config.rs`: a table's
//! struct with every key optional and spanned, unknown keys refused, and
//! strings read from a fixed list with a did-you-mean.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};

use super::error::suggestion_suffix;

/// Declares the raw struct of a table: every key optional and spanned
/// (`key: Type` is written `Option<Spanned<Type>>`, so every check can
/// point at it), unknown keys refused. Two forms: `Name, "what the table
/// holds" { .. }` (a `Default` struct whose refusal says what it holds),
/// and `vis struct Name { .. }` (a component's table; `holdfast check`
/// lists its keys in the order written).
macro_rules! raw_table {
    ($(#[$meta:meta])* $name:ident, $expecting:tt {
        $($(#[$fmeta:meta])* $field:ident: $ty:ty,)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields, expecting = $expecting)]
        pub(crate) struct $name {
            $($(#[$fmeta])* pub(crate) $field: Option<toml::Spanned<$ty>>,)*
        }
    };
    ($(#[$meta:meta])* $vis:vis struct $name:ident {
        $($(#[$fmeta:meta])* $field:ident: $ty:ty,)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        $vis struct $name {
            $($(#[$fmeta])* $field: Option<toml::Spanned<$ty>>,)*
        }
    };
}
pub(crate) use raw_table;

/// Deserializes a string that must be one of `choices`, with a
/// did-you-mean for near misses and the full list otherwise. (serde's
/// derived enums would do, but through toml a non-string gives only
/// "wanted string or table".)
pub(crate) fn one_of<'de, D: Deserializer<'de>, T: Copy + 'static>(
    d: D,
    choices: &'static [(&'static str, T)],
) -> Result<T, D::Error> {
    struct OneOf<T: 'static>(&'static [(&'static str, T)]);
    impl<T> OneOf<T> {
        fn list(&self) -> String {
            self.0
                .iter()
                .map(|(name, _)| format!("\"{name}\""))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
    impl<T: Copy> Visitor<'_> for OneOf<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "one of {}", self.list())
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            if let Some((_, value)) = self.0.iter().find(|(name, _)| *name == v) {
                return Ok(*value);
            }
            let suggestion = suggestion_suffix(v, self.0.iter().map(|(name, _)| *name), '"');
            Err(E::custom(format!(
                "unknown value \"{v}\"{suggestion}; expected one of: {}",
                self.list()
            )))
        }
    }
    d.deserialize_any(OneOf(choices))
}

/// A newtype over `$inner` read from one of the listed strings, with
/// [`one_of`]'s messages.
macro_rules! one_of_newtype {
    ($(#[$meta:meta])* $name:ident($inner:ty) { $($text:literal => $value:expr,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct $name(pub(crate) $inner);

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::checking::raw::one_of(d, &[$(($text, $name($value)),)+])
            }
        }
    };
}
pub(crate) use one_of_newtype;
