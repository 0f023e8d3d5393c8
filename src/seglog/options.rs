//! How a log is opened: its bounds, its durability policy and what happens
//! when it is full.

use std::sync::Arc;
use std::time::Duration;

use super::block::Compression;
use super::io::IoHook;

/// When an append is acknowledged, and therefore what survives a crash.
///
/// | policy     | an append returns after          | process crash (kill -9, OOM) | power cut / kernel panic            |
/// |------------|----------------------------------|------------------------------|-------------------------------------|
/// | `Always`   | `write` + `fdatasync`            | nothing acknowledged lost    | nothing acknowledged lost           |
/// | `Interval` | `write` (sync every `interval`)  | nothing acknowledged lost    | up to `interval` of acks lost       |
/// | `Never`    | `write` (the kernel decides)     | nothing acknowledged lost    | whatever the kernel had not flushed |
///
/// After a power cut under the weaker policies, recovery still guarantees that
/// no torn or corrupted record is delivered: it just cannot bring back what
/// never reached the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Acknowledge only after `fdatasync`; concurrent appends share one sync.
    Always,
    /// Acknowledge after `write`; `fdatasync` every given interval.
    Interval(Duration),
    /// Acknowledge after `write`; sync only when a segment is sealed or the
    /// log is closed.
    Never,
}

impl FsyncPolicy {
    /// Whether directory entries (segment creation and deletion) are synced.
    pub(crate) fn syncs_directory(self) -> bool {
        !matches!(self, FsyncPolicy::Never)
    }

    /// A plain-words statement of what survives under this policy, for
    /// `holdfast check` and the logs.
    pub fn guarantee(self) -> String {
        match self {
            FsyncPolicy::Always => "an append is acknowledged after fdatasync: acknowledged data survives \
                 kill -9 and power loss"
                .to_string(),
            FsyncPolicy::Interval(d) => format!(
                "an append is acknowledged after write and synced every {} ms: acknowledged data survives \
                 kill -9; a power cut may lose up to the last {} ms of acknowledged data",
                d.as_millis(),
                d.as_millis()
            ),
            FsyncPolicy::Never => "an append is acknowledged after write and the kernel decides when to flush: \
                 acknowledged data survives kill -9; a power cut may lose anything not yet flushed"
                .to_string(),
        }
    }
}

/// What an append does when the log has reached `max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Appends wait for consumers to free space, up to the caller's timeout,
    /// then fail with [`LogError::Full`](super::LogError::Full) so the source
    /// can push back on its own input.
    Block,
    /// The oldest sealed segments are deleted (never the active one) and
    /// every event a consumer had not finished is counted as evicted.
    DropOldest,
}

/// Options for [`Log::open`](super::Log::open).
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// Size at which the active segment is sealed and a new one started.
    pub segment_bytes: u64,
    /// Bound on the total size of all segment files. Must be at least twice
    /// `segment_bytes`, since the active segment is never evicted.
    pub max_bytes: u64,
    /// Sealed segments whose newest event is older than this are deleted,
    /// whatever the consumers' positions. `None` keeps data regardless of age.
    pub max_age: Option<Duration>,
    /// Durability of an acknowledged append.
    pub fsync: FsyncPolicy,
    /// How batches are compressed on disk.
    pub compression: Compression,
    /// Behaviour at `max_bytes`.
    pub when_full: WhenFull,
    /// How long [`Log::append`](super::Log::append) waits for space under
    /// [`WhenFull::Block`] before failing with `Full`.
    pub append_timeout: Duration,
    /// How often committed cursors are written to disk. A crash loses at most
    /// this much cursor progress, which shows up as redelivered events.
    pub cursor_sync_interval: Duration,
    /// Test seam: sees (and may fail) every write, sync, creation, removal
    /// and resize in the log directory; see `seglog/io.rs`. `None` in
    /// production, where it costs one branch per group commit.
    #[doc(hidden)]
    pub io_hook: Option<Arc<dyn IoHook>>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 << 20,
            max_bytes: 1 << 30,
            max_age: None,
            fsync: FsyncPolicy::Always,
            compression: Compression::default(),
            when_full: WhenFull::Block,
            append_timeout: Duration::from_secs(5),
            cursor_sync_interval: Duration::from_secs(1),
            io_hook: None,
        }
    }
}

impl LogOptions {
    /// Checks the options against each other; returns a message naming the
    /// option to change.
    pub fn validate(&self) -> Result<(), String> {
        use super::format::{FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};
        let min_segment = (SEGMENT_HEADER_LEN + FRAME_HEADER_LEN + 64) as u64;
        if self.segment_bytes < min_segment {
            return Err(format!(
                "segment size {} bytes is too small: it must be at least {min_segment} bytes",
                self.segment_bytes
            ));
        }
        if self.segment_bytes > u32::MAX as u64 {
            return Err(format!(
                "segment size {} bytes is too large: at most {} bytes (4 GiB)",
                self.segment_bytes,
                u32::MAX
            ));
        }
        if self.max_bytes < 2 * self.segment_bytes {
            return Err(format!(
                "max_bytes ({}) must be at least twice the segment size ({}): the active segment is never evicted",
                self.max_bytes, self.segment_bytes
            ));
        }
        if let FsyncPolicy::Interval(d) = self.fsync {
            if d.is_zero() {
                return Err(
                    "fsync interval must be greater than zero (use fsync = \"always\")".into(),
                );
            }
        }
        if self.cursor_sync_interval.is_zero() {
            return Err("cursor sync interval must be greater than zero".into());
        }
        Ok(())
    }
}
