//! What a sink's quarantine store (`quarantine.rs`) is opened with: where
//! rejected events go, how much room they get, and what happens when it is
//! full. Apart from the store, so that the store and the delivery kit that
//! writes to it (`delivery/quarantining.rs`) both read it without
//! importing each other.

use std::path::PathBuf;

/// Where rejected events go, and how much room they get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineOptions {
    /// `<data_dir>/quarantine/<sink>`.
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub when_full: QuarantineFull,
}

/// What a sink does with a rejected event when its quarantine is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuarantineFull {
    /// Keep it: the sink's cursor stops at it (later events are still sent,
    /// up to the sink's window) until the quarantine has room again; an
    /// alarm metric and an error log say so.
    Block,
    /// Drop it and count it in `holdfast_dropped_events_total`.
    Drop,
}
