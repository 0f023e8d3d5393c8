//! [`Settings::describe`]: the resolved pipeline in plain words, for
//! `holdfast check`. It states what the config *means* (bounds, what is lost
//! when, what is exposed), not just what it says.

use std::fmt::Write;

use super::settings::{LogFormat, Settings};
use super::sinks::SinkKind;
use super::sources::{FileStartAt, SourceKind};
use super::units::{format_duration, format_size};
use crate::seglog::{Compression as LogCompression, FsyncPolicy, WhenFull};
use crate::sinks::{Auth, Compression, HttpSinkOptions, OtlpEncoding, QuarantineFull};

/// The lines every network sink shares: batching, retries, credentials,
/// the quarantine.
fn describe_network(out: &mut String, o: &HttpSinkOptions) -> std::fmt::Result {
    let compression = match o.compression {
        Compression::Gzip => "gzip",
        Compression::None => "no compression",
    };
    let auth = match &o.auth {
        None => "no credentials".to_string(),
        Some(Auth::Basic {
            user,
            password_file,
        }) => format!(
            "basic auth as \"{user}\" (password in {})",
            password_file.display()
        ),
        Some(Auth::Bearer { token_file }) => {
            format!("a bearer token from {}", token_file.display())
        }
        Some(Auth::ApiKey { key_file }) => format!("an API key from {}", key_file.display()),
    };
    let in_flight = if o.adaptive_concurrency && o.concurrency > 1 {
        format!(
            "1 to {} request(s) in flight, adapting to the receiver",
            o.concurrency
        )
    } else {
        format!("{} request(s) in flight", o.concurrency)
    };
    writeln!(
        out,
        "    batches of up to {} events or {}, sent at least every {}; {in_flight}, \
         each within {}; {compression}; {auth}",
        o.batch_max_events,
        format_size(o.batch_max_bytes as u64),
        format_duration(o.batch_timeout),
        format_duration(o.request_timeout)
    )?;
    writeln!(
        out,
        "    the cursor moves only past events the receiver accepted (per event, not per request) \
         or that are quarantined"
    )?;
    writeln!(
        out,
        "    retries: connection errors, timeouts, 408/429/5xx and per-event 429 without limit, \
         waiting {} doubling up to {} (full jitter, Retry-After honoured; a probe each second \
         ends the wait once the receiver is back); an event the receiver asks to retry is tried \
         {} time(s), then quarantined; 401/403 keep every event and retry every {}-{}",
        format_duration(o.backoff_initial),
        format_duration(o.backoff_max),
        o.max_attempts,
        format_duration(o.backoff_max / 2),
        format_duration(o.backoff_max)
    )?;
    let full = match o.quarantine.when_full {
        QuarantineFull::Block => {
            "when full, the cursor stops at the next rejected event until there is room"
        }
        QuarantineFull::Drop => "when full, further rejected events are dropped and counted",
    };
    writeln!(
        out,
        "    events rejected for good go to the quarantine {} (at most {}; {full})",
        o.quarantine.dir.display(),
        format_size(o.quarantine.max_bytes)
    )?;
    if let Some(ca) = &o.ca_file {
        writeln!(
            out,
            "    trusts the CA certificates in {} besides the system's",
            ca.display()
        )?;
    }
    Ok(())
}

impl Settings {
    /// What this config will do: sources → log → sinks with their bounds,
    /// the fsync policy and its guarantee, the API and daemon settings, and
    /// the warnings. Several lines, ending with a newline.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_description(&mut out);
        out
    }

    fn write_description(&self, out: &mut String) -> std::fmt::Result {
        writeln!(out, "config: {}", self.config_file.display())?;
        writeln!(out, "data directory: {}", self.data_dir.display())?;
        if self.sources.is_empty() && self.sinks.is_empty() {
            writeln!(out)?;
            writeln!(
                out,
                "No sources and no sinks are configured: holdfast will start, serve the API and keep \
                 an empty log, but collect nothing. Add [sources.<name>] and [sinks.<name>] tables \
                 (see docs/configuration.md)."
            )?;
        }

        writeln!(out)?;
        writeln!(out, "sources ({}):", self.sources.len())?;
        if self.sources.is_empty() {
            writeln!(out, "  (none)")?;
        }
        for source in self.sources.values() {
            writeln!(out, "  {} ({})", source.name, source.kind.type_name())?;
            match &source.kind {
                SourceKind::File(f) => {
                    writeln!(out, "    tails {}", f.include.join(", "))?;
                    if !f.exclude.is_empty() {
                        writeln!(out, "    except {}", f.exclude.join(", "))?;
                    }
                    let start = match f.start_at {
                        FileStartAt::Beginning => "from their first line (backfill)",
                        FileStartAt::End => "from their end (only lines written from then on)",
                    };
                    writeln!(out, "    files found on the first start are read {start}")?;
                    writeln!(
                        out,
                        "    looks for new and rotated files every {}; keeps reading a rotated file until idle for {}; \
                         closes files idle for {}",
                        format_duration(f.scan_interval),
                        format_duration(f.rotate_wait),
                        format_duration(f.idle_close)
                    )?;
                    writeln!(
                        out,
                        "    lines up to {} (longer ones are truncated and marked); a last line without newline is sent \
                         after {} idle; files are told apart by their first {}",
                        format_size(f.max_line_bytes),
                        format_duration(f.line_idle_timeout),
                        format_size(f.fingerprint_bytes)
                    )?;
                    if let Some(m) = &f.multiline {
                        writeln!(
                            out,
                            "    multiline: a line matching '{}' starts an event, others continue it; \
                             an event is sent {} after its last line",
                            m.start_pattern.as_str(),
                            format_duration(m.timeout)
                        )?;
                    }
                }
                SourceKind::OtlpHttp(o) => {
                    let scheme = if o.tls.is_some() { "https" } else { "http" };
                    writeln!(out, "    receives OTLP/HTTP on {scheme}://{}", o.listen)?;
                    writeln!(
                        out,
                        "    bodies up to {} (compressed and decompressed); at most {} connections; \
                         headers within {}, whole requests within {}",
                        format_size(o.max_body_bytes),
                        o.max_connections,
                        format_duration(o.header_timeout),
                        format_duration(o.request_timeout)
                    )?;
                    match &o.bearer_token_file {
                        Some(p) => writeln!(
                            out,
                            "    clients must send the bearer token in {}",
                            p.display()
                        )?,
                        None => writeln!(out, "    no authentication")?,
                    }
                    if let Some(tls) = &o.tls {
                        writeln!(
                            out,
                            "    TLS with certificate {} and key {}",
                            tls.cert_file.display(),
                            tls.key_file.display()
                        )?;
                    }
                }
            }
        }

        let log = &self.log;
        writeln!(out)?;
        writeln!(out, "log: {}", self.log_dir().display())?;
        let age = match log.max_age {
            Some(a) => format!(
                "segments older than {} deleted whether read or not",
                format_duration(a)
            ),
            None => "no age limit".to_string(),
        };
        writeln!(
            out,
            "  at most {} on disk, in segments of {}; {age}",
            format_size(log.max_bytes),
            format_size(log.segment_bytes)
        )?;
        let policy = match log.fsync {
            FsyncPolicy::Always => "always".to_string(),
            FsyncPolicy::Interval(d) => format!("interval, every {}", format_duration(d)),
            FsyncPolicy::Never => "never".to_string(),
        };
        writeln!(out, "  fsync = {policy}: {}", log.fsync.guarantee())?;
        match log.compression {
            LogCompression::Zstd { level } => writeln!(
                out,
                "  compression = zstd (level {level}): each append is stored compressed, its shared parts once"
            )?,
            LogCompression::Lz4 => writeln!(
                out,
                "  compression = lz4: each append is stored compressed, its shared parts once"
            )?,
            LogCompression::None => writeln!(
                out,
                "  compression = none: each append is stored as it is, its shared parts once"
            )?,
        }
        match log.when_full {
            WhenFull::Block => writeln!(
                out,
                "  when full (block): nothing is dropped; sources wait up to {} for space, then push \
                 back (file tailing pauses, OTLP clients get 503/429 and retry); a stuck sink stops \
                 intake",
                format_duration(log.append_timeout)
            )?,
            WhenFull::DropOldest => writeln!(
                out,
                "  when full (drop_oldest): the oldest segments are deleted to make room; events a sink \
                 had not sent yet are lost and counted per sink in /metrics; intake never stops"
            )?,
        }
        writeln!(
            out,
            "  sink positions saved every {} (after a crash, at most that much is sent again)",
            format_duration(log.cursor_sync_interval)
        )?;

        writeln!(out)?;
        writeln!(out, "sinks ({}):", self.sinks.len())?;
        if self.sinks.is_empty() {
            writeln!(out, "  (none)")?;
        }
        for sink in self.sinks.values() {
            writeln!(
                out,
                "  {} ({}) <- {}",
                sink.name,
                sink.kind.type_name(),
                sink.inputs.join(", ")
            )?;
            match &sink.kind {
                SinkKind::File(f) => {
                    writeln!(out, "    writes NDJSON files to {}", f.dir.display())?;
                    writeln!(
                        out,
                        "    files up to {}; the oldest files are removed beyond {} in total (their events \
                         counted as dropped)",
                        format_size(f.max_file_bytes),
                        format_size(f.max_bytes)
                    )?;
                    writeln!(
                        out,
                        "    writes batches of up to {} events, at least every {}",
                        f.batch_max_events,
                        format_duration(f.batch_timeout)
                    )?;
                }
                SinkKind::OtlpHttp(o) => {
                    let enc = match o.encoding {
                        OtlpEncoding::Protobuf => "protobuf",
                        OtlpEncoding::Json => "JSON",
                    };
                    writeln!(
                        out,
                        "    exports OTLP/HTTP ({enc}) to {} (logs), {} (traces), {} (metrics)",
                        o.logs_url, o.traces_url, o.metrics_url
                    )?;
                    describe_network(out, &o.common)?;
                }
                SinkKind::Elasticsearch(o) => {
                    let urls: Vec<String> = o.endpoints.iter().map(|u| u.to_string()).collect();
                    writeln!(
                        out,
                        "    sends _bulk create requests to {} into index \"{}\" (_id = the event's \
                         idempotency key, so a resend is refused as a duplicate, not stored twice)",
                        urls.join(", "),
                        o.index.as_str()
                    )?;
                    describe_network(out, &o.common)?;
                }
                SinkKind::OpenObserve(o) => {
                    writeln!(
                        out,
                        "    sends JSON to {} (organization \"{}\", stream \"{}\")",
                        o.endpoint,
                        o.org,
                        o.stream.as_str()
                    )?;
                    describe_network(out, &o.common)?;
                }
            }
        }

        writeln!(out)?;
        let reach = if self.api.listen.ip().is_loopback() {
            "this machine only"
        } else {
            "reachable from the network"
        };
        writeln!(
            out,
            "api: http://{}/metrics, /healthz, /readyz ({reach})",
            self.api.listen
        )?;
        writeln!(
            out,
            "daemon: on stop, drains for up to {} (the shipped unit's TimeoutStopSec is {}s); systemd \
             watchdog {}",
            format_duration(self.daemon.shutdown_timeout),
            super::SYSTEMD_STOP_TIMEOUT.as_secs(),
            if self.daemon.watchdog { "pinged when the unit sets WatchdogSec" } else { "off" }
        )?;
        writeln!(
            out,
            "runtime: {} worker thread(s), {} malloc arena(s), {} (see \"Memory\" in \
             docs/configuration.md)",
            self.daemon.worker_threads(),
            self.daemon.malloc_arenas,
            match self.daemon.malloc_mmap_threshold {
                Some(t) => format!(
                    "allocations from {} in their own mappings",
                    format_size(t as u64)
                ),
                None => "glibc's own mmap threshold".to_string(),
            }
        )?;
        let format = match self.logging.format {
            LogFormat::Auto => "auto (plain lines for the journal, coloured on a terminal)",
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        };
        writeln!(
            out,
            "logging: level \"{}\" (RUST_LOG overrides it), format {format}",
            self.logging.level
        )?;

        if !self.warnings.is_empty() {
            writeln!(out)?;
            writeln!(out, "warnings ({}):", self.warnings.len())?;
            for w in &self.warnings {
                writeln!(out, "  {w}")?;
            }
        }
        Ok(())
    }
}
