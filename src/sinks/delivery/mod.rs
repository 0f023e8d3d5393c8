//! The sinks' delivery kit (see `sinks/mod.rs` for the map).

mod deliver;
pub(crate) mod item;
pub(crate) mod keys;
mod limit;
pub mod options;
mod quarantining;
mod requeue;
pub(crate) mod retry;
mod retry_queue;
pub(crate) mod runtime;
mod shared;
pub(crate) mod transport;
mod watermark;
