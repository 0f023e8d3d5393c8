//! The TOML sections the phases build holdfast's config from, with the
//! environment's extra settings (`HOLDFAST_E2E_LOG_TOML`,
//! `HOLDFAST_E2E_SINK_TOML`, and `HOLDFAST_E2E_DAEMON_TOML` in
//! [`crate::agent`]) appended.

use std::net::SocketAddr;
use std::path::Path;

/// Extra TOML lines from the environment (`\n` or `;` between keys), for
/// trying settings without editing the bench.
pub(crate) fn extra_toml(var: &str) -> String {
    std::env::var(var)
        .map(|v| v.replace(';', "\n") + "\n")
        .unwrap_or_default()
}

/// Everything else at its default (64 MiB segments).
pub(crate) fn log_section(max_bytes: u64) -> String {
    format!(
        "[log]\nmax_bytes = \"{}MiB\"\nfsync = \"always\"\nwhen_full = \"block\"\n{}\n",
        max_bytes >> 20,
        extra_toml("HOLDFAST_E2E_LOG_TOML")
    )
}

/// Sinks run with their defaults (batches of 500 events, 2 requests in
/// flight) except for compression. The comparison with syslog-ng
/// (`batch-lines(1000)`, `workers(2)`) sets
/// `HOLDFAST_E2E_SINK_TOML='batch_max_events = 1000'`.
pub(crate) fn sink_tuning(gzip: bool) -> String {
    format!(
        "compression = \"{}\"\n{}",
        if gzip { "gzip" } else { "none" },
        extra_toml("HOLDFAST_E2E_SINK_TOML")
    )
}

pub(crate) fn file_source(input: &Path) -> String {
    format!(
        "[sources.files]\ntype = \"file\"\ninclude = [\"{}/*.log\"]\nstart_at = \"beginning\"\n\n",
        input.display()
    )
}

pub(crate) fn es_sink(receiver: SocketAddr, gzip: bool) -> String {
    format!(
        "[sinks.search]\ntype = \"elasticsearch\"\ninputs = [\"files\"]\nendpoint = \"http://{receiver}\"\n{}\n",
        sink_tuning(gzip)
    )
}
