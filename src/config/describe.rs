//! [`Settings::describe`]: the resolved pipeline in plain words, for
//! `holdfast check`. It states what the config *means* (bounds, what is lost
//! when, what is exposed), not just what it says. Each source and sink
//! writes its own lines (its `config.rs`).

use std::fmt::Write;

use super::settings::{LogFormat, Settings};
use crate::checking::units::{format_duration, format_size};
use crate::seglog::{Compression as LogCompression, FsyncPolicy, WhenFull};

impl Settings {
    /// What this config will do: sources → log → sinks with their bounds,
    /// the fsync policy and its guarantee, the API and daemon settings, and
    /// the warnings. Several lines, ending with a newline.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_description(&mut out);
        crate::checking::effective::redact(&out, &self.secrets)
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

        section_head(out, "sources", self.sources.len())?;
        for source in self.sources.values() {
            writeln!(out, "  {} ({})", source.name, source.kind.type_name())?;
            source.kind.component().describe(out)?;
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
            "  sink positions written after each batch and synced every {} (after a kill or \
             crash, what was in flight is sent again; after a power cut, also up to {} of \
             progress)",
            format_duration(log.cursor_sync_interval),
            format_duration(log.cursor_sync_interval)
        )?;

        section_head(out, "sinks", self.sinks.len())?;
        for sink in self.sinks.values() {
            writeln!(
                out,
                "  {} ({}) <- {}",
                sink.name,
                sink.kind.type_name(),
                sink.inputs.join(", ")
            )?;
            sink.kind.component().describe(out)?;
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

/// A blank line, then `sources (2):` and, for none, a line that says so.
fn section_head(out: &mut String, what: &str, count: usize) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out, "{what} ({count}):")?;
    if count == 0 {
        writeln!(out, "  (none)")?;
    }
    Ok(())
}
