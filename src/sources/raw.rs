//! Raw structs of the tables under `[sources.<name>]`, declared by
//! [`raw_source!`] (a source's own table) and the config's
//! [`raw_table!`](crate::checking::raw::raw_table) (any other table): every
//! such table reads the same way.
//!
//! serde's `flatten` does not mix with `deny_unknown_fields` nor keep spans,
//! so keys that sources share (the listener's) are written into each struct
//! and checked by one function (`super::listen::Listener::check`).

/// [`raw_table!`](crate::checking::raw::raw_table) for a source's own
/// table: `type` first (already read to choose the struct), then the
/// source's keys.
macro_rules! raw_source {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($keys:tt)* }) => {
        $crate::checking::raw::raw_table! {
            $(#[$meta])*
            $vis struct $name {
                #[serde(rename = "type")]
                _type: serde::de::IgnoredAny,
                $($keys)*
            }
        }
    };
}

pub(crate) use raw_source;
