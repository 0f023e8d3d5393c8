//! Raw structs of the tables under `[sources.<name>]`, declared by
//! [`raw_table!`] (any table) and [`raw_source!`] (a source's own table):
//! every such table reads the same way.
//!
//! serde's `flatten` does not mix with `deny_unknown_fields` nor keep spans,
//! so keys that sources share (the listener's) are written into each struct
//! and checked by one function (`super::listen::Listener::check`).

/// Declares the raw struct of a table: each key as written, `name: Type,`
/// standing for an optional value that keeps its span, so every check can
/// point at it. Unknown keys are refused, and `holdfast check` lists the
/// allowed ones in the order written here.
macro_rules! raw_table {
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

/// [`raw_table!`] for a source's own table: `type` first (already read to
/// choose the struct), then the source's keys.
macro_rules! raw_source {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($keys:tt)* }) => {
        $crate::sources::raw::raw_table! {
            $(#[$meta])*
            $vis struct $name {
                #[serde(rename = "type")]
                _type: serde::de::IgnoredAny,
                $($keys)*
            }
        }
    };
}

pub(crate) use {raw_source, raw_table};
