//! `[sources.<name>]`: where events come from.
//!
//! Adding a source type takes a raw struct (what the table may say), a
//! settings struct (what it means), a [`SourceKind`] variant and one arm in
//! [`check_sources`] (plus its lines in `describe.rs`); the name is listed
//! in [`SOURCE_TYPES`].

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

use super::check::{Checker, NamedTable};
use super::raw::one_of;
use super::units::{format_size, Count, Dur, Size};
use crate::seglog::LogOptions;

/// The `type` values a source may have.
pub const SOURCE_TYPES: &[&str] = &["file", "otlp_http"];

/// One configured source.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// The table's name: 1-64 characters of `[A-Za-z0-9_-]`. Sinks refer to
    /// it in `inputs`; events carry it.
    pub name: String,
    /// What the source is.
    pub kind: SourceKind,
}

/// The kinds of source, by `type`.
#[derive(Debug, Clone)]
pub enum SourceKind {
    /// `type = "file"`: tail log files.
    File(FileSourceSettings),
    /// `type = "otlp_http"`: an OTLP/HTTP receiver.
    OtlpHttp(OtlpHttpSourceSettings),
}

impl SourceKind {
    /// The `type` value.
    pub fn type_name(&self) -> &'static str {
        match self {
            SourceKind::File(_) => "file",
            SourceKind::OtlpHttp(_) => "otlp_http",
        }
    }
}

/// `type = "file"`: tails files matching globs, one event per line.
#[derive(Debug, Clone)]
pub struct FileSourceSettings {
    /// Glob patterns of files to tail, absolute (relative ones were resolved
    /// against the config file's directory); never empty.
    pub include: Vec<String>,
    /// Glob patterns of files to skip even if `include` matches them.
    pub exclude: Vec<String>,
    /// Where to start in a file found with no checkpoint on the first start.
    pub start_at: FileStartAt,
    /// How often to look for new and rotated files; never zero.
    pub scan_interval: Duration,
    /// How many leading bytes identify a file across renames; never zero.
    pub fingerprint_bytes: u64,
    /// How long a file rotated away must be idle before it is no longer
    /// read; never zero.
    pub rotate_wait: Duration,
    /// Close a file unchanged for this long (reopened when it changes);
    /// never zero.
    pub idle_close: Duration,
    /// Longest line; longer ones are cut into pieces of this size. Never
    /// zero, and leaves room in a log segment.
    pub max_line_bytes: u64,
    /// Emit a last line that has no newline after the file has been idle
    /// this long; never zero.
    pub line_idle_timeout: Duration,
    /// Join continuation lines into one event.
    pub multiline: Option<MultilineSettings>,
}

/// `multiline.*` of a file source.
#[derive(Debug, Clone)]
pub struct MultilineSettings {
    /// A line matching this starts a new event; other lines continue the
    /// current one.
    pub start_pattern: regex::Regex,
    /// Emit the current event after this long without a next line; never
    /// zero.
    pub timeout: Duration,
}

/// `start_at` of a file source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStartAt {
    /// Read files found on first start from their first byte (a backfill).
    Beginning,
    /// Read only what is written after the first start.
    End,
}

impl<'de> Deserialize<'de> for FileStartAt {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(
            d,
            &[
                ("beginning", FileStartAt::Beginning),
                ("end", FileStartAt::End),
            ],
        )
    }
}

/// `type = "otlp_http"`: an OTLP/HTTP (protobuf or JSON) receiver.
#[derive(Debug, Clone)]
pub struct OtlpHttpSourceSettings {
    /// Address to listen on; port 0 picks a free port (for tests).
    pub listen: SocketAddr,
    /// Largest request body, before and after decompression; never zero.
    pub max_body_bytes: u64,
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: NonZeroUsize,
    /// Time allowed to receive a request's headers; never zero.
    pub header_timeout: Duration,
    /// Time allowed for a whole request, body included; never zero.
    pub request_timeout: Duration,
    /// A file holding the bearer token clients must send; `None` means no
    /// authentication.
    pub bearer_token_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<TlsSettings>,
}

/// A certificate chain and its private key, both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key of the leaf certificate.
    pub key_file: PathBuf,
}

/// Defaults of a file source, also used by the docs' tests.
pub(crate) mod file_defaults {
    use std::time::Duration;
    pub const SCAN_INTERVAL: Duration = Duration::from_secs(10);
    pub const FINGERPRINT_BYTES: u64 = 1 << 10;
    pub const ROTATE_WAIT: Duration = Duration::from_secs(5);
    pub const IDLE_CLOSE: Duration = Duration::from_secs(300);
    pub const MAX_LINE_BYTES: u64 = 256 << 10;
    pub const LINE_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
    pub const MULTILINE_TIMEOUT: Duration = Duration::from_secs(1);
}

/// Defaults of an OTLP/HTTP source.
pub(crate) mod otlp_defaults {
    use super::*;
    pub const LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4318));
    pub const MAX_BODY_BYTES: u64 = 8 << 20;
    pub const MAX_CONNECTIONS: u64 = 256;
    pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
}

/// Room left in a segment beside a line for the event's own fields (id,
/// source, path, timestamps).
pub(crate) const EVENT_OVERHEAD: u64 = 4 << 10;

/// `[sources.<name>]` with `type = "file"`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFileSource {
    /// `"file"` (already read to choose this struct).
    #[serde(rename = "type")]
    _type: IgnoredAny,
    /// Glob patterns of files to tail. Required, non-empty.
    include: Option<Spanned<Vec<Spanned<String>>>>,
    /// Glob patterns to skip. Default: none.
    exclude: Option<Vec<Spanned<String>>>,
    /// `"beginning"` or `"end"`. Default `"end"`.
    start_at: Option<Spanned<FileStartAt>>,
    /// Default `"10s"`.
    scan_interval: Option<Spanned<Dur>>,
    /// Default `"1KiB"`; 16 B to 1 MiB.
    fingerprint_bytes: Option<Spanned<Size>>,
    /// Default `"5s"`: a rotated file is read until idle this long.
    rotate_wait: Option<Spanned<Dur>>,
    /// Default `"5m"`.
    idle_close: Option<Spanned<Dur>>,
    /// Default `"256KiB"`; at most `log.segment_size` − 4 KiB.
    max_line_bytes: Option<Spanned<Size>>,
    /// Default `"5s"`.
    line_idle_timeout: Option<Spanned<Dur>>,
    /// Default: absent, one event per line.
    multiline: Option<Spanned<RawMultiline>>,
}

/// `multiline.*`, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with start_pattern and timeout"
)]
struct RawMultiline {
    /// A regex (Rust `regex` syntax) matching the first line of an event.
    /// Required when `multiline` is present.
    start_pattern: Option<Spanned<String>>,
    /// Default `"1s"`.
    timeout: Option<Spanned<Dur>>,
}

/// `[sources.<name>]` with `type = "otlp_http"`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOtlpHttpSource {
    /// `"otlp_http"` (already read to choose this struct).
    #[serde(rename = "type")]
    _type: IgnoredAny,
    /// Default `"127.0.0.1:4318"`.
    listen: Option<Spanned<String>>,
    /// Default `"8MiB"`; 1 KiB to 1 GiB.
    max_body_bytes: Option<Spanned<Size>>,
    /// Default 256; 1 to 65536.
    max_connections: Option<Spanned<Count>>,
    /// Default `"10s"`.
    header_timeout: Option<Spanned<Dur>>,
    /// Default `"30s"`.
    request_timeout: Option<Spanned<Dur>>,
    /// Default: absent, no authentication.
    bearer_token_file: Option<Spanned<String>>,
    /// Never allowed: accepted here only to refuse it with the reason.
    bearer_token: Option<Spanned<IgnoredAny>>,
    /// Default: absent, plain HTTP.
    tls: Option<Spanned<RawTls>>,
}

/// `tls.*`, as written: both or neither.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with cert_file and key_file")]
struct RawTls {
    cert_file: Option<Spanned<String>>,
    key_file: Option<Spanned<String>>,
}

/// Checks every `[sources.<name>]` table. Returns the valid sources and the
/// names of all declared ones (valid or not).
pub(crate) fn check_sources(
    cx: &mut Checker<'_>,
    log: &LogOptions,
) -> (Vec<SourceSettings>, Vec<String>) {
    let (tables, declared) = cx.named_tables("sources", "source", SOURCE_TYPES);
    let mut sources = Vec::new();
    for t in &tables {
        let kind = match t.kind.as_str() {
            "file" => cx
                .deserialize::<RawFileSource>(&t.key, t.value)
                .map(|raw| SourceKind::File(raw.check(cx, t, log))),
            "otlp_http" => cx
                .deserialize::<RawOtlpHttpSource>(&t.key, t.value)
                .map(|raw| SourceKind::OtlpHttp(raw.check(cx, t))),
            // `named_tables` let through only SOURCE_TYPES.
            _ => None,
        };
        if let Some(kind) = kind {
            sources.push(SourceSettings {
                name: t.name.clone(),
                kind,
            });
        }
    }
    (sources, declared)
}

impl RawFileSource {
    fn check(
        self,
        cx: &mut Checker<'_>,
        t: &NamedTable<'_>,
        log: &LogOptions,
    ) -> FileSourceSettings {
        use file_defaults as d;
        let key = |k: &str| format!("{}.{k}", t.key);

        let mut include = Vec::new();
        match &self.include {
            None => cx.error(
                Some(t.span()),
                &t.key,
                "missing `include`: list the files to tail as globs, like include = [\"/var/log/syslog\", \"/var/log/*.log\"]",
            ),
            Some(list) if list.get_ref().is_empty() => cx.error(
                Some(list.span()),
                &key("include"),
                "the include list is empty, so this source would read nothing: list at least one \
                 file or glob, like [\"/var/log/*.log\"]",
            ),
            Some(list) => {
                cx.note(&key("include"), list);
                include = patterns(cx, &key("include"), list.get_ref());
            }
        }
        let exclude = match &self.exclude {
            Some(list) => patterns(cx, &key("exclude"), list),
            None => Vec::new(),
        };
        let start_at = match &self.start_at {
            Some(v) => {
                cx.note(&key("start_at"), v);
                *v.get_ref()
            }
            None => FileStartAt::End,
        };
        let scan_interval = cx.duration(
            &key("scan_interval"),
            self.scan_interval.as_ref(),
            d::SCAN_INTERVAL,
            Some("a zero interval would scan the directories in a busy loop"),
        );
        let fingerprint_bytes = cx.size(
            &key("fingerprint_bytes"),
            self.fingerprint_bytes.as_ref(),
            d::FINGERPRINT_BYTES,
            16,
            1 << 20,
        );
        let rotate_wait = cx.duration(
            &key("rotate_wait"),
            self.rotate_wait.as_ref(),
            d::ROTATE_WAIT,
            Some(
                "a rotated file would be dropped before its writer finished, losing its last lines",
            ),
        );
        let idle_close = cx.duration(
            &key("idle_close"),
            self.idle_close.as_ref(),
            d::IDLE_CLOSE,
            Some("files would be closed and reopened on every read"),
        );
        let segment_room = log
            .segment_bytes
            .min(64 << 20)
            .saturating_sub(EVENT_OVERHEAD);
        let mut max_line_bytes = cx.size(
            &key("max_line_bytes"),
            self.max_line_bytes.as_ref(),
            d::MAX_LINE_BYTES,
            64,
            u64::MAX,
        );
        if max_line_bytes > segment_room {
            let span = self
                .max_line_bytes
                .as_ref()
                .map(|v| v.span())
                .or(Some(t.span()));
            let default = if self.max_line_bytes.is_none() {
                " (the default)"
            } else {
                ""
            };
            cx.error(
                span,
                &key("max_line_bytes"),
                format!(
                    "a line of {}{default} would not fit in one log segment: an event must fit in a segment \
                     (log.segment_size = {}, less {} for the event's own fields); lower \
                     max_line_bytes to {} or less, or raise log.segment_size",
                    format_size(max_line_bytes),
                    format_size(log.segment_bytes),
                    format_size(EVENT_OVERHEAD),
                    format_size(segment_room)
                ),
            );
            max_line_bytes = segment_room;
        }
        let line_idle_timeout = cx.duration(
            &key("line_idle_timeout"),
            self.line_idle_timeout.as_ref(),
            d::LINE_IDLE_TIMEOUT,
            Some("a line still being written would be cut in two"),
        );
        let multiline = self.multiline.as_ref().and_then(|m| {
            let mkey = key("multiline");
            let timeout = cx.duration(
                &format!("{mkey}.timeout"),
                m.get_ref().timeout.as_ref(),
                d::MULTILINE_TIMEOUT,
                Some("every line would be emitted on its own"),
            );
            let Some(pattern) = &m.get_ref().start_pattern else {
                cx.error(
                    Some(m.span()),
                    &mkey,
                    "multiline needs start_pattern: a regex matching the first line of each event, \
                     like multiline.start_pattern = '^\\S' (lines starting with a non-blank); or \
                     remove multiline",
                );
                return None;
            };
            let pkey = format!("{mkey}.start_pattern");
            cx.note(&pkey, pattern);
            match regex::Regex::new(pattern.get_ref()) {
                Ok(start_pattern) => Some(MultilineSettings {
                    start_pattern,
                    timeout,
                }),
                Err(e) => {
                    cx.error(
                        Some(pattern.span()),
                        &pkey,
                        format!(
                            "not a valid regular expression (Rust regex syntax; in TOML, write it \
                             in 'single quotes' so backslashes stay as they are):\n{e}"
                        ),
                    );
                    None
                }
            }
        });
        FileSourceSettings {
            include,
            exclude,
            start_at,
            scan_interval,
            fingerprint_bytes,
            rotate_wait,
            idle_close,
            max_line_bytes,
            line_idle_timeout,
            multiline,
        }
    }
}

/// Glob patterns, each non-empty and resolved against the config's
/// directory.
fn patterns(cx: &mut Checker<'_>, key: &str, list: &[Spanned<String>]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        if p.get_ref().trim().is_empty() {
            cx.error(
                Some(p.span()),
                &format!("{key}[{i}]"),
                "an empty pattern matches nothing: remove it or write a path or glob",
            );
            continue;
        }
        cx.note(&format!("{key}[{i}]"), p);
        out.push(cx.resolve(p.get_ref()).to_string_lossy().into_owned());
    }
    out
}

impl RawOtlpHttpSource {
    fn check(self, cx: &mut Checker<'_>, t: &NamedTable<'_>) -> OtlpHttpSourceSettings {
        use otlp_defaults as d;
        let key = |k: &str| format!("{}.{k}", t.key);

        let listen = cx.listen(&key("listen"), self.listen.as_ref(), d::LISTEN);
        let max_body_bytes = cx.size(
            &key("max_body_bytes"),
            self.max_body_bytes.as_ref(),
            d::MAX_BODY_BYTES,
            1 << 10,
            1 << 30,
        );
        let max_connections = cx.count(
            &key("max_connections"),
            self.max_connections.as_ref(),
            d::MAX_CONNECTIONS,
            1,
            65536,
        );
        let max_connections =
            NonZeroUsize::new(max_connections as usize).unwrap_or(NonZeroUsize::MIN);
        let header_timeout = cx.duration(
            &key("header_timeout"),
            self.header_timeout.as_ref(),
            d::HEADER_TIMEOUT,
            Some("every request would time out at once"),
        );
        let request_timeout = cx.duration(
            &key("request_timeout"),
            self.request_timeout.as_ref(),
            d::REQUEST_TIMEOUT,
            Some("every request would time out at once"),
        );
        if header_timeout > request_timeout {
            let span = self
                .header_timeout
                .as_ref()
                .or(self.request_timeout.as_ref())
                .map(|v| v.span());
            cx.warn(
                span,
                &key("header_timeout"),
                "is longer than request_timeout, which covers the whole request: it can never \
                 fire; make it shorter than request_timeout",
            );
        }
        if let Some(v) = &self.bearer_token {
            cx.error(
                Some(v.span()),
                &key("bearer_token"),
                "a token must not be written in the config: config files are often \
                 world-readable and end up in backups, bug reports and `holdfast check` output. \
                 Put the token alone in a file readable only by holdfast (chmod 600) and set \
                 bearer_token_file = \"/etc/holdfast/otlp.token\" instead",
            );
        }
        let bearer_token_file = cx.path(&key("bearer_token_file"), self.bearer_token_file.as_ref());
        let tls = self.tls.as_ref().and_then(|tls| {
            let tkey = key("tls");
            let raw = tls.get_ref();
            let cert = cx.path(&format!("{tkey}.cert_file"), raw.cert_file.as_ref());
            let keyf = cx.path(&format!("{tkey}.key_file"), raw.key_file.as_ref());
            match (&raw.cert_file, &raw.key_file) {
                (Some(_), Some(_)) => Some(TlsSettings {
                    cert_file: cert?,
                    key_file: keyf?,
                }),
                (Some(present), None) | (None, Some(present)) => {
                    let (set, missing) = if raw.cert_file.is_some() { ("cert_file", "key_file") } else { ("key_file", "cert_file") };
                    cx.error(
                        Some(present.span()),
                        &format!("{tkey}.{set}"),
                        format!(
                            "tls.{set} is set but tls.{missing} is not: TLS needs both the \
                             certificate chain and its private key (PEM files); set \
                             tls.{missing}, or remove tls to serve plain HTTP"
                        ),
                    );
                    None
                }
                (None, None) => {
                    cx.error(
                        Some(tls.span()),
                        &tkey,
                        "tls is empty: set tls.cert_file and tls.key_file, or remove tls to serve plain HTTP",
                    );
                    None
                }
            }
        });
        if !listen.ip().is_loopback() {
            let problem = match (bearer_token_file.is_some(), tls.is_some()) {
                (false, false) => Some(
                    "without TLS or a bearer token: anyone who can reach this port can write \
                     telemetry, and it travels in clear text; set bearer_token_file and \
                     tls.cert_file/tls.key_file, or listen on 127.0.0.1",
                ),
                (true, false) => Some(
                    "without TLS: the bearer token and the telemetry travel in clear text; set \
                     tls.cert_file and tls.key_file",
                ),
                (false, true) => Some(
                    "without a bearer token: anyone who can reach this port can write telemetry; \
                     set bearer_token_file, or make sure a firewall limits who can connect",
                ),
                (true, true) => None,
            };
            if let Some(problem) = problem {
                let span = self.listen.as_ref().map(|v| v.span());
                cx.warn(
                    span,
                    &key("listen"),
                    format!("listens on {listen} {problem}"),
                );
            }
        }
        OtlpHttpSourceSettings {
            listen,
            max_body_bytes,
            max_connections,
            header_timeout,
            request_timeout,
            bearer_token_file,
            tls,
        }
    }
}
