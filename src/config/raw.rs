//! Stage one: the top-level tables exactly as written. Every field is
//! optional (its doc states the default applied in stage two), unknown keys
//! are refused, and values that later checks point at keep their span.
//!
//! [`RawConfig`] checks the top level; each table is then read on its own,
//! so that a mistake in one does not hide mistakes in the others.
//! `[sources.*]` and `[sinks.*]` are chosen by their `type` (see `sources.rs`
//! and `sinks.rs`).

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::error::suggestion_suffix;

use super::settings::LogFormat;
use super::units::{Count, Dur, Size};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    /// Where holdfast keeps its state: the log in `<data_dir>/log`, and file
    /// sinks' output in `<data_dir>/out/<name>` unless they set `path`.
    /// Relative paths are resolved against the config file's directory.
    /// Default: `"/var/lib/holdfast"`.
    pub data_dir: Option<Spanned<String>>,
    /// `[log]`, read on its own as [`RawLog`]. Default: every key at its
    /// default.
    #[allow(dead_code)] // named only so that it is allowed and suggested
    pub log: Option<IgnoredAny>,
    /// `[api]`, read on its own as [`RawApi`]. Default: every key at its
    /// default.
    #[allow(dead_code)] // named only so that it is allowed and suggested
    pub api: Option<IgnoredAny>,
    /// `[daemon]`, read on its own as [`RawDaemon`]. Default: every key at
    /// its default.
    #[allow(dead_code)] // named only so that it is allowed and suggested
    pub daemon: Option<IgnoredAny>,
    /// `[logging]`, read on its own as [`RawLogging`]. Default: every key at
    /// its default.
    #[allow(dead_code)] // named only so that it is allowed and suggested
    pub logging: Option<IgnoredAny>,
    /// `[sources.<name>]` tables, read on their own. Default: none.
    #[allow(dead_code)] // named only so that it is allowed and suggested
    pub sources: Option<IgnoredAny>,
    /// `[sinks.<name>]` tables, read on their own. Default: none.
    #[allow(dead_code)] // named only so that it is allowed and suggested
    pub sinks: Option<IgnoredAny>,
}

/// `[log]`: becomes [`LogOptions`](crate::seglog::LogOptions).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table like [log]")]
pub(crate) struct RawLog {
    /// Size at which a segment is sealed and the next begun. Default
    /// `"64MiB"`; at least 64KiB, at most 1GiB.
    pub segment_size: Option<Spanned<Size>>,
    /// Bound on all segment files together. Default `"1GiB"`; at least twice
    /// `segment_size`.
    pub max_bytes: Option<Spanned<Size>>,
    /// Sealed segments older than this are deleted, read or not. Default:
    /// absent, no age limit. Never zero.
    pub max_age: Option<Spanned<Dur>>,
    /// `"always"`, `"interval"` or `"never"`. Default `"always"`.
    pub fsync: Option<Spanned<RawFsync>>,
    /// Sync period under `fsync = "interval"`; refused with the other
    /// policies. Default `"1s"`. Never zero.
    pub fsync_interval: Option<Spanned<Dur>>,
    /// `"block"` or `"drop_oldest"`. Default `"block"`.
    pub when_full: Option<Spanned<RawWhenFull>>,
    /// How long an append waits for space under `block`. Default `"5s"`;
    /// zero means fail at once.
    pub append_timeout: Option<Spanned<Dur>>,
    /// How often sinks' cursors are written to disk. Default `"1s"`. Never
    /// zero.
    pub cursor_sync_interval: Option<Spanned<Dur>>,
    /// `"zstd"`, `"lz4"` or `"none"`: how each batch is compressed on
    /// disk. Default `"zstd"`.
    pub compression: Option<Spanned<RawCompression>>,
    /// zstd level, 1 (fastest) to 19. Default 1; only with `"zstd"`.
    pub compression_level: Option<Spanned<Count>>,
}

/// The spelling of [`Compression`](crate::seglog::Compression) without its
/// level (which is a separate key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawCompression {
    Zstd,
    Lz4,
    None,
}

impl<'de> Deserialize<'de> for RawCompression {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(
            d,
            &[
                ("zstd", RawCompression::Zstd),
                ("lz4", RawCompression::Lz4),
                ("none", RawCompression::None),
            ],
        )
    }
}

/// The spelling of [`FsyncPolicy`](crate::seglog::FsyncPolicy) without its
/// interval (which is a separate key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawFsync {
    Always,
    Interval,
    Never,
}

impl RawFsync {
    pub const CHOICES: &[(&str, RawFsync)] = &[
        ("always", RawFsync::Always),
        ("interval", RawFsync::Interval),
        ("never", RawFsync::Never),
    ];
}

impl<'de> Deserialize<'de> for RawFsync {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(d, RawFsync::CHOICES)
    }
}

/// The spelling of [`WhenFull`](crate::seglog::WhenFull).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawWhenFull {
    Block,
    DropOldest,
}

impl<'de> Deserialize<'de> for RawWhenFull {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(
            d,
            &[
                ("block", RawWhenFull::Block),
                ("drop_oldest", RawWhenFull::DropOldest),
            ],
        )
    }
}

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

/// `[api]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table like [api]")]
pub(crate) struct RawApi {
    /// Address of `/metrics`, `/healthz` and `/readyz`. Default
    /// `"127.0.0.1:9467"`.
    pub listen: Option<Spanned<String>>,
}

/// `[daemon]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table like [daemon]")]
pub(crate) struct RawDaemon {
    /// Deadline for the drain after SIGTERM. Default `"20s"`. Never zero.
    pub shutdown_timeout: Option<Spanned<Dur>>,
    /// Whether to ping systemd's watchdog when the unit sets `WatchdogSec`.
    /// Default `true`.
    pub watchdog: Option<Spanned<bool>>,
    /// Threads that run sources and sinks. Default 2 (fewer if the machine
    /// has fewer cores).
    pub worker_threads: Option<Spanned<Count>>,
    /// glibc malloc arenas (`M_ARENA_MAX`). Default 2.
    pub malloc_arenas: Option<Spanned<Count>>,
    /// Allocations from this size up get their own mapping
    /// (`M_MMAP_THRESHOLD`, fixed). Default: glibc's own, which grows.
    pub malloc_mmap_threshold: Option<Spanned<Size>>,
}

/// `[logging]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table like [logging]")]
pub(crate) struct RawLogging {
    /// A level (`error`, `warn`, `info`, `debug`, `trace`, `off`) or a
    /// tracing `EnvFilter` directive. Default `"info"`. `RUST_LOG` overrides
    /// it.
    pub level: Option<Spanned<String>>,
    /// `"auto"`, `"text"` or `"json"`. Default `"auto"`.
    pub format: Option<Spanned<LogFormat>>,
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
                $crate::config::raw::one_of(d, &[$(($text, $name($value)),)+])
            }
        }
    };
}
pub(crate) use one_of_newtype;
