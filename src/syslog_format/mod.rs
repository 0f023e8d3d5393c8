//! The syslog wire-format kit: what every reader of syslog priorities and
//! messages shares, below the components that read them (the `syslog` and
//! `journald` sources, the `syslog` parse step). Imports only the other
//! bottom-layer rooms: `calendar` (timestamps) and `event` (the record
//! fields a message maps onto).
//!
//! * `parse/` — RFC 5424 / 3164 messages → their parts: a pure function,
//!   no I/O, fuzzed.
//! * `record.rs` — a parsed message → log record fields, one mapping for
//!   the source's batches and the parse step's values.
//! * `severity.rs` — a syslog severity (0-7) as an OpenTelemetry severity.

pub mod parse;
pub mod record;
pub mod severity;
