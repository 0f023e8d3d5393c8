//! The rows a whole-run throughput phase prints (file and OTLP), against
//! the targets.

use crate::agent::metric;
use crate::measure::{ProcSample, RssPeaks};
use crate::table::{thousands, Table};

pub(crate) const TARGET_LINES_PER_S: f64 = 600_000.0;
pub(crate) const TARGET_PEAK_RSS_MIB: f64 = 20.0;
pub(crate) const TARGET_STEADY_RSS_MIB: f64 = 12.0;
/// Bytes written per input byte: file lines with zstd (1.15 with
/// `compression = "none"`, set through HOLDFAST_E2E_LOG_TOML)...
pub(crate) const TARGET_WRITE_AMP_LINES: f64 = 0.30;
/// ...and OTLP records, per byte of protobuf request body.
pub(crate) const TARGET_WRITE_AMP_OTLP: f64 = 0.5;

/// Rows shared by the phases that measure a whole run.
#[allow(clippy::too_many_arguments)]
pub(crate) fn throughput_rows(
    table: &mut Table,
    what: &str,
    events: u64,
    input_bytes: u64,
    secs: f64,
    p: ProcSample,
    throughput_target: Option<f64>,
    metrics: &str,
    rss: &RssPeaks,
    clock: &str,
    write_target: f64,
) {
    let eps = events as f64 / secs;
    table.row(
        &format!("wall time, {clock} to the last event accepted"),
        format!("{secs:.2} s"),
        String::new(),
        None,
    );
    table.row(
        &format!("{what}/s"),
        thousands(eps),
        throughput_target.map_or(String::new(), |t| format!(">= {}", thousands(t))),
        throughput_target.map(|t| eps >= t),
    );
    table.row(
        "MB/s of input",
        format!("{:.1}", input_bytes as f64 / secs / 1e6),
        String::new(),
        None,
    );
    table.row(
        &format!("CPU s per million {what} (agent, user+sys)"),
        format!(
            "{:.2}  ({:.1} s in all, {:.0}% of one core)",
            p.cpu_s / (events as f64 / 1e6),
            p.cpu_s,
            p.cpu_s / secs * 100.0
        ),
        throughput_target.map_or(String::new(), |_| "<= 2.00".into()),
        throughput_target.map(|_| p.cpu_s / (events as f64 / 1e6) <= 2.0),
    );
    let rss_mib = p.hwm_kib as f64 / 1024.0;
    table.row(
        "peak RSS (VmHWM)",
        format!("{rss_mib:.1} MiB  ({})", rss.describe()),
        format!("<= {TARGET_PEAK_RSS_MIB} MiB"),
        Some(rss_mib <= TARGET_PEAK_RSS_MIB),
    );
    let wa = p.write_bytes as f64 / input_bytes as f64;
    table.row(
        "bytes written to disk per byte ingested",
        format!(
            "{wa:.2}  ({:.1} MiB written, {:.1} MiB cancelled)",
            p.write_bytes as f64 / (1 << 20) as f64,
            p.cancelled_write_bytes as f64 / (1 << 20) as f64
        ),
        format!("<= {write_target}"),
        Some(wa <= write_target),
    );
    // What the log itself wrote, to tell the envelope's size from the rest
    // (page rewrites at each sync, cursors, checkpoints).
    let log_written = metric(metrics, "holdfast_log_written_bytes_total");
    let appended = metric(metrics, "holdfast_log_appended_events_total");
    let syncs = metric(metrics, "holdfast_log_fsync_duration_seconds_count");
    let sync_s = metric(metrics, "holdfast_log_fsync_duration_seconds_sum");
    if log_written > 0.0 {
        table.detail(format!(
            "  the log: {:.0} events appended, {:.1} MiB of frames ({:.0} bytes per event, {:.2} per input byte); \
             {:.0} fdatasyncs ({:.0} events each, {:.2} ms average); other writes {:.2} per input byte",
            appended,
            log_written / (1 << 20) as f64,
            log_written / appended.max(1.0),
            log_written / input_bytes as f64,
            syncs,
            appended / syncs.max(1.0),
            sync_s * 1000.0 / syncs.max(1.0),
            (p.write_bytes as f64 - log_written).max(0.0) / input_bytes as f64
        ));
    }
    let reqs = metric(metrics, "holdfast_sink_requests_total");
    let sent = metric(metrics, "holdfast_sink_sent_events_total");
    let retries = metric(metrics, "holdfast_sink_retries_total");
    let lat = metric(metrics, "holdfast_sink_request_duration_seconds_sum");
    let lat_n = metric(metrics, "holdfast_sink_request_duration_seconds_count");
    if reqs > 0.0 {
        table.detail(format!(
            "  the sink: {:.0} events in {:.0} requests ({:.0} each, {:.1} ms average), {:.0} retries",
            sent,
            reqs,
            sent / reqs,
            lat * 1000.0 / lat_n.max(1.0),
            retries
        ));
    }
}
