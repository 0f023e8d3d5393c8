//! Log output through `tracing`: readable on a terminal, JSON lines for log
//! shippers, and understood by the journal under systemd.
//!
//! Under the journal (`JOURNAL_STREAM` names stderr, see
//! [`systemd::under_journal`]) each line starts with its sd-daemon priority
//! (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug and trace), so that
//! `journalctl -p warning` works, and carries no timestamp (the journal adds
//! its own). Anywhere else lines keep their timestamps, terminal or not.
//!
//! Warnings and errors repeated from one callsite with one message are
//! rate-limited ([`Limiter`]): the first [`BURST`] of a window (a minute)
//! pass, the rest are counted, and the next line after the window says
//! `… N more in the last minute` (a dead receiver retried every few hundred
//! milliseconds would otherwise fill the journal). `RUST_LOG` overrides the
//! configured level.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LoggingSettings};
use crate::daemon::systemd;

/// Lines of one callsite and message let through per window.
pub const BURST: u32 = 5;
/// The window of the limit, unless `HOLDFAST_LOG_REPEAT_WINDOW` (a duration
/// like `2s`, meant for tests) says otherwise.
const WINDOW: Duration = Duration::from_secs(60);
/// Callsite-and-message pairs tracked at once: the table's memory bound.
/// Beyond it, a new pair is let through unlimited until a window ends.
const MAX_KEYS: usize = 256;
/// Messages are kept (for the count line) up to this many bytes.
const MAX_MESSAGE: usize = 200;

/// Installs the global subscriber. The level is a level name or an
/// `EnvFilter` directive such as `info,holdfast::seglog=debug`.
pub fn init(settings: &LoggingSettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let window = std::env::var("HOLDFAST_LOG_REPEAT_WINDOW")
        .ok()
        .and_then(|w| humantime::parse_duration(&w).ok())
        .unwrap_or(WINDOW);
    let limiter = Mutex::new(Limiter::new(window));
    let journal = systemd::under_journal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match settings.format {
        LogFormat::Json => builder
            .fmt_fields(format::JsonFields::new())
            .event_format(Lines {
                inner: plain().json(),
                style: Style::Json,
                limiter,
            })
            .try_init(),
        _ if journal => builder
            .with_ansi(false)
            .event_format(Lines {
                inner: journal_inner(),
                style: Style::Journal,
                limiter,
            })
            .try_init(),
        f => builder
            .with_ansi(f == LogFormat::Auto && std::io::stderr().is_terminal())
            .event_format(Lines {
                inner: plain(),
                style: Style::Text,
                limiter,
            })
            .try_init(),
    };
    // A subscriber already installed (tests) is not an error.
    let _ = result;
}

fn plain() -> format::Format {
    format::Format::default()
}

/// Under the journal the level is written with the priority, unpadded: the
/// stock format pads `INFO` to ` INFO`, and the journal would keep that
/// space at the start of the message.
fn journal_inner() -> format::Format<format::Full, ()> {
    plain().without_time().with_level(false)
}

/// The sd-daemon priority of a level (`sd-daemon.h`).
pub fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `<N>` first, no timestamp.
    Journal,
    /// A timestamp first.
    Text,
    /// One JSON object a line.
    Json,
}

/// The event format: `inner`'s line, after the count lines of windows that
/// ended and the journal priority, or nothing for a line over the limit.
struct Lines<F> {
    inner: F,
    style: Style,
    limiter: Mutex<Limiter>,
}

impl<S, N, F> FormatEvent<S, N> for Lines<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let now = Instant::now();
        let (pass, ended) = {
            // A poisoned table (a panic while formatting) limits nothing.
            let Ok(mut limiter) = self.limiter.lock() else {
                return self.write(ctx, writer, event);
            };
            let ended = limiter.sweep(now);
            let pass = if *meta.level() <= Level::WARN {
                let mut v = MessageOf(String::new());
                event.record(&mut v);
                let key = Key {
                    callsite: std::ptr::from_ref(meta) as usize,
                    message: v.0,
                };
                limiter.check(key, *meta.level(), meta.target(), now)
            } else {
                true
            };
            (pass, ended)
        };
        for r in &ended {
            self.repeat_line(&mut writer, r)?;
        }
        if pass {
            self.write(ctx, writer, event)
        } else {
            Ok(())
        }
    }
}

impl<F> Lines<F> {
    fn write<S, N>(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
        F: FormatEvent<S, N>,
    {
        if self.style == Style::Journal {
            let level = event.metadata().level();
            write!(writer, "<{}>{} ", priority(level), level.as_str())?;
        }
        self.inner.format_event(ctx, writer.by_ref(), event)
    }

    /// The line that counts what a window held back.
    fn repeat_line(&self, w: &mut Writer<'_>, r: &Repeated) -> fmt::Result {
        let message = format!(
            "… {} more in the last {}: {}",
            r.count,
            window_words(r.window),
            r.message
        );
        match self.style {
            Style::Json => {
                let line = serde_json::json!({
                    "level": r.level.as_str(),
                    "fields": { "message": message, "repeated": r.count },
                    "target": r.target,
                });
                writeln!(w, "{line}")
            }
            Style::Journal => writeln!(
                w,
                "<{}>{} {}: {message}",
                priority(&r.level),
                r.level.as_str(),
                r.target
            ),
            Style::Text => {
                SystemTime.format_time(w)?;
                writeln!(w, " {:>5} {}: {message}", r.level.as_str(), r.target)
            }
        }
    }
}

fn window_words(d: Duration) -> String {
    if d == Duration::from_secs(60) {
        "minute".into()
    } else {
        humantime::format_duration(d).to_string()
    }
}

/// The `message` field of an event, as it is printed.
struct MessageOf(String);

impl Visit for MessageOf {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
            if self.0.len() > MAX_MESSAGE {
                let mut cut = MAX_MESSAGE;
                while !self.0.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.0.truncate(cut);
            }
        }
    }
}

/// One callsite (the address of its `'static` metadata) and message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub callsite: usize,
    pub message: String,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    passed: u32,
    held: u64,
    level: Level,
    target: &'static str,
}

/// What a window that ended held back: the count line's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeated {
    pub count: u64,
    pub message: String,
    pub level: Level,
    pub target: &'static str,
    pub window: Duration,
}

/// The rate limit over (callsite, message) pairs: [`BURST`] lines per
/// window each, the rest counted. At most [`MAX_KEYS`] pairs are tracked.
#[derive(Debug)]
pub struct Limiter {
    window: Duration,
    keys: HashMap<Key, Window>,
    /// When windows were last looked over for their end; at most once a
    /// second (or window), so that a line costs one hash lookup.
    swept: Option<Instant>,
}

impl Limiter {
    pub fn new(window: Duration) -> Limiter {
        Limiter {
            window,
            keys: HashMap::new(),
            swept: None,
        }
    }

    /// Whether a line of `key` may be written at `now`.
    pub fn check(&mut self, key: Key, level: Level, target: &'static str, now: Instant) -> bool {
        if let Some(w) = self.keys.get_mut(&key) {
            if w.passed < BURST {
                w.passed += 1;
                return true;
            }
            w.held += 1;
            return false;
        }
        if self.keys.len() >= MAX_KEYS {
            return true;
        }
        self.keys.insert(
            key,
            Window {
                start: now,
                passed: 1,
                held: 0,
                level,
                target,
            },
        );
        true
    }

    /// Ends the windows older than the window length: their pairs are
    /// forgotten (the table's room comes back), and those that held lines
    /// back are returned for their count lines.
    pub fn sweep(&mut self, now: Instant) -> Vec<Repeated> {
        let every = self.window.min(Duration::from_secs(1));
        if self
            .swept
            .is_some_and(|t| now.saturating_duration_since(t) < every)
        {
            return Vec::new();
        }
        self.swept = Some(now);
        let window = self.window;
        let mut out = Vec::new();
        self.keys.retain(|k, w| {
            if now.saturating_duration_since(w.start) < window {
                return true;
            }
            if w.held > 0 {
                out.push(Repeated {
                    count: w.held,
                    message: k.message.clone(),
                    level: w.level,
                    target: w.target,
                    window,
                });
            }
            false
        });
        out
    }

    pub fn tracked(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests;
