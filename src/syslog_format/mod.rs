//! The syslog wire-format kit: what every reader of syslog priorities and
//! messages shares, below the components that read them (the `syslog` and
//! `journald` sources, the `syslog` parse step). Imports nothing of
//! holdfast's.
//!
//! * `severity.rs` — a syslog severity (0-7) as an OpenTelemetry severity.
//!
//! Issue 28 moves the RFC 5424 / 3164 parser here from
//! `sources/syslog/parse/`.

pub mod severity;
