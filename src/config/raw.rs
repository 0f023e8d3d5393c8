//! Stage one: the top-level tables exactly as written. Every field is
//! optional (its doc states the default applied in stage two), unknown keys
//! are refused, and values that later checks point at keep their span.
//!
//! [`RawConfig`] checks the top level; each table is then read on its own,
//! so that a mistake in one does not hide mistakes in the others.
//! `[sources.*]` and `[sinks.*]` are chosen by their `type` (see `sources.rs`
//! and `sinks.rs`).

use serde::de::{Deserializer, IgnoredAny};
use serde::Deserialize;

use crate::checking::raw::{one_of, raw_table};
use crate::checking::units::{Count, Dur, Size};

/// A fieldless enum read from one of the listed strings, with [`one_of`]'s
/// messages.
macro_rules! one_of_enum {
    ($(#[$meta:meta])* $name:ident { $($text:literal => $variant:ident,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum $name {
            $($variant,)+
        }

        impl $name {
            pub const CHOICES: &[(&str, $name)] = &[$(($text, $name::$variant),)+];
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                one_of(d, $name::CHOICES)
            }
        }
    };
}

raw_table! {
    /// The whole file. The tables are read on their own: they are named here
    /// only so that they are allowed and suggested.
    #[allow(dead_code)]
    RawConfig, "a table of holdfast settings" {
        /// Where holdfast keeps its state: the log in `<data_dir>/log`, and file
        /// sinks' output in `<data_dir>/out/<name>` unless they set `path`.
        /// Relative paths are resolved against the config file's directory.
        /// Default: `"/var/lib/holdfast"`.
        data_dir: String,
        /// `[log]`, read on its own as [`RawLog`]. Default: every key at its
        /// default.
        log: IgnoredAny,
        /// `[api]`, read on its own as [`RawApi`]. Default: every key at its
        /// default.
        api: IgnoredAny,
        /// `[daemon]`, read on its own as [`RawDaemon`]. Default: every key at
        /// its default.
        daemon: IgnoredAny,
        /// `[logging]`, read on its own as [`RawLogging`]. Default: every key at
        /// its default.
        logging: IgnoredAny,
        /// `[sources.<name>]` tables, read on their own. Default: none.
        sources: IgnoredAny,
        /// `[sinks.<name>]` tables, read on their own. Default: none.
        sinks: IgnoredAny,
    }
}

raw_table! {
    /// `[log]`: becomes [`LogOptions`](crate::seglog::LogOptions).
    RawLog, "a table like [log]" {
        /// Size at which a segment is sealed and the next begun. Default
        /// `"64MiB"`; at least 64KiB, at most 1GiB.
        segment_size: Size,
        /// Bound on all segment files together. Default `"1GiB"`; at least twice
        /// `segment_size`.
        max_bytes: Size,
        /// Sealed segments older than this are deleted, read or not. Default:
        /// absent, no age limit. Never zero.
        max_age: Dur,
        /// `"always"`, `"interval"` or `"never"`. Default `"always"`.
        fsync: RawFsync,
        /// Sync period under `fsync = "interval"`; refused with the other
        /// policies. Default `"1s"`. Never zero.
        fsync_interval: Dur,
        /// `"block"` or `"drop_oldest"`. Default `"block"`.
        when_full: RawWhenFull,
        /// How long an append waits for space under `block`. Default `"5s"`;
        /// zero means fail at once.
        append_timeout: Dur,
        /// How often sinks' cursors are written to disk. Default `"1s"`. Never
        /// zero.
        cursor_sync_interval: Dur,
        /// `"zstd"`, `"lz4"` or `"none"`: how each batch is compressed on
        /// disk. Default `"zstd"`.
        compression: RawCompression,
        /// zstd level, 1 (fastest) to 19. Default 1; only with `"zstd"`.
        compression_level: Count,
    }
}

one_of_enum! {
    /// The spelling of [`Compression`](crate::seglog::Compression) without its
    /// level (which is a separate key).
    RawCompression {
        "zstd" => Zstd,
        "lz4" => Lz4,
        "none" => None,
    }
}

one_of_enum! {
    /// The spelling of [`FsyncPolicy`](crate::seglog::FsyncPolicy) without its
    /// interval (which is a separate key).
    RawFsync {
        "always" => Always,
        "interval" => Interval,
        "never" => Never,
    }
}

one_of_enum! {
    /// The spelling of [`WhenFull`](crate::seglog::WhenFull).
    RawWhenFull {
        "block" => Block,
        "drop_oldest" => DropOldest,
    }
}

raw_table! {
    /// `[api]`.
    RawApi, "a table like [api]" {
        /// Address of `/metrics`, `/healthz` and `/readyz`. Default
        /// `"127.0.0.1:9467"`.
        listen: String,
    }
}

raw_table! {
    /// `[daemon]`.
    RawDaemon, "a table like [daemon]" {
        /// Deadline for the drain after SIGTERM. Default `"20s"`. Never zero.
        shutdown_timeout: Dur,
        /// Whether to ping systemd's watchdog when the unit sets `WatchdogSec`.
        /// Default `true`.
        watchdog: bool,
        /// Threads that run sources and sinks. Default 2 (fewer if the machine
        /// has fewer cores).
        worker_threads: Count,
        /// glibc malloc arenas (`M_ARENA_MAX`). Default 2.
        malloc_arenas: Count,
        /// Allocations from this size up get their own mapping
        /// (`M_MMAP_THRESHOLD`, fixed). Default: glibc's own, which grows.
        malloc_mmap_threshold: Size,
    }
}

raw_table! {
    /// `[logging]`.
    RawLogging, "a table like [logging]" {
        /// A level (`error`, `warn`, `info`, `debug`, `trace`, `off`) or a
        /// tracing `EnvFilter` directive. Default `"info"`. `RUST_LOG` overrides
        /// it.
        level: String,
        /// `"auto"`, `"text"` or `"json"`. Default `"auto"`.
        format: LogFormat,
    }
}

/// `logging.format`: read as written and needing no check, so the raw
/// table's type is also the setting's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Journal-friendly text (no colours, no timestamps: the journal adds
    /// its own) when stderr is not a terminal or `JOURNAL_STREAM` is set;
    /// coloured text with timestamps on a terminal.
    Auto,
    /// Plain text with timestamps, no colours.
    Text,
    /// One JSON object per line.
    Json,
}

impl<'de> Deserialize<'de> for LogFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(
            d,
            &[
                ("auto", LogFormat::Auto),
                ("text", LogFormat::Text),
                ("json", LogFormat::Json),
            ],
        )
    }
}
