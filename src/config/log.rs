//! The `[log]` table: the segment log's options (segment size, bounds,
//! fsync policy, compression), checked into [`LogOptions`].

use std::time::Duration;

use super::raw::{RawCompression, RawFsync, RawLog, RawWhenFull};
use crate::checking::units::room_for_two;
use crate::checking::Checker;
use crate::seglog::{Compression, FsyncPolicy, LogOptions, WhenFull};

/// The sync period under `fsync = "interval"` unless `fsync_interval` says
/// otherwise.
pub const DEFAULT_FSYNC_INTERVAL: Duration = Duration::from_secs(1);
/// Smallest and largest `log.segment_size`.
pub const SEGMENT_SIZE_RANGE: (u64, u64) = (64 << 10, 1 << 30);

pub(super) fn check_log(cx: &mut Checker<'_>, raw: &RawLog) -> LogOptions {
    let d = LogOptions::default();
    let (min_segment, max_segment) = SEGMENT_SIZE_RANGE;
    let errors_before = cx.error_count();
    let segment_bytes = cx.size(
        "log.segment_size",
        raw.segment_size.as_ref(),
        d.segment_bytes,
        min_segment,
        max_segment,
    );
    // No lower bound of its own: the real one is twice segment_size,
    // checked next with a message that says so (even for "0").
    let mut max_bytes = cx.size(
        "log.max_bytes",
        raw.max_bytes.as_ref(),
        d.max_bytes,
        0,
        u64::MAX,
    );
    if max_bytes < 2 * segment_bytes && cx.error_count() == errors_before {
        // Point at whichever of the two the operator wrote.
        let span = raw
            .max_bytes
            .as_ref()
            .map(|v| v.span())
            .or_else(|| raw.segment_size.as_ref().map(|v| v.span()));
        let key = if raw.max_bytes.is_some() {
            "log.max_bytes"
        } else {
            "log.segment_size"
        };
        cx.error(
            span,
            key,
            room_for_two(
                ("log.max_bytes", max_bytes),
                ("log.segment_size", segment_bytes),
                "the active segment is never evicted, so the log needs room for at least one more",
                "segment_size",
            ),
        );
    }
    max_bytes = max_bytes.max(2 * segment_bytes);
    let max_age = raw.max_age.as_ref().map(|v| {
        cx.duration(
            "log.max_age",
            Some(v),
            Duration::from_secs(7 * 86400),
            Some("remove max_age to keep data regardless of age"),
        )
    });

    let fsync_kind = raw.fsync.as_ref().map(|v| {
        cx.note("log.fsync", v);
        *v.get_ref()
    });
    let interval = cx.duration(
        "log.fsync_interval",
        raw.fsync_interval.as_ref(),
        DEFAULT_FSYNC_INTERVAL,
        Some("to sync every append use fsync = \"always\""),
    );
    let fsync = match fsync_kind.unwrap_or(RawFsync::Always) {
        RawFsync::Always => FsyncPolicy::Always,
        RawFsync::Interval => FsyncPolicy::Interval(interval),
        RawFsync::Never => FsyncPolicy::Never,
    };
    if let Some(v) = &raw.fsync_interval {
        if !matches!(fsync, FsyncPolicy::Interval(_)) {
            let (name, place) = match (&raw.fsync, fsync_kind) {
                (Some(f), Some(k)) => (
                    raw_fsync_name(k),
                    format!("on line {}", cx.src.position(f.span().start).line),
                ),
                _ => ("always", "by default".to_string()),
            };
            cx.error(
                Some(v.span()),
                "log.fsync_interval",
                format!(
                    "fsync_interval only applies with fsync = \"interval\", but fsync is \"{name}\" \
                     {place}: set log.fsync = \"interval\" to sync periodically, or remove \
                     log.fsync_interval"
                ),
            );
        }
    }

    let when_full = match raw.when_full.as_ref().map(|v| {
        cx.note("log.when_full", v);
        *v.get_ref()
    }) {
        None | Some(RawWhenFull::Block) => WhenFull::Block,
        Some(RawWhenFull::DropOldest) => WhenFull::DropOldest,
    };
    let append_timeout = cx.duration(
        "log.append_timeout",
        raw.append_timeout.as_ref(),
        d.append_timeout,
        None,
    );
    if let (WhenFull::DropOldest, Some(v)) = (when_full, &raw.append_timeout) {
        cx.warn(
            Some(v.span()),
            "log.append_timeout",
            "has no effect with when_full = \"drop_oldest\": appends never wait for space, the \
             oldest data is evicted instead; remove it or use when_full = \"block\"",
        );
    }
    let cursor_sync_interval = cx.duration(
        "log.cursor_sync_interval",
        raw.cursor_sync_interval.as_ref(),
        d.cursor_sync_interval,
        Some("cursors would be written continuously; a crash replays at most one interval of progress, so \"1s\" is plenty"),
    );

    let compression = match raw.compression.as_ref().map(|v| {
        cx.note("log.compression", v);
        *v.get_ref()
    }) {
        None | Some(RawCompression::Zstd) => Compression::Zstd {
            level: cx.count(
                "log.compression_level",
                raw.compression_level.as_ref(),
                1,
                1..=19,
            ) as i32,
        },
        Some(other) => {
            if let Some(v) = &raw.compression_level {
                cx.warn(
                    Some(v.span()),
                    "log.compression_level",
                    "has no effect unless compression = \"zstd\"; remove it",
                );
            }
            match other {
                RawCompression::Lz4 => Compression::Lz4,
                _ => Compression::None,
            }
        }
    };

    let options = LogOptions {
        segment_bytes,
        max_bytes,
        max_age,
        fsync,
        compression,
        when_full,
        append_timeout,
        cursor_sync_interval,
        io_hook: None,
    };
    // The log's own rules, in case they are stricter than ours. Reported
    // only when nothing more precise was.
    if !cx.has_errors() {
        if let Err(why) = options.validate() {
            let span = cx.span_of(&["log"]);
            cx.error(span, "log", format!("{why}; change the [log] settings"));
        }
    }
    options
}

fn raw_fsync_name(k: RawFsync) -> &'static str {
    match k {
        RawFsync::Always => "always",
        RawFsync::Interval => "interval",
        RawFsync::Never => "never",
    }
}
