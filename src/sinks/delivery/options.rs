//! What the delivery runtime runs with: the keys every network sink
//! shares for batching, concurrency, retries and the quarantine
//! (validated settings, built by `network_config/`; tests and benchmarks
//! build them directly). What a transport needs besides (an endpoint,
//! credentials, TLS files) is in the sink's own options.

use std::path::PathBuf;
use std::time::Duration;

use crate::sinks::quarantine_options::{QuarantineFull, QuarantineOptions};

/// Options every network sink shares, whatever its transport.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryOptions {
    /// Source names whose events this sink sends.
    pub inputs: Vec<String>,
    /// Most events in one request.
    pub batch_max_events: usize,
    /// About the most bytes of events (as stored in the log) in one request.
    pub batch_max_bytes: usize,
    /// A request is sent at the latest this long after its first event was
    /// read.
    pub batch_timeout: Duration,
    /// Requests in flight at once (at least 1); with `adaptive_concurrency`,
    /// the most.
    pub concurrency: usize,
    /// Whether the requests in flight follow the receiver (additive
    /// increase, multiplicative decrease between 1 and `concurrency`).
    pub adaptive_concurrency: bool,
    /// Time allowed for one request, from connecting to the end of the
    /// answer (NATS: for each ack).
    pub request_timeout: Duration,
    /// Answers asking for a retry of an event (per-item 429/5xx, an
    /// unreadable 200) before it is quarantined as "retries exhausted".
    pub max_attempts: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub quarantine: QuarantineOptions,
    /// A hash of the config this runs with, stored with quarantined events.
    pub config_hash: String,
    /// How often the quarantine's replay inbox is checked.
    pub replay_scan_interval: Duration,
}

/// After a full batch, how long reading may find nothing new before the
/// batch forming goes without waiting out `batch_timeout`: the tail of a
/// burst (a backlog drained after an outage, a file read to its end) is
/// at the receiver now rather than a second later. A trickle never fills a
/// batch, so it keeps its few large requests; a steady flow that fills
/// batches reads again within milliseconds (a group commit), so it is not
/// cut short; a flow with pauses longer than this costs at most one
/// smaller request per full one.
pub(crate) const BURST_TAIL_LULL: Duration = Duration::from_millis(50);

/// Defaults, shared with the config's documentation and checks.
pub mod defaults {
    use std::time::Duration;
    pub const BATCH_MAX_EVENTS: u64 = 500;
    pub const BATCH_MAX_BYTES: u64 = 5 << 20;
    pub const BATCH_TIMEOUT: Duration = Duration::from_secs(1);
    pub const CONCURRENCY: u64 = 2;
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
    pub const MAX_ATTEMPTS: u64 = 5;
    pub const BACKOFF_INITIAL: Duration = Duration::from_millis(500);
    pub const BACKOFF_MAX: Duration = Duration::from_secs(60);
    pub const QUARANTINE_MAX_BYTES: u64 = 256 << 20;
    pub const REPLAY_SCAN_INTERVAL: Duration = Duration::from_secs(5);
}

impl DeliveryOptions {
    /// Defaults for everything but the inputs and the quarantine directory.
    pub fn new(inputs: Vec<String>, quarantine_dir: PathBuf) -> DeliveryOptions {
        use defaults as d;
        DeliveryOptions {
            inputs,
            batch_max_events: d::BATCH_MAX_EVENTS as usize,
            batch_max_bytes: d::BATCH_MAX_BYTES as usize,
            batch_timeout: d::BATCH_TIMEOUT,
            concurrency: d::CONCURRENCY as usize,
            adaptive_concurrency: true,
            request_timeout: d::REQUEST_TIMEOUT,
            max_attempts: d::MAX_ATTEMPTS as u32,
            backoff_initial: d::BACKOFF_INITIAL,
            backoff_max: d::BACKOFF_MAX,
            quarantine: QuarantineOptions {
                dir: quarantine_dir,
                max_bytes: d::QUARANTINE_MAX_BYTES,
                when_full: QuarantineFull::Block,
            },
            config_hash: String::new(),
            replay_scan_interval: d::REPLAY_SCAN_INTERVAL,
        }
    }
}
