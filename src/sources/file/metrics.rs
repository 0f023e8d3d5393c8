//! The `file` sources' own metric families (registered through the
//! component contract, see `src/metrics/groups.rs`), the reasons they count
//! by, and the series each `file` source creates at 0.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{families, zero, SourceLabels, SourceReasonLabels};

families! {
    /// Per-source figures of `file` sources (`src/sources/file/`).
    pub struct FileSourceMetrics {
        /// Files a file source follows (matched by its globs)
        pub files_watched: Family<SourceLabels, Gauge> = "holdfast_file_source_files_watched";
        /// Files a file source holds open
        pub files_open: Family<SourceLabels, Gauge> = "holdfast_file_source_open_files";
        /// Lines a file source read (before multiline joining)
        pub lines: Family<SourceLabels, Counter> = "holdfast_file_source_lines";
        /// Bytes a file source read from files
        pub bytes: Family<SourceLabels, Counter> = "holdfast_file_source_read_bytes";
        /// Lines (or multiline events) cut at max_line_bytes and marked log.record.truncated
        pub lines_truncated: Family<SourceLabels, Counter> = "holdfast_file_source_truncated_lines";
        /// Lines with invalid UTF-8, kept lossily and marked log.record.invalid_utf8
        pub lines_invalid_utf8: Family<SourceLabels, Counter> = "holdfast_file_source_invalid_utf8_lines";
        /// Followed files renamed, deleted or moved out of the globs
        pub rotations: Family<SourceLabels, Counter> = "holdfast_file_source_rotations";
        /// Followed files truncated in place (copytruncate); each starts a new generation
        pub truncations: Family<SourceLabels, Counter> = "holdfast_file_source_truncations";
        /// Failed opens and reads of matched files
        pub read_errors: Family<SourceLabels, Counter> = "holdfast_file_source_read_errors";
        /// Matched paths not read, by reason (symlink_outside, symlink, not_regular); each
        /// counted once while it stays so
        pub skipped: Family<SourceReasonLabels, Counter> = "holdfast_file_source_skipped_files";
        /// Seconds a file source's tailer thread has spent in its current step (0 while it
        /// waits); past 30 the source is listed in /readyz as stuck
        pub tailer_stalled: Family<SourceLabels, Gauge> = "holdfast_file_source_tailer_stalled_seconds";
        /// File source checkpoints that failed to write or were found damaged
        pub checkpoint_errors: Family<SourceLabels, Counter> = "holdfast_file_source_checkpoint_errors";
    }
}

/// Every `reason` of `holdfast_file_source_skipped_files_total`: what
/// `src/sources/file/open.rs` refuses to read.
pub const FILE_SKIP_REASONS: [&str; 3] = ["symlink_outside", "symlink", "not_regular"];

/// Every `reason` of `holdfast_dropped_events_total` for a `file` source (a
/// line too large for one log append).
pub const FILE_SOURCE_DROP_REASONS: &[&str] = &["too_large"];

impl FileSourceMetrics {
    /// Every counter of a `file` source.
    pub fn counters(&self) -> [&Family<SourceLabels, Counter>; 8] {
        [
            &self.lines,
            &self.bytes,
            &self.lines_truncated,
            &self.lines_invalid_utf8,
            &self.rotations,
            &self.truncations,
            &self.read_errors,
            &self.checkpoint_errors,
        ]
    }
}

impl FileSourceMetrics {
    /// The series of the `file` source `name`, at 0.
    pub fn declare(&self, name: &str) {
        let labels = SourceLabels {
            source: name.to_string(),
        };
        zero(&self.counters(), &labels);
        // Its tailer's heartbeat: 0 until a step lasts.
        drop(self.tailer_stalled.get_or_create(&labels));
        for reason in FILE_SKIP_REASONS {
            let labels = SourceReasonLabels {
                source: name.to_string(),
                reason: reason.to_string(),
            };
            zero(&[&self.skipped], &labels);
        }
    }
}
