//! The retry policy: what every answer means for every event
//! ([`classify.rs`](classify): the verdicts), and how long to wait before
//! trying again ([`backoff.rs`](backoff): the waits).
//!
//! [`Policy::classify`] is the one place where an outcome (no response, a
//! status, or a 2xx body as the protocol read it) becomes a [`Verdict`] per
//! event: delivered, duplicate (delivered earlier), retry, or reject. The
//! rules, from `DESIGN.md` promises 6-8 and issue 6:
//!
//! | outcome | verdict |
//! |---------|---------|
//! | connection error, timeout, reset | retry every event, without limit |
//! | 408, 429, 5xx | retry every event, without limit, honouring `Retry-After` (a 429 holds every batch, as an outage does, for a transport that needs its events in time order) |
//! | 401, 403 | hold: keep every event, retry slowly, alarm (a key expired) |
//! | 404, 405, 3xx | hold: the endpoint is wrong, which is configuration too |
//! | 413 | split the request in two; a single event too large is rejected |
//! | a refusal of some unknown events (`SomeRefused`: remote write's too old samples) | split the request in two (`refused_split`); a single event refused is rejected under the transport's reason |
//! | other 4xx | reject every event in the request |
//! | 2xx, body accepts all | delivered |
//! | 2xx, per-item answers | 2xx delivered, 409 duplicate, 429 retry (not counted: pushback), 408/5xx retry (counted), others rejected with the item's error |
//! | 2xx, partial success without saying which | reject the whole request ("partially rejected: N of M; receiver did not say which") |
//! | 2xx, unreadable body | retry (counted): a 200 is not a success until the body says so |
//! | 2xx, body longer than the request's limit (`http::response_limit`) | retry every event (`response_too_large`), without limit: the receiver may have stored them, and only it is at fault |
//!
//! A *counted* retry adds one to the event's tally; at `max_attempts` the
//! event is rejected with "retries exhausted". Whole-request transient
//! failures and per-item 429s are never counted: the log's own bounds limit
//! the backlog, and dropping data because a receiver was down or busy is
//! what holdfast exists to avoid.
//!
//! Waiting (the runtime's retry queue keeps the events meanwhile, see
//! `retry_queue.rs`): exponential backoff with full jitter (a uniform draw between
//! zero and `min(backoff_max, backoff_initial × 2^(n-1))` for the n-th
//! consecutive failure), never less than a `Retry-After` the receiver sent
//! (seconds or an HTTP date, capped at [`RETRY_AFTER_CAP`](backoff::RETRY_AFTER_CAP) or `backoff_max`,
//! whichever is larger). Held requests wait between half and all of
//! `backoff_max`.

mod backoff;
mod classify;
mod policy;

pub(crate) use backoff::parse_retry_after;
pub(crate) use classify::{Decision, Outcome, Rejection, Verdict};
pub(crate) use policy::Policy;
