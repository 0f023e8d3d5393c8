//! The sinks' delivery kit: what every network sink runs on, whatever its
//! transport. A sink brings a [`transport::Transport`] (how a request is
//! built, sent and judged) and its [`options::DeliveryOptions`]; the kit
//! reads the log, batches, sends up to the adaptive limit, retries,
//! quarantines and commits.
//!
//! | file | concept |
//! |------|---------|
//! | `runtime.rs` | the consumer, batching by events/bytes/time, delivery tasks up to the limit, the window, commits, the replay inbox |
//! | `deliver.rs` | one batch on its way: send, classify, hand back what needs resending (same ids), split on 413, quarantine |
//! | `shared.rs` | what the delivery tasks of a sink share (transport, policy, quarantine, metric handles, channels) and hand back (`Back`) |
//! | `item.rs` | an event on its way: where it came from, as kept between sends, as handed to the transport |
//! | `transport.rs` | the seam: `Transport` (prepare, send, judge) and the `Answer` it gives |
//! | `retry/` | the retry policy (`policy.rs`): per-event verdicts for every outcome (`classify.rs`), backoff with full jitter and `Retry-After` (`backoff.rs`) |
//! | `retry_queue.rs` | events waiting to be sent again (not-before times, drawn ahead of new reads), the probe and the backoff reset after an outage |
//! | `requeue.rs` | what an answer hands back: retries with their wait, the receiver down, the signal for the limit |
//! | `quarantining.rs` | rejected events into the quarantine, parked while it is full |
//! | `limit.rs` | adaptive concurrency: additive increase, multiplicative decrease of the requests in flight on pushback and rising latency |
//! | `watermark.rs` | the contiguous-completion watermark: the cursor moves only to the lowest unfinished event |
//! | `keys.rs` | idempotency keys |
//! | `options.rs` | the options the runtime runs with (batching, concurrency, retries, quarantine) |
//! | `turn.rs` | batches that start in the order they were formed, for transports that ask for it |
//!
//! Imports point down this list's dependency order and never round:
//! `item`, `transport` and `turn` at the bottom; `retry`, `retry_queue`, `limit`,
//! `watermark` on them; `shared` above those; `quarantining` and `requeue`
//! on `shared`; `deliver` on them; `runtime` on top. Nothing here imports
//! a transport or a sink.

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
mod turn;
mod watermark;
